#include "core/protocol/inline_system.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(InlineSystemAsUser, GivesInlineSystemMessagesTheUserRoleAndChangesNothingElse) {
  const std::string body =
      R"({"model":"m","system":[{"type":"text","text":"be brief"}],"messages":[)"
      R"({"role":"user","content":"hi"},{"role":"assistant","content":"hello"},)"
      R"({"role": "system","content":"<total_tokens>900 tokens left</total_tokens>"},)"
      R"({"content":[{"type":"text","text":"\"role\":\"system\""}],"role":"system"}],"stream":true})";
  const std::optional<std::string> out = InlineSystemAsUser(body);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(
      *out,
      R"({"model":"m","system":[{"type":"text","text":"be brief"}],"messages":[)"
      R"({"role":"user","content":"hi"},{"role":"assistant","content":"hello"},)"
      R"({"role": "user","content":"<total_tokens>900 tokens left</total_tokens>"},)"
      R"({"content":[{"type":"text","text":"\"role\":\"system\""}],"role":"user"}],"stream":true})");
}

TEST(InlineSystemAsUser, LeavesABodyWithoutThemAlone) {
  EXPECT_FALSE(InlineSystemAsUser(R"({"system":"s","messages":[{"role":"user","content":"x"}]})"));
  // A "system" role elsewhere than a message of the top-level "messages" is not one.
  EXPECT_FALSE(InlineSystemAsUser(
      R"({"metadata":{"role":"system"},"messages":[{"role":"user","content":[{"role":"system"}]}]})"));
  EXPECT_FALSE(InlineSystemAsUser("{\"messages\":[{\"role\":\"system\""));  // cut off
  EXPECT_FALSE(InlineSystemAsUser("not json"));
  EXPECT_FALSE(InlineSystemAsUser(R"({"messages":"system"})"));
}

}  // namespace
}  // namespace warden
