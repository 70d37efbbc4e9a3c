#include "core/protocol/response_observer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/protocol/reply_content.h"

namespace warden {
namespace {

constexpr std::string_view kAnthropicStream =
    "event: message_start\n"
    "data: "
    "{\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1000,"
    "\"output_tokens\":0}}}\n\n"
    "event: content_block_start\n"
    "data: "
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":"
    "\"\"}}\n\n"
    "event: content_block_delta\n"
    "data: "
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"
    "\"hi\"}}\n\n"
    "event: message_delta\n"
    "data: "
    "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_"
    "tokens\":200,\"output_tokens\":5,\"cache_read_input_tokens\":800,\"cache_creation_input_"
    "tokens\":0}}\n\n"
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

TEST(ResponseObserver, AnthropicStreamFirstTokenAndCacheReads) {
  ResponseObserver o(true);
  const size_t token_at = kAnthropicStream.find("content_block_delta\ndata");
  EXPECT_FALSE(o.Feed(kAnthropicStream.substr(0, token_at)));
  EXPECT_EQ(o.usage().prompt_tokens, 1000);  // from message_start
  EXPECT_EQ(o.usage().cached_tokens, -1);
  EXPECT_TRUE(o.usage().preliminary);  // the split comes with message_delta
  EXPECT_TRUE(o.Feed(kAnthropicStream.substr(token_at)));
  o.Finish();
  EXPECT_EQ(o.usage().prompt_tokens, 1000);
  EXPECT_EQ(o.usage().cached_tokens, 800);
  EXPECT_FALSE(o.usage().preliminary);
  EXPECT_TRUE(o.usage().anthropic);
}

// Counts no engine reports are not believed, and Anthropic's three add up without wrapping.
TEST(ResponseObserver, HugeCountsAreNotBelievedNorWrapped) {
  ResponseObserver whole(false);
  whole.Feed(R"({"type":"message","usage":{"input_tokens":2147483647,"output_tokens":3,)"
             R"("cache_read_input_tokens":2147483647,"cache_creation_input_tokens":2147483647}})");
  whole.Finish();
  EXPECT_EQ(whole.usage().prompt_tokens, -1);
  EXPECT_EQ(whole.usage().output_tokens, 3);
  ResponseObserver large(false);
  large.Feed(R"({"type":"message","usage":{"input_tokens":536870911,"output_tokens":3,)"
             R"("cache_read_input_tokens":536870911,"cache_creation_input_tokens":536870911}})");
  large.Finish();
  EXPECT_EQ(large.usage().prompt_tokens, 3 * 536870911);  // past any context: dropped later
}

// A stream cut before its message_delta (the client stopped it) has only message_start's size.
TEST(ResponseObserver, AnAnthropicStreamCutBeforeItsLastUsageIsPreliminary) {
  ResponseObserver o(true);
  o.Feed(kAnthropicStream.substr(0, kAnthropicStream.find("event: message_delta")));
  o.Finish();
  EXPECT_EQ(o.usage().prompt_tokens, 1000);
  EXPECT_TRUE(o.usage().preliminary);
}

// Older vLLMs put message_start's usage beside its message, not in it: still only an opening count.
TEST(ResponseObserver, AnOpeningUsageBesideTheMessageIsPreliminaryToo) {
  ResponseObserver o(true);
  o.Feed(
      "event: message_start\n"
      "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"role\":\"assistant\"},"
      "\"usage\":{\"input_tokens\":1000,\"output_tokens\":0}}\n\n");
  o.Finish();
  EXPECT_EQ(o.usage().prompt_tokens, 1000);
  EXPECT_TRUE(o.usage().preliminary);
}

// vLLM with --enable-force-include-usage (or a client's continuous_usage_stats) puts a running
// usage on every chunk, the cached share only on the last, whose choices are empty.
TEST(ResponseObserver, AnOpenAiStreamsRunningUsageIsPreliminaryUntilItsLastChunk) {
  const std::string chunk =
      R"(data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":)"
      R"({"content":"%s"}}],"usage":{"prompt_tokens":900,"completion_tokens":%d,"total_tokens":1}})"
      "\n\n";
  const auto with = [&](const char* text, int n) {
    std::string c = chunk;
    c.replace(c.find("%s"), 2, text);
    c.replace(c.find("%d"), 2, std::to_string(n));
    return c;
  };
  for (const bool capture_text : {false, true}) {
    ResponseObserver o(true);
    ReplyText text;
    if (capture_text) o.CaptureText(&text);
    EXPECT_TRUE(o.Feed(with("Hel", 1)));
    EXPECT_TRUE(o.usage().preliminary);
    o.Feed(with("lo", 2));
    EXPECT_EQ(o.usage().prompt_tokens, 900);
    EXPECT_EQ(o.usage().output_tokens, 2);
    EXPECT_TRUE(o.usage().preliminary) << "a stream cut here tells no cached share";
    o.Feed(
        R"(data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":)"
        R"({"prompt_tokens":900,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":640}}})"
        "\n\ndata: [DONE]\n\n");
    o.Finish();
    EXPECT_FALSE(o.usage().preliminary) << capture_text;
    EXPECT_EQ(o.usage().cached_tokens, 640);
    EXPECT_FALSE(o.usage().anthropic);
  }
  ResponseObserver usage_first(true);  // another engine may write usage before choices
  usage_first.Feed(with("Hi", 1));
  usage_first.Feed(
      R"(data: {"id":"c","usage":{"prompt_tokens":900,"completion_tokens":2},"choices":[{"index":0,)"
      R"("delta":{"content":"!"}}]})"
      "\n\n");
  EXPECT_EQ(usage_first.usage().output_tokens, 2);
  EXPECT_TRUE(usage_first.usage().preliminary);
  ResponseObserver whole(false);  // a whole body's usage sits beside its choices, and is final
  whole.Feed(
      R"({"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":9,"completion_tokens":1}})");
  whole.Finish();
  EXPECT_FALSE(whole.usage().preliminary);
  EXPECT_EQ(whole.usage().prompt_tokens, 9);
}

