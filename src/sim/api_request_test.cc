#include "sim/api_request.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "core/chat_template.h"
#include "core/tokenizer.h"

namespace warden {
namespace {

TEST(SimRequest, MalformedJsonIsA400) {
  SimRequest r;
  SimError e;
  EXPECT_FALSE(ParseSimRequest(SimApi::kChatCompletions, "{\"messages\": [", &r, &e));
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("malformed JSON"), std::string::npos);
}

// As vLLM's server: a byte-order mark before the JSON is read past; a null model is the served
// one on OpenAI's APIs, and missing on Anthropic's.
TEST(SimRequest, ABomAndANullModelAreTakenAsVllmTakesThem) {
  SimRequest r;
  SimError e;
  EXPECT_TRUE(ParseSimRequest(SimApi::kChatCompletions,
                              "\xEF\xBB\xBF{\"model\":null,\"messages\":[{\"role\":\"user\","
                              "\"content\":\"hi\"}]}",
                              &r, &e))
      << e.message;
  EXPECT_TRUE(r.model.empty());
  EXPECT_FALSE(ParseSimRequest(SimApi::kMessages,
                               R"({"model":null,"max_tokens":5,"messages":[{"role":"user",)"
                               R"("content":"hi"}]})",
                               &r, &e));
  EXPECT_EQ(e.status, 400);
}

TEST(SimRequest, ChatRendersThroughTheTemplate) {
  SimRequest r;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(SimApi::kChatCompletions,
                              R"({"model":"m","stream":true,"stream_options":{"include_usage":true},
                                  "max_tokens":7,"messages":[{"role":"system","content":"be brief"},
                                  {"role":"user","content":[{"type":"text","text":"hi there"}]}]})",
                              &r, &e))
      << e.message;
  std::vector<TokenId> expected;
  AppendMessage(Role::kSystem, "be brief", &expected);
  AppendMessage(Role::kUser, "hi there", &expected);
  AppendGenerationPrompt(&expected);
  EXPECT_EQ(r.prompt, expected);
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 7);
}

// Claude Code 2.1.154 and later sends messages of role "ctx" and "msg": vLLM takes them as the
// user's (issue #44000), so a request with them renders like the same one with "user"; a role no
// version sends is refused as vLLM refuses it.
TEST(SimRequest, ClaudeCodesCtxAndMsgRolesRenderAsTheUsers) {
  const auto render = [](std::string_view first_role, std::string_view second_role) {
    SimRequest r;
    SimError e;
    const std::string body = fmt::format(
        R"({{"model":"m","max_tokens":7,"messages":[{{"role":"{}","content":"the repo"}},
            {{"role":"assistant","content":"ok"}},{{"role":"{}","content":"go on"}}]}})",
        first_role, second_role);
    EXPECT_TRUE(ParseSimRequest(SimApi::kMessages, body, &r, &e)) << e.message;
    return r.prompt;
  };
  const std::vector<TokenId> as_user = render("user", "user");
  EXPECT_EQ(render("ctx", "msg"), as_user);
  EXPECT_EQ(render("msg", "ctx"), as_user);
  SimRequest r;
  SimError e;
  for (std::string_view role : {"robot", "tool", "developer"}) {
    EXPECT_FALSE(ParseSimRequest(
        SimApi::kMessages,
        fmt::format(R"({{"model":"m","max_tokens":7,"messages":[{{"role":"{}","content":"x"}}]}})",
                    role),
        &r, &e))
        << role;
    EXPECT_EQ(e.status, 400);
  }
}

