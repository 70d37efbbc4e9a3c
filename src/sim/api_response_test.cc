#include "sim/api_response.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

namespace warden {
namespace {

namespace json = boost::json;

// The data of each event in a server-sent event stream, as JSON.
std::vector<json::value> EventData(const std::string& stream) {
  std::vector<json::value> out;
  for (size_t at = stream.find("data: "); at != std::string::npos;
       at = stream.find("data: ", at + 1)) {
    const size_t end = stream.find('\n', at);
    out.push_back(json::parse(stream.substr(at + 6, end - at - 6)));
  }
  return out;
}

ReplyIdentity WithToolUse() {
  return {.id = "msg-1",
          .model = "m",
          .tool_use_name = "Agent",
          .tool_use_input = R"({"prompt":"Say hi."})"};
}

// A reply asked for a tool call (SimRequest's test hook) ends with it, as Anthropic's API streams
// one: a tool_use block whose input comes as one input_json_delta, and stop_reason tool_use.
TEST(SimReply, AnAnthropicStreamEndsWithTheToolCallAskedFor) {
  auto formatter = MakeReplyFormatter(SimApi::kMessages, WithToolUse());
  std::string stream = formatter->StreamToken("Sure", {.prompt_tokens = 12}, true);
  stream += formatter->StreamEnd({.prompt_tokens = 12, .completion_tokens = 1});
  const std::vector<json::value> events = EventData(stream);
  std::vector<std::string> types;
  for (const json::value& e : events) types.emplace_back(e.at("type").as_string());
  EXPECT_EQ(types, (std::vector<std::string>{
                       "message_start", "content_block_start", "content_block_delta",
                       "content_block_stop", "content_block_start", "content_block_delta",
                       "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(events[4].at("index"), 1);
  EXPECT_EQ(events[4].at("content_block").at("type"), "tool_use");
  EXPECT_EQ(events[4].at("content_block").at("name"), "Agent");
  EXPECT_EQ(json::parse(events[5].at("delta").at("partial_json").as_string()),
            json::parse(R"({"prompt":"Say hi."})"));
  EXPECT_EQ(events[7].at("delta").at("stop_reason"), "tool_use");
}

// A Responses API stream opens as OpenAI's and vLLM's do: created, in_progress, then the item and
// its part; sequence numbers count up from 0.
TEST(SimReply, AResponsesStreamOpensWithCreatedThenInProgress) {
  auto formatter = MakeReplyFormatter(SimApi::kResponses, {.id = "r1", .model = "m"});
  std::string stream = formatter->StreamToken("Hi", {.prompt_tokens = 3}, true);
  stream += formatter->StreamEnd({.prompt_tokens = 3, .completion_tokens = 1});
  const std::vector<json::value> events = EventData(stream);
  ASSERT_GE(events.size(), 5u);
  const std::vector<std::string> opening = {
      "response.created", "response.in_progress", "response.output_item.added",
      "response.content_part.added", "response.output_text.delta"};
  for (size_t i = 0; i < opening.size(); ++i) {
    EXPECT_EQ(events[i].at("type"), opening[i].c_str()) << i;
    EXPECT_EQ(events[i].at("sequence_number"), i);
  }
  EXPECT_EQ(events[1].at("response").at("status"), "in_progress");
}

// With no text before it (a reply of end-of-sequence alone), the tool call is block 0.
TEST(SimReply, AToolCallWithoutTextIsTheFirstBlock) {
  auto formatter = MakeReplyFormatter(SimApi::kMessages, WithToolUse());
  std::string stream = formatter->StreamToken("", {.prompt_tokens = 12}, true);
  stream += formatter->StreamEnd({.prompt_tokens = 12, .completion_tokens = 1});
  const std::vector<json::value> events = EventData(stream);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[1].at("type"), "content_block_start");
  EXPECT_EQ(events[1].at("index"), 0);
  EXPECT_EQ(events[1].at("content_block").at("type"), "tool_use");
  EXPECT_EQ(events[2].at("index"), 0);
  EXPECT_EQ(events[3].at("index"), 0);
  EXPECT_EQ(events[4].at("delta").at("stop_reason"), "tool_use");
}

TEST(SimReply, AnAnthropicBodyEndsWithTheToolCallAskedFor) {
  auto formatter = MakeReplyFormatter(SimApi::kMessages, WithToolUse());
  const json::value body =
      json::parse(formatter->WholeBody("Sure", {.prompt_tokens = 12, .completion_tokens = 1}));
  EXPECT_EQ(body.at("stop_reason"), "tool_use");
  const json::array& content = body.at("content").as_array();
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0].at("text"), "Sure");
  EXPECT_EQ(content[1].at("type"), "tool_use");
  EXPECT_EQ(content[1].at("input"), json::parse(R"({"prompt":"Say hi."})"));
}

// An Anthropic stream's message_start says the prompt's usage as its message_delta does: the
// tokens computed, read from the cache and written to it (as Anthropic's API, and vLLM since its
// streamed-usage fix), so a client that merges the two events' usage field by field counts the
// prompt once.
TEST(SimReply, AnAnthropicStreamOpensWithThePromptsUsageSplitAsItEnds) {
  auto formatter = MakeReplyFormatter(SimApi::kMessages, {.id = "msg-1", .model = "m"});
  const ReplyUsage prompt{.prompt_tokens = 100, .cached_tokens = 64, .created_cache_tokens = 32};
  std::string stream = formatter->StreamToken("Hi", prompt, true);
  ReplyUsage end = prompt;
  end.completion_tokens = 1;
  end.finish = FinishReason::kStop;
  stream += formatter->StreamEnd(end);
  const std::vector<json::value> events = EventData(stream);
  const json::value& opening = events.front().at("message").at("usage");
  EXPECT_EQ(opening,
            json::parse(R"({"input_tokens":4,"output_tokens":0,)"
                        R"("cache_creation_input_tokens":32,"cache_read_input_tokens":64})"));
  const json::value& closing = events[events.size() - 2].at("usage");
  EXPECT_EQ(closing,
            json::parse(R"({"input_tokens":4,"output_tokens":1,)"
                        R"("cache_creation_input_tokens":32,"cache_read_input_tokens":64})"));
}

// Nor did one aborted (its engine put to sleep in abort mode).
TEST(SimReply, AnAbortedReplyMakesNoToolCall) {
  auto formatter = MakeReplyFormatter(SimApi::kMessages, WithToolUse());
  std::string stream = formatter->StreamToken("Sure", {.prompt_tokens = 12}, false);
  stream += formatter->StreamEnd(
      {.prompt_tokens = 12, .completion_tokens = 1, .finish = FinishReason::kAborted});
  EXPECT_EQ(stream.find("tool_use"), std::string::npos) << stream;
}

// A reply cut at max_tokens never got to its tool call.
TEST(SimReply, AReplyCutAtMaxTokensMakesNoToolCall) {
  auto formatter = MakeReplyFormatter(SimApi::kMessages, WithToolUse());
  const json::value body = json::parse(formatter->WholeBody(
      "Sure", {.prompt_tokens = 12, .completion_tokens = 1, .finish = FinishReason::kLength}));
  EXPECT_EQ(body.at("stop_reason"), "max_tokens");
  EXPECT_EQ(body.at("content").as_array().size(), 1u);
}

// An OpenAI stream's last token comes with the finish reason and stop_reason, as vLLM sends it;
// an end of sequence adds no text ("content": "").
TEST(SimReply, AnOpenAiStreamsLastTokenComesWithItsFinish) {
  auto chat = MakeReplyFormatter(SimApi::kChatCompletions, {.id = "chatcmpl-1", .model = "m"});
  std::string stream = chat->StreamToken("Hi", {.prompt_tokens = 3}, false) +
                       chat->StreamToken("there", {.prompt_tokens = 3}, true);
  stream += chat->StreamEnd(
      {.prompt_tokens = 3, .completion_tokens = 2, .finish = FinishReason::kLength});
  std::vector<json::value> events = EventData(stream.substr(0, stream.find("data: [DONE]")));
  ASSERT_EQ(events.size(), 3u);  // role, "Hi", "there" with the finish
  const json::value& last = events[2].at("choices").at(0);
  EXPECT_EQ(last.at("delta").at("content"), "there");
  EXPECT_EQ(last.at("finish_reason"), "length");
  EXPECT_TRUE(last.at("stop_reason").is_null());
  EXPECT_TRUE(events[1].at("choices").at(0).at("finish_reason").is_null());
  EXPECT_FALSE(events[1].at("choices").at(0).as_object().contains("stop_reason"));

  auto stopped = MakeReplyFormatter(SimApi::kChatCompletions, {.id = "chatcmpl-2", .model = "m"});
  stream = stopped->StreamToken("Hi", {.prompt_tokens = 3}, false) +
           stopped->StreamToken("", {.prompt_tokens = 3}, true);
  stream += stopped->StreamEnd(
      {.prompt_tokens = 3, .completion_tokens = 2, .finish = FinishReason::kStop});
  events = EventData(stream.substr(0, stream.find("data: [DONE]")));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].at("choices").at(0).at("delta").at("content"), "");
  EXPECT_EQ(events[2].at("choices").at(0).at("finish_reason"), "stop");