// Found by fuzzing: simdjson's on-demand reader, asked on after it found a document malformed,
// read through a null pointer (a replica's cut or unbalanced event crashed the gateway).
TEST(ResponseObserver, MalformedEventsAreSkipped) {
  for (const bool capture_text : {false, true}) {
    for (const bool after_token : {false, true}) {
      ResponseObserver o(true);
      ReplyText text;
      if (capture_text) o.CaptureText(&text);
      if (after_token) o.Feed("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n");
      for (const char* bad :
           {"data:{\"\":{}\n\n", "data: {\"usage\":{\"prompt_tokens\":\n\n", "data: {\"a\":[}\n\n",
            "data: {\"type\":\"message_start\",\"message\":{\n\n"})
        o.Feed(bad);
      o.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\n\n");
      o.Finish();
      EXPECT_EQ(o.usage().prompt_tokens, 7) << capture_text << after_token;
    }
  }
  ResponseObserver whole(false);
  whole.Feed("{\"usage\":{\"prompt_tokens\":{\"x\":[}");
  whole.Finish();
  EXPECT_EQ(whole.usage().prompt_tokens, -1);
}

TEST(ResponseObserver, SplitsAnywhereInTheStream) {
  for (size_t piece = 1; piece < 40; piece += 7) {
    ResponseObserver o(true);
    int token_feeds = 0;
    for (size_t i = 0; i < kAnthropicStream.size(); i += piece) {
      token_feeds += o.Feed(kAnthropicStream.substr(i, piece)) ? 1 : 0;
    }
    o.Finish();
    EXPECT_EQ(token_feeds, 1) << piece;
    EXPECT_EQ(o.usage().cached_tokens, 800) << piece;
  }
}

// SSE lines may end in LF, CRLF or a lone CR, split anywhere between feeds.
TEST(ResponseObserver, EveryLineEndingOfTheSseFormat) {
  std::string crlf, cr;
  for (char c : kAnthropicStream) {
    crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    cr += c == '\n' ? '\r' : c;
  }
  for (const std::string& stream : {crlf, cr}) {
    for (size_t piece = 1; piece < 40; piece += 3) {
      ResponseObserver o(true);
      int token_feeds = 0;
      for (size_t i = 0; i < stream.size(); i += piece)
        token_feeds += o.Feed(std::string_view(stream).substr(i, piece)) ? 1 : 0;
      o.Finish();
      EXPECT_EQ(token_feeds, 1) << piece;
      EXPECT_EQ(o.usage().prompt_tokens, 1000) << piece;
      EXPECT_EQ(o.usage().cached_tokens, 800) << piece;
    }
  }
}