// vLLM's `priority` extension: an integer on the OpenAI APIs (null: 0); not read on Anthropic's.
TEST(SimRequest, PriorityIsReadOnTheOpenAiApisOnly) {
  const auto parse = [](SimApi api, std::string_view extra, SimError* e) {
    SimRequest r;
    const std::string body =
        api == SimApi::kCompletions ? fmt::format(R"({{"model":"m","prompt":"hi"{}}})", extra)
        : api == SimApi::kResponses
            ? fmt::format(R"({{"model":"m","input":"hi"{}}})", extra)
            : fmt::format(
                  R"({{"model":"m","max_tokens":3,"messages":[{{"role":"user","content":"hi"}}]{}}})",
                  extra);
    return ParseSimRequest(api, body, &r, e) ? r.priority : -999;
  };
  SimError e;
  for (SimApi api : {SimApi::kChatCompletions, SimApi::kCompletions, SimApi::kResponses}) {
    EXPECT_EQ(parse(api, R"(,"priority":-4)", &e), -4);
    EXPECT_EQ(parse(api, R"(,"priority":null)", &e), 0);
    EXPECT_EQ(parse(api, R"(,"priority":1.5)", &e), -999);
    EXPECT_EQ(e.param, "priority");
    EXPECT_EQ(e.status, 400);
  }
  EXPECT_EQ(parse(SimApi::kMessages, R"(,"priority":-4)", &e), 0);
}

// OpenAI's Responses API renders like the same chat: instructions as the system message, the
// input's messages, a function call and its output in the history (reasoning items dropped).
TEST(SimRequest, ResponsesRenderLikeTheSameChat) {
  SimRequest r;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(
      SimApi::kResponses,
      R"({"model":"m","instructions":"be brief","max_output_tokens":9,"stream":true,"input":[
           {"role":"user","content":[{"type":"input_text","text":"list files"}]},
           {"type":"reasoning","summary":[]},
           {"type":"function_call","name":"ls","arguments":"{}","call_id":"c1"},
           {"type":"function_call_output","call_id":"c1","output":"a.txt"},
           {"type":"message","role":"assistant","content":[{"type":"output_text","text":"one"}]}]})",
      &r, &e))
      << e.message;
  std::vector<TokenId> expected;
  AppendMessage(Role::kSystem, "be brief", &expected);
  AppendMessage(Role::kUser, "list files", &expected);
  AppendMessage(Role::kAssistant, R"({"name":"ls","arguments":"{}"})", &expected);
  AppendMessage(Role::kTool, "a.txt", &expected);
  AppendMessage(Role::kAssistant, "one", &expected);
  AppendGenerationPrompt(&expected);
  EXPECT_EQ(r.prompt, expected);
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_TRUE(r.stream);

  SimRequest text_input;
  ASSERT_TRUE(ParseSimRequest(SimApi::kResponses, R"({"input":"hi there"})", &text_input, &e));
  expected.clear();
  AppendMessage(Role::kUser, "hi there", &expected);
  AppendGenerationPrompt(&expected);
  EXPECT_EQ(text_input.prompt, expected);
  EXPECT_FALSE(ParseSimRequest(SimApi::kResponses, R"({"model":"m"})", &r, &e));
  EXPECT_FALSE(ParseSimRequest(SimApi::kResponses, R"({"input":["not an item"]})", &r, &e));
  EXPECT_FALSE(ParseSimRequest(SimApi::kResponses, R"({"input":[{"role":"robot"}]})", &r, &e));
  EXPECT_EQ(e.status, 400);
}

TEST(SimRequest, MessagesDropClaudeCodesAttributionBlock) {
  SimRequest with, without;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages,
                              R"({"model":"m","max_tokens":8,"max_tokens":5,"system":[
                                   {"type":"text","text":"x-anthropic-billing-header: cc_version=1; cc_entrypoint=cli;"},
                                   {"type":"text","text":"You are an agent"}],
                                  "messages":[{"role":"user","content":"go"}]})",
                              &with, &e));
  ASSERT_TRUE(ParseSimRequest(
      SimApi::kMessages,
      R"({"model":"m","max_tokens":8,"max_tokens":5,"system":[{"type":"text","text":"You are an agent"}],
                                  "messages":[{"role":"user","content":"go"}]})",
      &without, &e));
  EXPECT_EQ(with.prompt, without.prompt);
}

