#include "gateway/seq_limit_watch.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(SeqLimitWatch, RequestsWaitingWithRoomInTheCacheAtTheSameCountTellTheLimit) {
  SeqLimitWatch watch(256);
  for (int i = 1; i < SeqLimitWatch::kScrapesToBelieve; ++i)
    EXPECT_FALSE(watch.Observe(32, 5, 0.4)) << i;
  const auto finding = watch.Observe(32, 5, 0.4);
  ASSERT_TRUE(finding);
  EXPECT_EQ(finding->running, 32);
  EXPECT_FALSE(finding->above);
}

TEST(SeqLimitWatch, AFullCacheOrACountThatMovesTellsNothing) {
  SeqLimitWatch full(256), moving(256), idle(256);
  for (int i = 0; i < 3 * SeqLimitWatch::kScrapesToBelieve; ++i) {
    EXPECT_FALSE(full.Observe(12, 4, 0.95));           // waiting for blocks, not for a slot
    EXPECT_FALSE(moving.Observe(10 + i % 2, 4, 0.3));  // still admitting
    EXPECT_FALSE(idle.Observe(3, 0, 0.1));             // nothing waits
  }
  SeqLimitWatch broken(256);  // a streak starts again after a scrape that does not show it
  for (int i = 0; i < 3 * SeqLimitWatch::kScrapesToBelieve; ++i)
    EXPECT_FALSE(broken.Observe(32, i % 4 == 3 ? 0 : 2, 0.3));
}

// Requests waiting behind a long prompt's prefill (it takes the step's token budget) with fewer
// running than were seen running before: not vLLM's limit. Once the server may have restarted,
// what was seen before counts no more.
TEST(SeqLimitWatch, FewerRunningThanSeenBeforeTellNothing) {
  SeqLimitWatch watch(32);
  EXPECT_FALSE(watch.Observe(4, 0, 0.7));
  for (int i = 0; i < 3 * SeqLimitWatch::kScrapesToBelieve; ++i)
    EXPECT_FALSE(watch.Observe(2, 1, 0.76)) << i;
  watch.Forget();
  for (int i = 1; i < SeqLimitWatch::kScrapesToBelieve; ++i) EXPECT_FALSE(watch.Observe(2, 1, 0.5));
  EXPECT_TRUE(watch.Observe(2, 1, 0.5));
}

TEST(SeqLimitWatch, MoreRunningThanConfiguredIsSaidAtOnce) {
  SeqLimitWatch watch(32);
  EXPECT_FALSE(watch.Observe(32, 0, 0.5));
  const auto finding = watch.Observe(40, 0, 0.5);
  ASSERT_TRUE(finding);
  EXPECT_TRUE(finding->above);
  EXPECT_EQ(finding->running, 40);
}

}  // namespace
}  // namespace warden