// A line longer than the limit is skipped whole (never held in memory); the next lines count.
TEST(ResponseObserver, AnSseLineOverTheLimitIsSkipped) {
  ResponseObserver o(true, /*max_json_bytes=*/1000);
  o.Feed("data: {\"junk\":\"");
  for (int i = 0; i < 100; ++i) o.Feed(std::string(100, 'x'));
  o.Feed("\"}\n\n");
  o.Feed(kAnthropicStream);
  o.Finish();
  EXPECT_TRUE(o.saw_token());
  EXPECT_EQ(o.usage().cached_tokens, 800);
}

TEST(ResponseObserver, CountsBeyondAnIntAreNotBelieved) {
  ResponseObserver o(false);
  o.Feed(R"({"usage":{"prompt_tokens":4294967396,"completion_tokens":3,)"
         R"("prompt_tokens_details":{"cached_tokens":0}}})");
  o.Finish();
  EXPECT_EQ(o.usage().prompt_tokens, -1);  // unknown, not 100
  EXPECT_EQ(o.usage().output_tokens, 3);
}

TEST(ResponseObserver, AnthropicWithoutCacheFieldsCountsAsComputed) {
  ResponseObserver o(true);
  o.Feed(
      "data: "
      "{\"type\":\"message_delta\",\"usage\":{\"input_tokens\":300,\"output_tokens\":5}}\n\n");
  EXPECT_EQ(o.usage().prompt_tokens, 300);
  EXPECT_EQ(o.usage().cached_tokens, -1);
}