// A `system` given as one string is kept whole, as vLLM keeps it, even when it begins with the
// attribution line (only a block of its own is dropped).
TEST(SimRequest, MessagesKeepASystemStringThatBeginsWithTheAttributionLine) {
  SimRequest one_string, blocks;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages,
                              R"({"model":"m","max_tokens":8,"system":
                                   "x-anthropic-billing-header: cc_version=1;\nYou are an agent",
                                  "messages":[{"role":"user","content":"go"}]})",
                              &one_string, &e))
      << e.message;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages,
                              R"({"model":"m","max_tokens":8,"system":[
                                   {"type":"text","text":"x-anthropic-billing-header: cc_version=1;"},
                                   {"type":"text","text":"You are an agent"}],
                                  "messages":[{"role":"user","content":"go"}]})",
                              &blocks, &e));
  EXPECT_GT(one_string.prompt.size(), blocks.prompt.size() + 4);
}

// Claude Code's mid-conversation-system beta puts system messages into "messages": as vLLM
// takes them, leading ones join the system prompt and later ones are system turns where they
// stand, so that the next turn's prompt still extends this one's.
TEST(SimRequest, MessagesTakeSystemMessagesWithoutChangingEarlierTurns) {
  SimRequest leading, joined, turn1, turn2;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8,"system":"be brief",
      "messages":[{"role":"system","content":[{"type":"text","text":"and kind"}]},
                  {"role":"user","content":"go"}]})",
                              &leading, &e))
      << e.message;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages,
                              R"({"model":"m","max_tokens":8,"system":"be brief and kind",
      "messages":[{"role":"user","content":"go"}]})",
                              &joined, &e));
  EXPECT_EQ(leading.prompt, joined.prompt);

  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8,"system":"s",
      "messages":[{"role":"user","content":"go"},{"role":"system","content":"agents: a b"}]})",
                              &turn1, &e))
      << e.message;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8,"system":"s",
      "messages":[{"role":"user","content":"go"},{"role":"system","content":"agents: a b"},
                  {"role":"assistant","content":"done"},{"role":"user","content":"more"}]})",
                              &turn2, &e));
  const size_t generation_prompt = 3;  // "<|im_start|>assistant\n", which turn 2 replaces
  ASSERT_GT(turn2.prompt.size(), turn1.prompt.size());
  EXPECT_TRUE(std::equal(turn1.prompt.begin(), turn1.prompt.end() - generation_prompt,
                         turn2.prompt.begin()));
  std::vector<TokenId> agents;
  Tokenize("agents: a b", &agents);
  EXPECT_NE(std::search(turn1.prompt.begin(), turn1.prompt.end(), agents.begin(), agents.end()),
            turn1.prompt.end());
}

// For a chat template that refuses a system message after the first, vLLM merges them all into
// the system prompt: a turn that brings a new one changes the prompt right after the system
// prompt's old text (vLLM issue #53393).
TEST(SimRequest, MergedInlineSystemMessagesJoinTheSystemPrompt) {
  const SimRenderOptions merge{.merge_inline_system = true};
  SimRequest merged, joined, turn1, turn2;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8,"system":"be brief",
      "messages":[{"role":"user","content":"go"},{"role":"system","content":"and kind"},
                  {"role":"assistant","content":"ok"},{"role":"user","content":"more"}]})",
                              &merged, &e, merge))
      << e.message;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages,
                              R"({"model":"m","max_tokens":8,"system":"be brief and kind",
      "messages":[{"role":"user","content":"go"},{"role":"assistant","content":"ok"},
                  {"role":"user","content":"more"}]})",
                              &joined, &e));
  EXPECT_EQ(merged.prompt, joined.prompt);

  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8,"system":"s",
      "messages":[{"role":"user","content":"go"},{"role":"system","content":"left 9"}]})",
                              &turn1, &e, merge));
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8,"system":"s",
      "messages":[{"role":"user","content":"go"},{"role":"system","content":"left 9"},
                  {"role":"assistant","content":"done"},{"role":"user","content":"more"},
                  {"role":"system","content":"left 8"}]})",
                              &turn2, &e, merge));
  const auto [first_difference, unused] =
      std::mismatch(turn1.prompt.begin(), turn1.prompt.end(), turn2.prompt.begin());
  std::vector<TokenId> head;
  Tokenize("s left 9", &head);
  EXPECT_LT(first_difference - turn1.prompt.begin(), 8 + static_cast<long>(head.size()));
}

