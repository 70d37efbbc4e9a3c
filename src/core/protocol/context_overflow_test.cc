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
           // vllm/entrypoints/utils.py (found by review: passed on in vLLM's words, so Claude
           // Code did not compact).
           Case{"Input length (265330) exceeds model's maximum context length (262144).", 262144,
                265330, -1},
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

// vLLM's renderer (vllm/renderers/params.py) counts a prompt's tokens only up to one past the room
// left for it, counts characters when the text alone is too long, and refuses a max_tokens past
// the context before counting anything: each a lower bound on the prompt.
TEST(ContextOverflow, ReadsTheRenderersWordingsAsLowerBounds) {
  std::optional<ContextOverflow> o = ParseContextOverflow(
      "You passed 769 input tokens and requested 32000 output tokens. However, the model's "
      "context length is only 32768 tokens, resulting in a maximum input length of 768 tokens. "
      "Please reduce the length of the input prompt. (parameter=input_tokens, value=769)");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->max_context, 32768);
  EXPECT_EQ(o->prompt_tokens, 769);
  EXPECT_EQ(o->output_tokens, 32000);
  EXPECT_TRUE(o->prompt_at_least);

  o = ParseContextOverflow(
      "You passed 400000 input characters and requested 1000 output tokens. However, the model's "
      "context length is only 32768 tokens, resulting in a maximum input length of 31768 tokens "
      "(at most 127072 characters). Please reduce the length of the input prompt.");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->prompt_tokens, 100000);  // 400,000 characters at 4 a token
  EXPECT_EQ(o->output_tokens, 1000);
  EXPECT_TRUE(o->prompt_at_least);

  for (const char* words :
       {"max_tokens=40000cannot be greater than max_model_len=max_total_tokens=32768. Please "
        "request fewer output tokens.",
        "max_tokens=40000 cannot be greater than max_model_len=max_total_tokens=32768.",
        "max_tokens=40000 cannot be greater than max_model_len=32768",
        "max_completion_tokens=40000 cannot be greater than max_model_len=32768.",
        // vLLM's VLLMValidationError says the parameter and its value after the message.
        "max_tokens=40000 cannot be greater than max_model_len=max_total_tokens=32768. Please "
        "request fewer output tokens. (parameter=max_tokens, value=40000)"}) {
    o = ParseContextOverflow(words);
    ASSERT_TRUE(o) << words;
    EXPECT_EQ(o->max_context, 32768);
    EXPECT_EQ(o->output_tokens, 40000);
    EXPECT_EQ(o->prompt_tokens, 0);
    EXPECT_TRUE(o->prompt_at_least);
  }
  EXPECT_FALSE(ParseContextOverflow("truncate_prompt_tokens=5 cannot be greater than 3"));
  // No room left at all (max_tokens as large as the context): a prompt, of unknown size.
  o = ParseContextOverflow(
      "You passed 9 input characters and requested 32768 output tokens. However, the model's "
      "context length is only 32768 tokens, resulting in a maximum input length of 0 tokens (at "
      "most 0 characters).");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->prompt_tokens, 1);
  EXPECT_TRUE(o->prompt_at_least);
  // Absurd figures stay within bounds.
  o = ParseContextOverflow(
      "You passed 9223372036854775807 input characters and requested 1 output tokens. However, "
      "the model's context length is only 100 tokens, resulting in a maximum input length of 99 "
      "tokens (at most 1 characters).");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->prompt_tokens, int64_t{1} << 40);
}

// Told "769 + 32000 > 32768" of a 25,000-token prompt, Claude Code would ask for 31,000 tokens,
// be refused again ("1769 + 31000"), and so on a thousand at a time: the request's size says more.
TEST(ContextOverflow, APromptCountedOnlyInPartIsEstimatedFromTheRequestsSize) {
  const std::string truncated =
      R"({"type":"error","error":{"type":"BadRequestError","message":"You passed 769 input tokens and requested 32000 output tokens. However, the model's context length is only 32768 tokens, resulting in a maximum input length of 768 tokens."}})";
  const auto message_of = [](const std::optional<std::string>& body) {
    return std::string(json::parse(*body).at("error").at("message").as_string());
  };
  std::optional<std::string> said = AnthropicContextError(truncated, 25000);
  ASSERT_TRUE(said);
  EXPECT_TRUE(message_of(said).starts_with(
      "input length and `max_tokens` exceed context limit: 25000 + 32000 > 32768"))
      << *said;
  EXPECT_NE(message_of(said).find("estimated from the request's size"), std::string::npos);
  said = AnthropicContextError(truncated, 40000);
  EXPECT_TRUE(message_of(said).starts_with("prompt is too long: 40000 tokens > 32768 maximum"));
  said = AnthropicContextError(truncated, 500);  // smaller than what was counted: the count
  EXPECT_TRUE(message_of(said).starts_with(
      "input length and `max_tokens` exceed context limit: 769 + 32000 > 32768"));
  // The replica's own count, when it gave one (its count_tokens), is said to be so.
  said = AnthropicContextError(truncated, 24008, /*counted=*/true);
  EXPECT_TRUE(message_of(said).starts_with(
      "input length and `max_tokens` exceed context limit: 24008 + 32000 > 32768"));
  EXPECT_NE(message_of(said).find("as the replica's count_tokens counts them"), std::string::npos);
  // An exact count is not second-guessed, nor asked for again.
  const std::string exact =
      R"({"error":{"message":"This model's maximum context length is 32768 tokens. However, your request has 32817 input tokens."}})";
  said = AnthropicContextError(exact, 90000);
  EXPECT_TRUE(message_of(said).starts_with("prompt is too long: 32817 tokens > 32768 maximum"));
  EXPECT_TRUE(PromptCountedInPart(truncated));
  EXPECT_FALSE(PromptCountedInPart(exact));
  EXPECT_FALSE(PromptCountedInPart(R"({"error":{"message":"messages: Field required"}})"));
  EXPECT_FALSE(PromptCountedInPart("not json"));
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

  const std::optional<std::string> input = AnthropicContextError(
      R"({"error":{"message":"Input length (265330) exceeds model's maximum context length (262144).","type":"BadRequestError","param":null,"code":400}})");
  ASSERT_TRUE(input);
  EXPECT_TRUE(message_of(*input).starts_with("prompt is too long: 265330 tokens > 262144 maximum"))
      << *input;

  const std::optional<std::string> exact = AnthropicContextError(
      R"({"error":{"message":"This model's maximum context length is 32768 tokens. However, your request has 32768 input tokens."}})");
  ASSERT_TRUE(exact);
  EXPECT_TRUE(message_of(*exact).starts_with("prompt is too long: 32768 tokens > 32767 maximum"))
      << *exact;
  EXPECT_FALSE(AnthropicContextError(R"({"error":{"message":"messages: Field required"}})"));
  EXPECT_FALSE(AnthropicContextError("not json"));
  EXPECT_FALSE(AnthropicContextError(
      R"({"error":{"message":"This model's maximum context length is 100 tokens. However, your request has 50 input tokens."}})"))
      << "no overflow in the figures";
}

}  // namespace
}  // namespace warden