TEST(ResponseObserver, OpenAiStreamRoleChunkIsNotAToken) {
  ResponseObserver o(true);
  EXPECT_FALSE(o.Feed(
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"));
  EXPECT_TRUE(o.Feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"));
  EXPECT_FALSE(o.Feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"y\"}}]}\n\n"));
  o.Feed(
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":2,"
      "\"prompt_tokens_details\":{\"cached_tokens\":96}}}\n\ndata: [DONE]\n\n");
  o.Finish();
  EXPECT_EQ(o.usage().prompt_tokens, 120);
  EXPECT_EQ(o.usage().cached_tokens, 96);
}

TEST(ResponseObserver, CompletionsTextIsAToken) {
  ResponseObserver o(true);
  EXPECT_TRUE(o.Feed("data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\r\n\r\n"));
}

TEST(ResponseObserver, WholeJsonBodyUsage) {
  ResponseObserver o(false);
  o.Feed("{\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":50,");
  o.Feed("\"completion_tokens\":3}}");
  o.Finish();
  EXPECT_EQ(o.usage().prompt_tokens, 50);
  EXPECT_EQ(o.usage().cached_tokens, -1);
}

// A whole body's usage is read from its last "usage" key only where that key is the root's; a
// key of that name inside a tool's input, or ending a key with an escaped quote, is not taken for
// it (the body is then parsed whole).
TEST(ResponseObserver, AWholeBodysUsageIsTheRootsWhereverAnotherUsageIs) {
  const auto usage_of = [](std::string_view body) {
    ResponseObserver o(false);
    o.Feed(body);
    o.Finish();
    return std::pair(o.usage().prompt_tokens, o.usage().cached_tokens);
  };
  EXPECT_EQ(usage_of(R"({"usage" : { "prompt_tokens" : 4 , "prompt_tokens_details":)"
                     R"({"cached_tokens":2}} }  )"
                     "\r\n"),
            std::pair(4, 2));
  EXPECT_EQ(usage_of(R"({"type":"message","usage":{"input_tokens":5,"cache_read_input_tokens":3},)"
                     R"("content":[{"type":"tool_use","input":{"usage":{"input_tokens":99}}}]})"),
            std::pair(8, 3));
  EXPECT_EQ(usage_of(R"({"content":[{"type":"tool_use","input":{"usage":{"input_tokens":99}}}]})"),
            std::pair(-1, -1));
  EXPECT_EQ(usage_of(R"({"usage":{"prompt_tokens":9},"x\"usage":{"prompt_tokens":3}})"),
            std::pair(9, -1));
  EXPECT_EQ(usage_of(R"({"x":"\\\"usage","usage":{"prompt_tokens":5}})"), std::pair(5, -1));
  EXPECT_EQ(usage_of(R"({"a":{"usage":{"prompt_tokens":3}}})"), std::pair(-1, -1));
  EXPECT_EQ(usage_of(R"({"usage":{"prompt_tokens":3}} junk)"), std::pair(-1, -1));  // not JSON
  EXPECT_EQ(usage_of(R"([{"usage":{"prompt_tokens":3}}])"), std::pair(-1, -1));
  EXPECT_EQ(usage_of(R"({"usage":{"prompt_tokens":7,"x":"}"}})"), std::pair(7, -1));
}

TEST(ResponseObserver, CapturesTextAndCountsTokenEvents) {
  std::string text;
  ResponseObserver o(true);
  ReplyText text_sink(&text);
  o.CaptureText(&text_sink);
  o.Feed(kAnthropicStream);
  o.Feed(
      "data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\" "
      "there\"}}\n\n");
  o.Finish();
  EXPECT_EQ(text, "hi there");
  EXPECT_EQ(o.token_events(), 2);
  EXPECT_EQ(o.usage().output_tokens, 5);

  std::string chat;
  ResponseObserver c(true);
  ReplyText chat_sink(&chat);
  c.CaptureText(&chat_sink);
  c.Feed(
      "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\" b\"}}]}\n\n");
  EXPECT_EQ(chat, "a b");
  EXPECT_EQ(c.token_events(), 2);

  // n > 1: one choice an event, each with its index; the reply is the first choice's.
  std::string first;
  ResponseObserver n(true);
  ReplyText first_sink(&first);
  n.CaptureText(&first_sink);
  n.Feed(
      "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"x\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\" b\"},\"index\":0}]}\n\n"
      "data: {\"choices\":[{\"index\":2,\"delta\":{\"content\":\"y\"}}]}\n\n");
  EXPECT_EQ(first, "a b");
  EXPECT_EQ(n.token_events(), 4);
}

// A whole body over the size kept (a long answer with logprobs): its usage is read from its tail
// (found by review: such answers counted as usage unknown).
TEST(ResponseObserver, AWholeBodyOverTheLimitHasItsUsageReadFromItsTail) {
  std::string content(5000, 'x');
  content += R"(\"usage\": {\"prompt_tokens\": 1})";  // text that looks like it
  const std::string body = R"({"choices":[{"index":0,"message":{"content":")" + content +
                           R"("}}],"usage": {"prompt_tokens":120,"completion_tokens":9,)"
                           R"("prompt_tokens_details":{"cached_tokens":64}},"x":null})";
  std::string text;
  ReplyText sink(&text);
  ResponseObserver o(false, 1000);
  o.CaptureText(&sink);
  for (size_t at = 0; at < body.size(); at += 700) o.Feed(body.substr(at, 700));
  o.Finish();
  EXPECT_EQ(o.usage().prompt_tokens, 120);
  EXPECT_EQ(o.usage().cached_tokens, 64);
  EXPECT_EQ(o.usage().output_tokens, 9);
  EXPECT_TRUE(text.empty());  // the head, with the text, is not kept
  ResponseObserver cut(false, 1000);
  cut.Feed(body.substr(0, body.size() - 20));
  cut.Finish();
  EXPECT_EQ(cut.usage().prompt_tokens, -1);
}