TEST(SimRequest, MessagesNeedUserAssistantOrSystemRoles) {
  SimRequest r;
  SimError e;
  EXPECT_FALSE(ParseSimRequest(
      SimApi::kMessages,
      R"({"model":"m","max_tokens":8,"messages":[{"role":"tool","content":"x"}]})", &r, &e));
  EXPECT_EQ(e.status, 400);
  EXPECT_FALSE(ParseSimRequest(
      SimApi::kMessages,
      R"({"model":"m","max_tokens":8,"messages":[{"role":"robot","content":"x"}]})", &r, &e));
  EXPECT_FALSE(
      ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8,"messages":[]})", &r, &e));
  EXPECT_FALSE(ParseSimRequest(SimApi::kMessages, R"([1,2])", &r, &e));
  // Messages of the wrong type are said to be so, not to be missing (found by review).
  EXPECT_FALSE(ParseSimRequest(SimApi::kMessages,
                               R"({"model":"m","max_tokens":8,"messages":"oops"})", &r, &e));
  EXPECT_EQ(e.message, "messages: Input should be a valid list");
  EXPECT_FALSE(ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8,"messages":null})",
                               &r, &e));
  EXPECT_EQ(e.message, "messages: Input should be a valid list");  // as pydantic says of a null
  EXPECT_FALSE(ParseSimRequest(SimApi::kMessages, R"({"model":"m","max_tokens":8})", &r, &e));
  EXPECT_EQ(e.message, "messages: Field required");
  // As vLLM's AnthropicMessagesRequest: model and max_tokens are required (count_tokens needs
  // neither).
  const std::string messages = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_FALSE(ParseSimRequest(SimApi::kMessages, R"({"model":"m",)" + messages + "}", &r, &e));
  EXPECT_NE(e.message.find("'max_tokens': field required"), std::string::npos) << e.message;
  EXPECT_FALSE(ParseSimRequest(SimApi::kMessages, R"({"max_tokens":8,)" + messages + "}", &r, &e));
  EXPECT_TRUE(ParseSimRequest(SimApi::kCountTokens, "{" + messages + "}", &r, &e)) << e.message;
}

TEST(SimRequest, CompletionsAcceptTextOrTokenIds) {
  SimRequest a, b;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":"one two"})", &a, &e));
  EXPECT_EQ(a.prompt.size(), 2u);
  ASSERT_TRUE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":[5,6,7]})", &b, &e));
  EXPECT_EQ(b.prompt, (std::vector<TokenId>{5, 6, 7}));
  EXPECT_FALSE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":[]})", &b, &e));
}

// What the simulator does not run (several choices, a batch of prompts) is refused with a 400
// that says so, not answered with fewer choices than asked for.
TEST(SimRequest, SeveralChoicesOrABatchOfPromptsAreRefusedNotCutShort) {
  SimRequest r;
  SimError e;
  const std::string chat = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_TRUE(ParseSimRequest(SimApi::kChatCompletions, "{\"n\":1," + chat + "}", &r, &e));
  EXPECT_TRUE(ParseSimRequest(SimApi::kChatCompletions, "{\"n\":null," + chat + "}", &r, &e));
  ASSERT_FALSE(ParseSimRequest(SimApi::kChatCompletions, "{\"n\":3," + chat + "}", &r, &e));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "n");
  EXPECT_NE(e.message.find("n > 1 is not simulated"), std::string::npos) << e.message;
  EXPECT_FALSE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":"x","n":2})", &r, &e));
  EXPECT_FALSE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":"x","n":0})", &r, &e));
  EXPECT_EQ(e.message, "'n' must be at least 1");
  ASSERT_FALSE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":["a b","c d"]})", &r, &e));
  EXPECT_NE(e.message.find("a batch of prompts is not simulated"), std::string::npos) << e.message;
  EXPECT_FALSE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":[[1,2],[3]]})", &r, &e));
  EXPECT_NE(e.message.find("a batch of prompts"), std::string::npos) << e.message;
}

