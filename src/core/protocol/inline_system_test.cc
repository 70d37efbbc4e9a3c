#include "core/protocol/inline_system.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

std::string AsUser(std::string body, int expected_changes) {
  EXPECT_EQ(InlineSystemAsUser(&body), expected_changes) << body;
  return body;
}

TEST(InlineSystemAsUser, GivesInlineSystemMessagesTheUserRoleAndChangesNothingElse) {
  const std::string body =
      R"({"model":"m","system":[{"type":"text","text":"be brief"}],"messages":[)"
      R"({"role":"user","content":"hi"},{"role":"assistant","content":"hello"},)"
      R"({"role": "system","content":"<total_tokens>900 tokens left</total_tokens>"},)"
      R"({"content":[{"type":"text","text":"\"role\":\"system\""}],"r\u006fle":"system"}],"stream":true})";
  EXPECT_EQ(
      AsUser(body, 2),
      R"({"model":"m","system":[{"type":"text","text":"be brief"}],"messages":[)"
      R"({"role":"user","content":"hi"},{"role":"assistant","content":"hello"},)"
      R"({"role": "user","content":"<total_tokens>900 tokens left</total_tokens>"},)"
      R"({"content":[{"type":"text","text":"\"role\":\"system\""}],"r\u006fle":"user"}],"stream":true})");
  // Whether simdjson can read the body in place (room for its padding) or not.
  std::string roomy = body;
  roomy.reserve(body.size() + 256);
  EXPECT_EQ(AsUser(roomy, 2), AsUser(body, 2));
}

// vLLM puts the system messages that lead "messages" into the system prompt on every turn.
TEST(InlineSystemAsUser, LeavesTheLeadingSystemMessagesAlone) {
  EXPECT_EQ(
      AsUser(R"({"messages":[{"role":"system","content":"a"},{"role":"system","content":"b"},)"
             R"({"role":"user","content":"c"},{"role":"system","content":"d"}]})",
             1),
      R"({"messages":[{"role":"system","content":"a"},{"role":"system","content":"b"},)"
      R"({"role":"user","content":"c"},{"role":"user","content":"d"}]})");
}

TEST(InlineSystemAsUser, LeavesABodyWithoutThemAlone) {
  for (
      const char* body : {
          R"({"system":"s","messages":[{"role":"user","content":"x"}]})",
          // A "system" role elsewhere than a message of the top-level "messages" is not one.
          R"({"metadata":{"role":"system"},"messages":[{"role":"user","content":[{"role":"system"}]}]})",
          "{\"messages\":[{\"role\":\"user\"},{\"role\":\"system\"",  // cut off
          "not json",
          R"({"messages":"system"})",
      }) {
    EXPECT_EQ(AsUser(body, 0), body);
  }
}

}  // namespace
}  // namespace warden