// A whole body's text: Anthropic's text blocks, OpenAI's first choice, the Responses API's output
// messages; the usage is still read.
TEST(ResponseObserver, CapturesTheTextOfAWholeBody) {
  const auto text_of = [](std::string_view body, int* prompt_tokens = nullptr) {
    std::string text;
    ResponseObserver o(false);
    ReplyText text_sink(&text);
    o.CaptureText(&text_sink);  // without the tool calls' ids
    o.Feed(body.substr(0, body.size() / 2));
    o.Feed(body.substr(body.size() / 2));
    o.Finish();
    if (prompt_tokens) *prompt_tokens = o.usage().prompt_tokens;
    return text;
  };
  int prompt = 0;
  EXPECT_EQ(
      text_of(R"({"id":"m","content":[{"type":"thinking","thinking":"x"},)"
              R"({"type":"text","text":"Hi "},{"type":"tool_use","input":{"text":"no"}},)"
              R"({"text":"there","type":"text"}],"usage":{"input_tokens":7,"output_tokens":2}})",
              &prompt),
      "Hi there");
  EXPECT_EQ(prompt, 7);
  EXPECT_EQ(text_of(R"({"choices":[{"index":0,"message":{"role":"assistant","content":"a\nb"}},)"
                    R"({"message":{"content":"second"}}],"usage":{"prompt_tokens":9}})",
                    &prompt),
            "a\nb");
  EXPECT_EQ(prompt, 9);
  EXPECT_EQ(text_of(R"({"choices":[{"text":" done"}]})"), " done");
  EXPECT_EQ(text_of(R"({"object":"response","output":[{"type":"reasoning","content":[]},)"
                    R"({"type":"message","content":[{"type":"output_text","text":"ok"}]}]})"),
            "ok");
  EXPECT_EQ(text_of(R"({"choices":[{"message":{"content":null,"tool_calls":[]}}]})"), "");
  EXPECT_EQ(text_of(R"({"content":[{"type":"text","text":"cut)"), "");
}

// The ids of the tool calls a reply made, streamed or whole, in both APIs.
TEST(ResponseObserver, CapturesToolCallIds) {
  const auto ids_of = [](bool sse, std::string_view body) {
    std::string text;
    std::vector<std::string> ids;
    ResponseObserver o(sse);
    ReplyText text_sink(&text);
    o.CaptureText(&text_sink, &ids);
    o.Feed(body);
    o.Finish();
    return ids;
  };
  const std::vector<std::string> both = {"toolu_1", "toolu_2"};
  EXPECT_EQ(ids_of(true,
                   "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
                   "{\"type\":\"text\",\"text\":\"\"}}\n\n"
                   "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
                   "{\"id\":\"toolu_1\",\"type\":\"tool_use\",\"name\":\"ls\",\"input\":{}}}\n\n"
                   "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
                   "{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n"
                   "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":"
                   "{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"ls\",\"input\":{}}}\n\n"),
            both);
  EXPECT_EQ(ids_of(true,
                   "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":"
                   "\"toolu_1\",\"function\":{\"name\":\"ls\",\"arguments\":\"\"}}]}}]}\n\n"
                   "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
                   "{\"arguments\":\"{}\"}}]}}]}\n\n"
                   "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":"
                   "\"toolu_2\",\"function\":{\"name\":\"ls\"}}]}}]}\n\n"),
            both);
  EXPECT_EQ(ids_of(false, R"({"content":[{"type":"text","text":"a"},{"type":"tool_use",)"
                          R"("id":"toolu_1","input":{}},{"id":"toolu_2","type":"tool_use"}]})"),
            both);
  EXPECT_EQ(ids_of(false, R"({"choices":[{"message":{"content":null,"tool_calls":[)"
                          R"({"id":"toolu_1","function":{}},{"id":"toolu_2"}]}}]})"),
            both);
  // A delta with text and a call's start at once (vLLM's gpt-oss streaming, coalesced deltas); an
  // id repeated in every piece of its call (some engines do) counts once.
  EXPECT_EQ(ids_of(true,
                   "data: {\"choices\":[{\"delta\":{\"content\":\"Let me look.\",\"tool_calls\":"
                   "[{\"index\":0,\"id\":\"toolu_1\",\"function\":{\"name\":\"ls\"}}]}}]}\n\n"
                   "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":"
                   "\"toolu_1\",\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n"
                   "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":"
                   "\"toolu_2\",\"function\":{\"name\":\"ls\"}}]}}]}\n\n"),
            both);
  // The Responses API: function calls' call_id, streamed (as each item is added) or whole.
  EXPECT_EQ(ids_of(true,
                   "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":"
                   "\"reasoning\",\"id\":\"rs_1\"}}\n\n"
                   "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":"
                   "\"function_call\",\"id\":\"fc_1\",\"call_id\":\"toolu_1\"}}\n\n"
                   "data: {\"type\":\"response.output_item.added\",\"item\":{\"call_id\":"
                   "\"toolu_2\",\"type\":\"function_call\"}}\n\n"),
            both);
  EXPECT_EQ(ids_of(false, R"({"object":"response","output":[{"type":"reasoning","id":"rs"},)"
                          R"({"type":"function_call","id":"fc_1","call_id":"toolu_1"},)"
                          R"({"call_id":"toolu_2","type":"function_call"}]})"),
            both);
}

TEST(ResponseObserver, CountsTokenEventsWithoutCapture) {
  ResponseObserver o(true);
  o.Feed(kAnthropicStream);
  EXPECT_EQ(o.token_events(), 1);
}

// Past the first token, events are looked through for a few markers only (a usage key, each API's
// token delta): found wherever they are in an event, however often their letters come before.
TEST(ResponseObserver, TokenEventsAndALateUsageAreFoundInAnyEvent) {
  const std::string openai_token =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}]}\n\n";
  const auto openai = [&](std::string_view text) {
    std::string event = openai_token;
    return event.replace(event.find("%s"), 2, text);
  };
  ResponseObserver o(true);
  EXPECT_TRUE(o.Feed(openai("first")));
  o.Feed(openai("gggg usage ggg\\\"usag usage\\\" {{{ \\\"delta\\\":{ egg"));
  o.Feed("data: {\"delta\":{\"content\":\"x\"}}\n\n");             // the marker opens the event
  o.Feed("data: {\"choices\":[{\"index\":0,\"delta\":{}}]}\n\n");  // no token: not counted
  EXPECT_EQ(o.token_events(), 3);
  EXPECT_EQ(o.usage().prompt_tokens, -1) << "a usage key inside a string is not one";
  o.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n");
  EXPECT_EQ(o.usage().prompt_tokens, 7);
  o.Feed("data: {\"usage\":{\"prompt_tokens\":8}}\n\n");  // the key at the event's opening
  EXPECT_EQ(o.usage().prompt_tokens, 8);
  o.Feed("data: {\"a\":1,\"usage\"\n\n");  // the key ends the event (and it is cut): no count
  EXPECT_EQ(o.usage().prompt_tokens, 8);

  // A stream of another API after an OpenAI one's events: each API's marker is looked for.
  ResponseObserver anthropic(true);
  anthropic.Feed(
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
      "\"text\":\"a\"}}\n\n");
  anthropic.Feed(openai("b"));
  anthropic.Feed(
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
      "\"text\":\"_c_\"}}\n\n");
  anthropic.Feed("data: {\"type\":\"response.output_text.delta\",\"delta\":\"d\"}\n\n");
  anthropic.Feed("data: {\"type\":\"content_block_stop\",\"index\":0}\n\n");
  EXPECT_EQ(anthropic.token_events(), 4);
}