TEST(SimRequest, AMaxTokensBeyondInt64IsJustLarge) {
  SimRequest r;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(SimApi::kChatCompletions,
                              R"({"max_tokens":18446744073709551615,"messages":[{"role":"user",)"
                              R"("content":"hi"}]})",
                              &r, &e))
      << e.message;
  EXPECT_EQ(r.max_tokens, 1 << 30);
}

TEST(SimRequest, RejectsBadMaxTokens) {
  SimRequest r;
  SimError e;
  EXPECT_FALSE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":"x","max_tokens":0})", &r, &e));
  EXPECT_FALSE(ParseSimRequest(SimApi::kCompletions, R"({"prompt":"x","max_tokens":"9"})", &r, &e));
}

// The captured Claude Code turns: the second turn's prompt extends the first's.
std::string FixtureBody(const char* name) {
  std::ifstream f(std::string(WARDEN_FIXTURES_DIR) + "/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  auto doc = boost::json::parse(ss.str());
  return boost::json::serialize(doc.at("body"));
}

TEST(SimRequest, ClaudeCodeSecondTurnExtendsTheFirst) {
  SimRequest t1, t2;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages, FixtureBody("claude-code-turn1.json"), &t1, &e))
      << e.message;
  ASSERT_TRUE(ParseSimRequest(SimApi::kMessages, FixtureBody("claude-code-turn2.json"), &t2, &e))
      << e.message;
  EXPECT_GT(t1.prompt.size(), 5000u);
  ASSERT_GT(t2.prompt.size(), t1.prompt.size());
  // Everything up to the generation prompt of turn 1 is a prefix of turn 2.
  const size_t shared = t1.prompt.size() - 3;
  EXPECT_TRUE(std::equal(t1.prompt.begin(), t1.prompt.begin() + shared, t2.prompt.begin()));
}

// The test hook for agents' tools: the last user message asks for a tool call after the marker.
TEST(SimRequest, ALastUserMessageCanAskForAToolCall) {
  const std::string tools =
      R"("tools":[{"name":"Read","input_schema":{}},{"name":"Agent","input_schema":{}}],)";
  const std::string ask =
      R"(warden-sim-tool-use: {\"name\":\"Agent\",\"input\":{\"prompt\":\"Say hi.\"}})";
  SimRequest r;
  SimError e;
  ASSERT_TRUE(ParseSimRequest(
      SimApi::kMessages,
      R"({"model":"m","max_tokens":8,"max_tokens":9,)" + tools +
          R"("messages":[{"role":"user","content":[{"type":"text","text":")" + ask +
          R"( then more"}]},{"role":"system","content":"an environment note after it"}]})",
      &r, &e))
      << e.message;
  EXPECT_EQ(r.tool_use_name, "Agent");
  EXPECT_EQ(boost::json::parse(r.tool_use_input), boost::json::parse(R"({"prompt":"Say hi."})"));

  // Not for a tool the request does not offer, nor once the tool's result follows, nor without
  // an input object, nor on other APIs.
  const std::vector<std::pair<SimApi, std::string>> others = {
      {SimApi::kMessages,
       R"({"model":"m","max_tokens":8,"max_tokens":9,"tools":[{"name":"Read"}],"messages":[{"role":"user","content":")" +
           ask + R"("}]})"},
      {SimApi::kMessages,
       R"({"model":"m","max_tokens":8,"max_tokens":9,"messages":[{"role":"user","content":")" +
           ask + R"("}]})"},
      {SimApi::kMessages,
       R"({"model":"m","max_tokens":8,"max_tokens":9,)" + tools +
           R"("messages":[{"role":"user","content":")" + ask + R"("},)" +
           R"({"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Agent","input":{}}]},)" +
           R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"done"}]}]})"},
      {SimApi::kMessages,
       R"({"model":"m","max_tokens":8,"max_tokens":9,)" + tools +
           R"("messages":[{"role":"user","content":"warden-sim-tool-use: {\"name\":\"Agent\"}"}]})"},
      {SimApi::kMessages,
       R"({"model":"m","max_tokens":8,"max_tokens":9,)" + tools +
           R"("messages":[{"role":"user","content":"warden-sim-tool-use: {\"name\":"}]})"},
      {SimApi::kChatCompletions, R"({"messages":[{"role":"user","content":")" + ask + R"("}]})"},
      {SimApi::kCompletions, R"({"prompt":")" + ask + R"("})"},
  };
  for (const auto& [api, body] : others) {
    SimRequest other;
    ASSERT_TRUE(ParseSimRequest(api, body, &other, &e)) << e.message << " " << body;
    EXPECT_EQ(other.tool_use_name, "") << body;
  }
}

