#include "core/protocol/context_overflow.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace warden {
namespace {

namespace json = boost::json;

TEST(ContextOverflow, ReadsEachOfVllmsWordings) {
  struct Case {
    std::string_view message;
    long max, prompt, output;
  };
  for (const Case& c : {
           Case{"This model's maximum context length is 32768 tokens. However, your request has "
                "32817 input tokens. Please reduce the length of the input messages.",
                32768, 32817, -1},
           Case{"This model's maximum context length is 4096 tokens. However, you requested 5000 "
                "tokens (4000 in the messages, 1000 in the completion). Please reduce the length "
                "of the messages or completion.",
                4096, 4000, 1000},
           Case{"'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's "
                "maximum context length is 100001 tokens and your request has 81126 input tokens "
                "(32000 > 100001 - 81126). (parameter=max_tokens, value=32000)",
                100001, 81126, 32000},
           Case{"This model's maximum context length is 32768 tokens. However, you requested "
                "40000 tokens in the messages, Please reduce the length of the messages.",
                32768, 40000, -1},
           Case{"This model's maximum context length is 131072 tokens. However, you requested "
                "32000 output tokens and your prompt contains at least 100001 input tokens, for a "
                "total of at least 132001 tokens. Please reduce the length of the input prompt or "
                "the number of requested output tokens.",
                131072, 100001, 32000},
       }) {
    const std::optional<ContextOverflow> o = ParseContextOverflow(c.message);
    ASSERT_TRUE(o) << c.message;
    EXPECT_EQ(o->max_context, c.max) << c.message;
    EXPECT_EQ(o->prompt_tokens, c.prompt) << c.message;
    EXPECT_EQ(o->output_tokens, c.output) << c.message;
  }
  EXPECT_FALSE(ParseContextOverflow("messages: Field required"));
  EXPECT_FALSE(ParseContextOverflow("maximum context length is soon"));
}

// Claude Code compacts on "prompt is too long: N tokens > M maximum" and shortens its reply on
// "input length and `max_tokens` exceed context limit: N + K > M": both in Anthropic's shape.
TEST(ContextOverflow, SaysItInAnthropicsWordsInAnthropicsShape) {
  const auto message_of = [](const std::string& body) {
    const json::value v = json::parse(body);
    EXPECT_EQ(v.at("type"), "error");
    EXPECT_EQ(v.at("error").at("type"), "invalid_request_error");
    return std::string(v.at("error").at("message").as_string());
  };
  const std::optional<std::string> prompt = AnthropicContextError(
      R"({"type":"error","error":{"type":"BadRequestError","message":"This model's maximum context length is 32768 tokens. However, your request has 32817 input tokens."}})");
  ASSERT_TRUE(prompt);
  EXPECT_TRUE(message_of(*prompt).starts_with("prompt is too long: 32817 tokens > 32768 maximum"))
      << *prompt;
  EXPECT_NE(message_of(*prompt).find("the replica said: This model's"), std::string::npos);

  const std::optional<std::string> reply = AnthropicContextError(
      R"({"object":"error","message":"This model's maximum context length is 65536 tokens. However, you requested 32000 output tokens and your prompt contains at least 40000 input tokens, for a total of at least 72000 tokens.","type":"BadRequestError","code":400})");
  ASSERT_TRUE(reply);
  EXPECT_TRUE(message_of(*reply).starts_with(
      "input length and `max_tokens` exceed context limit: 40000 + 32000 > 65536"))
      << *reply;

  EXPECT_FALSE(AnthropicContextError(R"({"error":{"message":"messages: Field required"}})"));
  EXPECT_FALSE(AnthropicContextError("not json"));
  EXPECT_FALSE(AnthropicContextError(
      R"({"error":{"message":"This model's maximum context length is 100 tokens. However, your request has 50 input tokens."}})"))
      << "no overflow in the figures";
}

}  // namespace
}  // namespace warden