// An engine's error inside a 200 stream is noticed without text capture too (the gateway counts
// such an answer as no turn): first thing, or after tokens.
TEST(ResponseObserver, NoticesErrorEventsWithoutCapture) {
  ResponseObserver first(true);
  first.Feed("data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\ndata: [DONE]\n\n");
  EXPECT_TRUE(first.error_event());
  ResponseObserver later(true);
  later.Feed(
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
      "data: {\"error\": {\"message\":\"engine died\"}}\n\n");
  EXPECT_TRUE(later.saw_token());
  EXPECT_TRUE(later.error_event());
  ResponseObserver anthropic(true);
  anthropic.Feed(kAnthropicStream);
  anthropic.Feed(
      "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded\"}}\n\n");
  EXPECT_TRUE(anthropic.error_event());
  ResponseObserver fine(true);
  fine.Feed(kAnthropicStream);
  EXPECT_FALSE(fine.error_event());
}

// OpenAI's Responses API (as vLLM streams it): typed events; the first output_text delta is the
// first token; the usage, with cache reads included in input_tokens, comes in response.completed.
constexpr std::string_view kResponsesStream =
    "event: response.created\n"
    "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"status\":\"in_progress\","
    "\"output\":[],\"usage\":null}}\n\n"
    "event: response.output_item.added\n"
    "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":"
    "\"message\",\"content\":[]}}\n\n"
    "event: response.output_text.delta\n"
    "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"delta\":\"hi\"}\n\n"
    "event: response.output_text.delta\n"
    "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"delta\":\" you\"}\n\n"
    "event: response.completed\n"
    "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\","
    "\"output\":[],\"usage\":{\"input_tokens\":900,\"input_tokens_details\":{\"cached_tokens\":"
    "640},\"output_tokens\":2,\"total_tokens\":902}}}\n\n";

