#include "util/percent_decode.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(PercentDecode, DecodesEscapesAndLeavesTheRest) {
  std::string out;
  ASSERT_TRUE(PercentDecode("Qwen%2FQwen3%204B", &out));
  EXPECT_EQ(out, "Qwen/Qwen3 4B");
  ASSERT_TRUE(PercentDecode("a+b%e2%9C%93", &out));
  EXPECT_EQ(out, "a+b\u2713");
  ASSERT_TRUE(PercentDecode("", &out));
  EXPECT_EQ(out, "");
}

TEST(PercentDecode, RejectsAPercentWithoutTwoHexDigits) {
  std::string out;
  EXPECT_FALSE(PercentDecode("50%", &out));
  EXPECT_FALSE(PercentDecode("%4", &out));
  EXPECT_FALSE(PercentDecode("%zz", &out));
}

}  // namespace
}  // namespace warden