  auto completion = MakeReplyFormatter(SimApi::kCompletions, {.id = "cmpl-1", .model = "m"});
  stream = completion->StreamToken("Hi", {.prompt_tokens = 3}, false) +
           completion->StreamToken("there", {.prompt_tokens = 3}, true);
  stream += completion->StreamEnd(
      {.prompt_tokens = 3, .completion_tokens = 2, .finish = FinishReason::kLength});
  events = EventData(stream.substr(0, stream.find("data: [DONE]")));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].at("choices").at(0).at("text"), "there");
  EXPECT_EQ(events[1].at("choices").at(0).at("finish_reason"), "length");
}

// On chat completions the call comes as vLLM streams one: a delta with the whole call (its input
// as the arguments' JSON text) after the text, and finish_reason tool_calls; the same in a whole
// body. A reply cut at max_tokens makes no call.
TEST(SimReply, AChatReplyEndsWithTheToolCallAskedFor) {
  ReplyIdentity id = WithToolUse();
  id.id = "chatcmpl-1";
  auto formatter = MakeReplyFormatter(SimApi::kChatCompletions, id);
  std::string stream = formatter->StreamToken("Sure", {.prompt_tokens = 12}, true);
  stream += formatter->StreamEnd({.prompt_tokens = 12, .completion_tokens = 1});
  const std::vector<json::value> events = EventData(stream.substr(0, stream.find("data: [DONE]")));
  ASSERT_EQ(events.size(), 4u);  // role, text, the call, the finish
  const json::value& call = events[2].at("choices").at(0).at("delta").at("tool_calls").at(0);
  EXPECT_EQ(call.at("index"), 0);
  EXPECT_EQ(call.at("id"), "chatcmpl-tool-1");
  EXPECT_EQ(call.at("type"), "function");
  EXPECT_EQ(call.at("function").at("name"), "Agent");
  EXPECT_EQ(json::parse(call.at("function").at("arguments").as_string()),
            json::parse(R"({"prompt":"Say hi."})"));
  EXPECT_EQ(events[3].at("choices").at(0).at("finish_reason"), "tool_calls");

  const json::value whole = json::parse(
      MakeReplyFormatter(SimApi::kChatCompletions, id)->WholeBody("Sure", {.prompt_tokens = 12}));
  const json::value& choice = whole.at("choices").at(0);
  EXPECT_EQ(choice.at("finish_reason"), "tool_calls");
  EXPECT_EQ(choice.at("message").at("content"), "Sure");
  EXPECT_EQ(choice.at("message").at("tool_calls").at(0).at("function").at("name"), "Agent");

  const json::value cut =
      json::parse(MakeReplyFormatter(SimApi::kChatCompletions, id)
                      ->WholeBody("Sure", {.prompt_tokens = 12, .finish = FinishReason::kLength}));
  EXPECT_EQ(cut.at("choices").at(0).at("finish_reason"), "length");
  EXPECT_TRUE(cut.at("choices").at(0).at("message").at("tool_calls").as_array().empty());
}

}  // namespace
}  // namespace warden