TEST(ResponseObserver, ResponsesApiStreamFirstTokenAndCacheReads) {
  ResponseObserver o(true);
  const size_t token_at = kResponsesStream.find("event: response.output_text.delta");
  EXPECT_FALSE(o.Feed(kResponsesStream.substr(0, token_at)));
  const size_t first_delta_end = kResponsesStream.find("\n\n", token_at) + 2;
  EXPECT_TRUE(o.Feed(kResponsesStream.substr(token_at, first_delta_end - token_at)));
  EXPECT_FALSE(o.Feed(kResponsesStream.substr(first_delta_end)));
  o.Finish();
  EXPECT_EQ(o.usage().prompt_tokens, 900);
  EXPECT_EQ(o.usage().cached_tokens, 640);
  EXPECT_EQ(o.usage().output_tokens, 2);
  EXPECT_EQ(o.token_events(), 2);
  EXPECT_EQ(o.response_id(), "r");  // from response.created

  std::string text;
  ResponseObserver captured(true);
  ReplyText text_sink(&text);
  captured.CaptureText(&text_sink);
  captured.Feed(kResponsesStream);
  EXPECT_EQ(text, "hi you");

  ResponseObserver whole(false);  // a whole response object
  whole.Feed(
      "{\"id\":\"r\",\"object\":\"response\",\"output\":[],\"usage\":{\"input_tokens\":50,"
      "\"input_tokens_details\":{\"cached_tokens\":32},\"output_tokens\":4}}");
  whole.Finish();
  EXPECT_EQ(whole.usage().prompt_tokens, 50);
  EXPECT_EQ(whole.usage().cached_tokens, 32);
  EXPECT_EQ(whole.response_id(), "r");

  ResponseObserver chat(false);  // other APIs' ids are not response ids
  chat.Feed(R"({"id":"chatcmpl-1","object":"chat.completion","usage":{"prompt_tokens":5}})");
  chat.Finish();
  EXPECT_EQ(chat.response_id(), "");
}

TEST(ResponseObserver, GarbageIsIgnored) {
  ResponseObserver o(true);
  o.Feed("data: {not json\n\ndata: [1,2]\n\n: comment\n\n");
  o.Finish();
  EXPECT_FALSE(o.saw_token());
  EXPECT_EQ(o.usage().prompt_tokens, -1);
}

// A stream cut anywhere, or with an event broken inside (a closing bracket lost), is read without
// harm by a client that parses every event; a cut one has not ended.
TEST(ResponseObserver, CutOrBrokenEventsAreReadSafelyWhenCapturingText) {
  const std::string openai =
      "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
      "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_"
      "tokens\":1}}\n\ndata: [DONE]\n\n";
  for (const std::string& stream : {std::string(kAnthropicStream), openai}) {
    for (size_t cut = 0; cut < stream.size(); ++cut) {
      std::string text;
      ResponseObserver o(true);
      ReplyText text_sink(&text);
      o.CaptureText(&text_sink);
      o.Feed(std::string_view(stream).substr(0, cut));
      o.Finish();
      if (cut < stream.size() - 1) {
        EXPECT_FALSE(o.stream_ended()) << cut;  // end line cut
      }
    }
    for (size_t i = 0; i < stream.size(); ++i) {
      if (stream[i] != '}' && stream[i] != ']' && stream[i] != '"') continue;
      std::string broken = stream, text;
      broken.erase(i, 1);
      ResponseObserver o(true);
      ReplyText text_sink(&text);
      o.CaptureText(&text_sink);
      o.Feed(broken);
      o.Finish();
    }
    std::string text;
    ResponseObserver whole(true);
    ReplyText text_sink(&text);
    whole.CaptureText(&text_sink);
    whole.Feed(stream);
    whole.Finish();
    EXPECT_TRUE(whole.stream_ended());
    EXPECT_EQ(text, "hi");
  }
}

// Whether a stream said it ended, without capturing text (the gateway ends a stream its replica
// broke off after that properly, with no error event).
TEST(ResponseObserver, KnowsAStreamEndedWithoutCapturingText) {
  const std::string openai =
      "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
      "data: [DONE]\n\n";
  const std::string responses =
      "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":"
      "\"resp_1\"}}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_"
      "text.delta\",\"delta\":\"hi\"}\n\nevent: response.completed\ndata: {\"response\":{"
      "\"id\":\"resp_1\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}},\"type\":"
      "\"response.completed\"}\n\n";
  for (const std::string& stream : {std::string(kAnthropicStream), openai, responses}) {
    ResponseObserver o(true);
    o.Feed(stream);
    EXPECT_TRUE(o.stream_ended()) << stream;
    ResponseObserver cut(true);
    cut.Feed(stream.substr(0, stream.rfind("data:")));
    EXPECT_FALSE(cut.stream_ended()) << stream;
  }
}