// The same hook on OpenAI's chat completions: tools offered as functions, a developer message
// after the ask aside; once the call was made (a tool message follows), no more.
TEST(SimRequest, AChatRequestCanAskForAToolCall) {
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"Read","parameters":{}}},)"
      R"({"type":"function","function":{"name":"Agent","parameters":{}}}],)";
  const std::string ask =
      R"(warden-sim-tool-use: {\"name\":\"Agent\",\"input\":{\"prompt\":\"Say hi.\"}})";
  SimRequest r;
  SimError e;
  ASSERT_TRUE(
      ParseSimRequest(SimApi::kChatCompletions,
                      R"({"model":"m",)" + tools +
                          R"("messages":[{"role":"user","content":[{"type":"text","text":")" + ask +
                          R"("}]},{"role":"developer","content":"a note"}]})",
                      &r, &e))
      << e.message;
  EXPECT_EQ(r.tool_use_name, "Agent");
  EXPECT_EQ(boost::json::parse(r.tool_use_input), boost::json::parse(R"({"prompt":"Say hi."})"));

  SimRequest after;
  ASSERT_TRUE(ParseSimRequest(
      SimApi::kChatCompletions,
      R"({"model":"m",)" + tools + R"("messages":[{"role":"user","content":")" + ask + R"("},)" +
          R"({"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",)" +
          R"("function":{"name":"Agent","arguments":"{}"}}]},)" +
          R"({"role":"tool","tool_call_id":"c","content":"done"}]})",
      &after, &e))
      << e.message;
  EXPECT_EQ(after.tool_use_name, "");
}

// As vLLM: stream_options on a chat or text completion that does not stream is a 400; Anthropic's
// API and the Responses API have no such field and let it be.
TEST(SimRequest, StreamOptionsWithoutStreamingAreRefused) {
  SimRequest request;
  SimError e;
  EXPECT_FALSE(
      ParseSimRequest(SimApi::kChatCompletions,
                      R"({"model":"m","max_tokens":2,"stream_options":{"include_usage":true},
                                   "messages":[{"role":"user","content":"go"}]})",
                      &request, &e));
  EXPECT_NE(e.message.find("stream=True"), std::string::npos) << e.message;
  EXPECT_TRUE(ParseSimRequest(SimApi::kChatCompletions,
                              R"({"model":"m","max_tokens":2,"stream_options":{},
                                  "messages":[{"role":"user","content":"go"}]})",
                              &request, &e));
  EXPECT_FALSE(ParseSimRequest(
      SimApi::kCompletions, R"({"model":"m","max_tokens":2,"stream_options":true,"prompt":"go"})",
      &request, &e));
  EXPECT_TRUE(
      ParseSimRequest(SimApi::kMessages,
                      R"({"model":"m","max_tokens":2,"stream_options":{"include_usage":true},
                                  "messages":[{"role":"user","content":"go"}]})",
                      &request, &e))
      << e.message;
  EXPECT_TRUE(ParseSimRequest(SimApi::kResponses,
                              R"({"model":"m","max_output_tokens":2,"input":"go",
                                  "stream_options":{"include_usage":true}})",
                              &request, &e))
      << e.message;
  EXPECT_TRUE(ParseSimRequest(SimApi::kChatCompletions,
                              R"({"model":"m","max_tokens":2,"stream":true,
                                  "stream_options":{"include_usage":true},
                                  "messages":[{"role":"user","content":"go"}]})",
                              &request, &e));
}

}  // namespace
}  // namespace warden
