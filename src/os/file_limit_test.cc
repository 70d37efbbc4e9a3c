#include "os/file_limit.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace warden {
namespace {

rlimit Current() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit;
}

TEST(FileLimit, RaisesTheSoftLimitToTheHardOneUnderTheCeiling) {
  const rlimit start = Current();
  if (start.rlim_max < 64) GTEST_SKIP() << "hard limit too low to test";
  rlimit lowered = start;
  lowered.rlim_cur = 32;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);

  const FileLimit capped = RaiseOpenFileLimit(48);
  EXPECT_EQ(capped.before, 32u);
  EXPECT_EQ(capped.now, 48u);
  EXPECT_EQ(Current().rlim_cur, 48u);

  const FileLimit raised = RaiseOpenFileLimit();
  EXPECT_EQ(raised.before, 48u);
  EXPECT_EQ(raised.now, std::min<uint64_t>(start.rlim_max, uint64_t{1} << 20));
  EXPECT_EQ(Current().rlim_cur, raised.now);
  EXPECT_EQ(Current().rlim_max, start.rlim_max);  // the hard limit is left alone

  const FileLimit again = RaiseOpenFileLimit();
  EXPECT_EQ(again.before, again.now);  // nothing left to raise
  setrlimit(RLIMIT_NOFILE, &start);
}

}  // namespace
}  // namespace warden
