#include "util/ascii_case.h"

#include <gtest/gtest.h>

#include <memory>
#include <string_view>

namespace warden {
namespace {

TEST(AsciiCase, ComparesWithoutRegardToCase) {
  EXPECT_TRUE(IEquals("Content-Encoding", "content-encoding"));
  EXPECT_TRUE(IEquals("", ""));
  EXPECT_FALSE(IEquals("gzip", "gzi"));
  EXPECT_FALSE(IEquals("gzip", "gzjp"));
  EXPECT_FALSE(IEquals("\xc3\xa9", "\xc3\x89"));  // ASCII only: é and É differ
  EXPECT_EQ(AsciiLower('Q'), 'q');
  EXPECT_EQ(AsciiLower('['), '[');
}

// The case Boost 1.81's beast::iequals over-reads: a view that ends where its buffer does, its
// last letters in another case (AddressSanitizer, in the fuzz replay, would say so).
TEST(AsciiCase, ReadsNoFurtherThanItsViews) {
  const std::unique_ptr<char[]> buffer(new char[4]{'g', 'z', 'I', 'P'});
  EXPECT_TRUE(IEquals(std::string_view(buffer.get(), 4), "gzip"));
}

}  // namespace
}  // namespace warden
