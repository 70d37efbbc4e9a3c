#include "gateway/prompt_count.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(PromptCount, ReadsTheInputTokensOfACountTokensAnswer) {
  EXPECT_EQ(InputTokensOf(R"({"input_tokens":24008})"), 24008);
  EXPECT_EQ(InputTokensOf(
                R"({"input_tokens":24008,"context_management":{"original_input_tokens":24008}})"),
            24008);
  // No count: an error body, a count that is not a whole positive number, not JSON.
  EXPECT_EQ(InputTokensOf(R"({"type":"error","error":{"message":"x"}})"), 0);
  EXPECT_EQ(InputTokensOf(R"({"input_tokens":"24008"})"), 0);
  EXPECT_EQ(InputTokensOf(R"({"input_tokens":-3})"), 0);
  EXPECT_EQ(InputTokensOf(R"({"input_tokens":1.5})"), 0);
  EXPECT_EQ(InputTokensOf(R"([24008])"), 0);
  EXPECT_EQ(InputTokensOf("not json"), 0);
}

}  // namespace
}  // namespace warden