// A Responses API reply cut at its token limit ends with response.incomplete, one that failed
// with response.failed (an error), and an error event is an Anthropic or OpenAI stream's last
// word: each ends the stream, read whole or past its first token alone (found by review: taken
// for broken off, the client got an error after a whole answer, and a failed reply counted as
// served).
TEST(ResponseObserver, IncompleteFailedAndErrorEventsEndAStream) {
  const std::string head =
      "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":"
      "\"r\",\"usage\":null}}\n\nevent: response.output_text.delta\ndata: {\"type\":"
      "\"response.output_text.delta\",\"delta\":\"hi\"}\n\n";
  const std::string incomplete =
      "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{"
      "\"id\":\"r\",\"status\":\"incomplete\",\"usage\":{\"input_tokens\":50,"
      "\"input_tokens_details\":{\"cached_tokens\":32},\"output_tokens\":1}}}\n\n";
  const std::string failed =
      "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":"
      "\"r\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\"},\"usage\":null}}"
      "\n\n";
  const std::string anthropic_error =
      "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n";
  const std::string anthropic_head(
      kAnthropicStream.substr(0, kAnthropicStream.find("event: message_delta")));
  for (const bool capture : {false, true}) {
    std::string text;
    ReplyText sink(&text);
    const auto observe = [&](const std::string& stream) {
      auto o = std::make_unique<ResponseObserver>(true);
      if (capture) o->CaptureText(&sink);
      o->Feed(stream);
      o->Finish();
      return o;
    };
    const auto cut = observe(head + incomplete);
    EXPECT_TRUE(cut->stream_ended()) << capture;
    EXPECT_FALSE(cut->error_event()) << capture;
    EXPECT_EQ(cut->usage().prompt_tokens, 50) << capture;
    EXPECT_EQ(cut->usage().cached_tokens, 32) << capture;
    const auto failure = observe(head + failed);
    EXPECT_TRUE(failure->stream_ended()) << capture;
    EXPECT_TRUE(failure->error_event()) << capture;
    const auto overloaded = observe(anthropic_head + anthropic_error);
    EXPECT_TRUE(overloaded->stream_ended()) << capture;
    EXPECT_TRUE(overloaded->error_event()) << capture;
    const auto unfinished = observe(head);
    EXPECT_FALSE(unfinished->stream_ended()) << capture;
  }
}

// Events written with spaces (Python's json.dumps, a proxy that re-encodes them): their end, their
// errors and their tokens are seen as in vLLM's compact JSON.
TEST(ResponseObserver, ReadsEventsWrittenWithSpaces) {
  const std::string start =
      "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\"id\": \"m\", "
      "\"usage\": {\"input_tokens\": 10, \"output_tokens\": 0}}}\n\n"
      "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, "
      "\"delta\": {\"type\": \"text_delta\", \"text\": \"hi\"}}\n\n";
  const std::string more =
      "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, "
      "\"delta\": {\"type\": \"text_delta\", \"text\": \" there\"}}\n\n";
  ResponseObserver ended(true);
  ended.Feed(start + more + "event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n");
  EXPECT_TRUE(ended.stream_ended());
  EXPECT_FALSE(ended.error_event());
  EXPECT_EQ(ended.token_events(), 2);
  ResponseObserver failed(true);
  failed.Feed(start +
              "event: error\ndata: { \"type\": \"error\", \"error\": {\"type\": "
              "\"overloaded_error\"}}\n\n");
  EXPECT_TRUE(failed.error_event());
  EXPECT_TRUE(failed.stream_ended());  // an error event is the stream's last word
  // The Responses API's last event carries the usage beside its end.
  ResponseObserver responses(true);
  responses.Feed(
      "event: response.output_text.delta\ndata: {\"type\": \"response.output_text.delta\", "
      "\"delta\": \"hi\"}\n\nevent: response.completed\ndata: {\"type\": "
      "\"response.completed\", \"response\": {\"id\": \"r\", \"usage\": {\"input_tokens\": 9, "
      "\"input_tokens_details\": {\"cached_tokens\": 4}, \"output_tokens\": 1}}}\n\n");
  EXPECT_TRUE(responses.stream_ended());
  EXPECT_EQ(responses.usage().prompt_tokens, 9);
  EXPECT_EQ(responses.usage().cached_tokens, 4);
}

}  // namespace
}  // namespace warden
