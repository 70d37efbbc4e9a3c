#include "core/routing/session_key.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "core/protocol/inline_data.h"
#include "core/routing/prompt_hasher.h"

namespace warden {
namespace {

BodyFacts Facts(std::string_view body, const SessionKeyConfig& config = {}) {
  BodyFacts facts;
  std::string error;
  EXPECT_TRUE(ReadBodyFacts(body, body.size(), config, &facts, &error)) << error;
  return facts;
}

TEST(SessionKey, ClaudeCodeHeaderComesFirst) {
  const HeaderView headers[] = {{"X-Claude-Code-Session-Id", "abc-123"}, {"x-session-id", "other"}};
  const BodyFacts body =
      Facts(R"({"model":"m","metadata":{"user_id":"user_x_account_y_session_zzz"}})");
  const SessionKey k = ExtractSessionKey(headers, body, {});
  EXPECT_EQ(k.key, "abc-123");
  EXPECT_EQ(k.source, KeySource::kClaudeCodeHeader);
  EXPECT_TRUE(k.sticky());
}

TEST(SessionKey, MetadataUserIdAsJsonString) {
  const BodyFacts body = Facts(
      R"({"metadata":{"user_id":"{\"device_id\":\"00ff\",\"account_uuid\":\"\",\"session_id\":\"5e55-10n\"}"}})");
  const SessionKey k = ExtractSessionKey({}, body, {});
  EXPECT_EQ(k.key, "5e55-10n");
  EXPECT_EQ(k.source, KeySource::kMetadataUserId);
}

TEST(SessionKey, MetadataUserIdInTheOldSessionSuffixForm) {
  const BodyFacts body =
      Facts(R"({"metadata":{"user_id":"user_abc123_account_11-22_session_99aa-bb"}})");
  EXPECT_EQ(ExtractSessionKey({}, body, {}).key, "99aa-bb");
}

TEST(SessionKey, SubagentIsAConversationOfItsOwn) {
  const HeaderView headers[] = {{"x-claude-code-session-id", "s1"},
                                {"x-claude-code-agent-id", "a7"}};
  EXPECT_EQ(ExtractSessionKey(headers, {}, {}).key, "s1:a7");
}

TEST(SessionKey, AuxiliaryRequestsAreNotSticky) {
  const HeaderView headers[] = {{"x-claude-code-session-id", "s1"},
                                {"x-claude-code-request-class", "auxiliary"}};
  const SessionKey k = ExtractSessionKey(headers, {}, {});
  EXPECT_EQ(k.key, "s1");
  EXPECT_TRUE(k.auxiliary);
  EXPECT_FALSE(k.sticky());
}

TEST(SessionKey, ConfiguredHeadersThenBodyFields) {
  SessionKeyConfig config;
  config.headers = {"x-*-session-id"};
  config.body_fields = {"user"};
  const HeaderView headers[] = {{"X-LiteLLM-Session-Id", "lite"}};
  EXPECT_EQ(ExtractSessionKey(headers, Facts(R"({"user":"u1"})", config), config).key, "lite");
  const SessionKey from_body = ExtractSessionKey({}, Facts(R"({"user":"u1"})", config), config);
  EXPECT_EQ(from_body.key, "u1");
  EXPECT_EQ(from_body.source, KeySource::kBodyField);
}

// What OpenAI-style agents send by default: Codex's "session_id" header, OpenAI's
// "prompt_cache_key" (it outranks "user", which may span a user's conversations, wherever the
// fields stand in the body).
TEST(SessionKey, DefaultsCoverCodexAndOpenAIsPromptCacheKey) {
  const SessionKeyConfig config;
  const HeaderView codex[] = {{"session_id", "codex-conv"}};
  EXPECT_EQ(ExtractSessionKey(codex, Facts("{}", config), config).key, "codex-conv");
  const HeaderView dashed[] = {{"Session-Id", "dashed"}};
  EXPECT_EQ(ExtractSessionKey(dashed, Facts("{}", config), config).key, "dashed");
  const std::string body = R"({"user":"alice","model":"m","prompt_cache_key":"conv-7"})";
  const SessionKey key = ExtractSessionKey({}, Facts(body, config), config);
  EXPECT_EQ(key.key, "conv-7");
  EXPECT_EQ(key.source, KeySource::kBodyField);
  EXPECT_EQ(ExtractSessionKey({}, Facts(R"({"user":"alice"})", config), config).key, "alice");
  EXPECT_EQ(
      ExtractSessionKey({}, Facts(R"({"prompt_cache_key":"","user":"bob"})", config), config).key,
      "bob");
}

TEST(SessionKey, AnOverlongKeyIsReplacedByItsHash) {
  const std::string long_id(1000, 'x');
  const HeaderView headers[] = {{"X-Claude-Code-Session-Id", long_id}};
  const SessionKey k = ExtractSessionKey(headers, {}, {});
  EXPECT_TRUE(k.key.starts_with("hashed:"));
  EXPECT_EQ(k.key.size(), 7u + 32u);
  EXPECT_TRUE(k.sticky());
  EXPECT_EQ(ExtractSessionKey(headers, {}, {}).key, k.key);
  const HeaderView other[] = {{"X-Claude-Code-Session-Id", long_id + "y"}};
  EXPECT_NE(ExtractSessionKey(other, {}, {}).key, k.key);
  const HeaderView at_limit[] = {
      {"X-Claude-Code-Session-Id", std::string(kMaxSessionKeyBytes, 'z')}};
  EXPECT_EQ(ExtractSessionKey(at_limit, {}, {}).key, std::string(kMaxSessionKeyBytes, 'z'));
}

// A header's bytes need not be UTF-8; the state file and the peers' JSON must be: such a key is
// hashed (and still sticky), while UTF-8 keys are kept as they are.
TEST(SessionKey, AKeyThatIsNotUtf8IsHashed) {
  const HeaderView latin1[] = {{"X-Claude-Code-Session-Id", "caf\xe9"}};
  const SessionKey k = ExtractSessionKey(latin1, {}, {});
  EXPECT_TRUE(k.key.starts_with("hashed:"));
  EXPECT_TRUE(k.sticky());
  const HeaderView utf8[] = {{"X-Claude-Code-Session-Id", "caf\xc3\xa9"}};
  EXPECT_EQ(ExtractSessionKey(utf8, {}, {}).key, "caf\xc3\xa9");
  const HeaderView agent[] = {{"X-Claude-Code-Session-Id", "s"},
                              {"x-claude-code-agent-id", "\xff"}};
  EXPECT_TRUE(ExtractSessionKey(agent, {}, {}).key.starts_with("hashed:"));
}

TEST(SessionKey, AbsentKeyIsBalanced) {
  const SessionKey k = ExtractSessionKey({}, Facts(R"({"model":"m","messages":[]})"), {});
  EXPECT_TRUE(k.key.empty());
  EXPECT_FALSE(k.sticky());
}

TEST(BodyFacts, LocatesTheModelStringForRewriting) {
  const std::string body = R"({"messages":[], "model" : "claude-\"x\"", "stream":false})";
  const BodyFacts f = Facts(body);
  EXPECT_EQ(f.model, "claude-\"x\"");
  EXPECT_EQ(body.substr(f.model_offset, f.model_length), R"("claude-\"x\"")");
}

TEST(BodyFacts, ReadsModelStreamAndRejectsMalformedJson) {
  const BodyFacts f =
      Facts(R"({"stream":true,"model":"claude-sonnet-4-5","messages":[{"a":[1,2]}]})");
  EXPECT_EQ(f.model, "claude-sonnet-4-5");
  EXPECT_TRUE(f.stream);
  BodyFacts bad;
  std::string error;
  EXPECT_FALSE(ReadBodyFacts(R"({"model":"m",)", 13, {}, &bad, &error));
  EXPECT_FALSE(ReadBodyFacts("[1,2]", 5, {}, &bad, &error));
  EXPECT_FALSE(ReadBodyFacts(R"({"a":1} {"b":2})", 15, {}, &bad, &error));
  EXPECT_EQ(error, "malformed JSON body: expected one JSON object");
  // What is wrong is said where it is not the JSON itself.
  const std::string bom = "\xEF\xBB\xBF{\"model\":\"m\"}";  // (the gateway takes one off)
  EXPECT_FALSE(ReadBodyFacts(bom, bom.size(), {}, &bad, &error));
  EXPECT_EQ(error,
            "malformed JSON body: it starts with a byte order mark (JSON text sent over a network "
            "must not)");
  const std::string latin1 = "{\"model\":\"m\",\"user\":\"caf\xE9\"}";
  EXPECT_FALSE(ReadBodyFacts(latin1, latin1.size(), {}, &bad, &error));
  EXPECT_EQ(error, "malformed JSON body: it is not valid UTF-8");
}

TEST(BodyFacts, ReadsTheCapturedClaudeCodeTurnInPlace) {
  std::ifstream f(std::string(WARDEN_FIXTURES_DIR) + "/claude-code-turn2.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const auto doc = boost::json::parse(ss.str());
  std::string body = boost::json::serialize(doc.at("body"));
  body.reserve(body.size() + 64);
  BodyFacts facts;
  std::string error;
  ASSERT_TRUE(ReadBodyFacts(body, body.capacity(), {}, &facts, &error)) << error;
  EXPECT_EQ(facts.model, "claude-sonnet-4-5");
  EXPECT_TRUE(facts.stream);
  const std::string header_id(doc.at("headers").at("X-Claude-Code-Session-Id").as_string());
  EXPECT_EQ(SessionIdFromUserId(facts.metadata_user_id), header_id);
}

// A null model is none (vLLM's OpenAI APIs: its served model). (A byte-order mark before the JSON
// is the gateway's to take off, once: BodyFacts refuses it.)
TEST(BodyFacts, ANullModelIsNone) {
  BodyFacts facts;
  std::string error;
  ASSERT_TRUE(ReadBodyFacts(R"({"model":null,"messages":[]})", 28, {}, &facts, &error));
  EXPECT_TRUE(facts.model.empty());
  EXPECT_FALSE(facts.model_not_string);
}

// "n": the sequences asked for, whose output the answer's usage sums.
TEST(BodyFacts, ReadsTheSequencesAskedFor) {
  const auto sequences = [](std::string body) {
    BodyFacts facts;
    std::string error;
    EXPECT_TRUE(ReadBodyFacts(body, body.size(), {}, &facts, &error)) << error;
    return facts.sequences;
  };
  EXPECT_EQ(sequences(R"({"model":"m","n":3,"messages":[]})"), 3);
  EXPECT_EQ(sequences(R"({"model":"m","messages":[]})"), 1);
  EXPECT_EQ(sequences(R"({"model":"m","n":"3"})"), 1);
  EXPECT_EQ(sequences(R"({"model":"m","n":-2})"), 1);
}

// Keyed by Claude Code's header, only the model is needed: a body that opens with it is read no
// further (the captured turn: the same model, at the same place, as the full parse finds).
TEST(BodyFacts, ModelOnlyReadsTheOpeningModelAndNothingElse) {
  std::ifstream f(std::string(WARDEN_FIXTURES_DIR) + "/claude-code-turn1.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string body = boost::json::serialize(boost::json::parse(ss.str()).at("body"));
  BodyFacts full, fast;
  std::string error;
  ASSERT_TRUE(ReadBodyFacts(body, body.size(), {}, &full, &error));
  ASSERT_TRUE(ReadBodyFacts(body, body.size(), {}, &fast, &error, {.model_only = true}));
  EXPECT_EQ(fast.model, full.model);
  EXPECT_EQ(fast.model_offset, full.model_offset);
  EXPECT_EQ(fast.model_length, full.model_length);
  EXPECT_TRUE(fast.metadata_user_id.empty());  // not read

  // Whitespace between the tokens; the rest is not checked (the engine answers it).
  const std::string spaced = R"( { "model" : "claude-x" , "messages": [1,,2] )";
  ASSERT_TRUE(ReadBodyFacts(spaced, spaced.size(), {}, &fast, &error, {.model_only = true}));
  EXPECT_EQ(fast.model, "claude-x");
  EXPECT_EQ(spaced.substr(fast.model_offset, fast.model_length), R"("claude-x")");
}

// Anything but the plain opening is parsed in full, and rejected when malformed.
TEST(BodyFacts, ModelOnlyFallsBackToTheFullParse) {
  const auto read = [](std::string_view body, BodyFacts* facts) {
    std::string error;
    return ReadBodyFacts(body, body.size(), {}, facts, &error, {.model_only = true});
  };
  BodyFacts f;
  EXPECT_TRUE(read(R"({"model":"a\"b","stream":true})", &f));  // an escape: the full parse
  EXPECT_EQ(f.model, "a\"b");
  EXPECT_TRUE(f.stream);
  EXPECT_TRUE(read(R"({"messages":[],"model":"late"})", &f));  // not first
  EXPECT_EQ(f.model, "late");
  EXPECT_FALSE(read(R"({"model":"m" "x":1})", &f));            // no comma after it
  EXPECT_FALSE(read(R"({"model":"m)", &f));                    // unterminated
  EXPECT_FALSE(read("{\"model\":\"\xff\xfe\",\"a\":1}", &f));  // not UTF-8
  EXPECT_FALSE(read("{\"model\":\"a\tb\",\"a\":1}", &f));      // a raw control character
  BodyFacts number;
  EXPECT_TRUE(read(R"({"model":12,"a":1})", &number));  // not a string: no model
  EXPECT_TRUE(number.model.empty());
}

SessionKey OpeningKeyOf(std::string_view body, const SessionKeyConfig& config = {}) {
  BodyFacts facts;
  std::string error;
  EXPECT_TRUE(ReadBodyFacts(body, body.size(), config, &facts, &error, {.hash_opening = true}))
      << error;
  return ExtractSessionKey({}, facts, config);
}

TEST(SessionKey, KeylessConversationIsKeyedByItsOpening) {
  const std::string opening = R"({"model":"m","messages":[{"role":"system","content":"Be terse."},)"
                              R"({"role":"user","content":"Fix the bug in parser.c"})";
  const SessionKey turn1 = OpeningKeyOf(opening + "]}");
  const SessionKey turn2 = OpeningKeyOf(
      opening +
      R"(,{"role":"assistant","content":"Done."},{"role":"user","content":"Add a test"}]})");
  EXPECT_EQ(turn1.source, KeySource::kOpening);
  EXPECT_TRUE(turn1.sticky());
  EXPECT_TRUE(turn1.key.starts_with("opening:"));
  // Later turns: the opening and the first reply's text, as the gateway names them when that
  // reply goes by.
  EXPECT_EQ(turn2.source, KeySource::kOpening);
  EXPECT_EQ(turn2.key, ContinuedOpeningKey(turn1.key, ReplyHash("Done.")));
  BodyFacts facts;
  std::string error;
  ASSERT_TRUE(ReadBodyFacts(opening + "]}", opening.size() + 2, {}, &facts, &error,
                            {.hash_opening = true}));
  EXPECT_FALSE(facts.opening_continued);
  const std::string later = opening + R"(,{"role":"assistant","content":"Done."}]})";
  ASSERT_TRUE(ReadBodyFacts(later, later.size(), {}, &facts, &error, {.hash_opening = true}));
  EXPECT_TRUE(facts.opening_continued);

  const SessionKey other =
      OpeningKeyOf(R"({"model":"m","messages":[{"role":"system","content":"Be terse."},)"
                   R"({"role":"user","content":"Fix the bug in lexer.c"}]})");
  EXPECT_NE(other.key, turn1.key);
  const SessionKey other_tools = OpeningKeyOf(
      R"({"model":"m","tools":[{"name":"grep"}],"messages":[{"role":"system","content":"Be terse."},)"
      R"({"role":"user","content":"Fix the bug in parser.c"}]})");
  EXPECT_NE(other_tools.key, turn1.key);
}

// Anthropic clients may set cache_control marks on the system blocks and tools differently from
// turn to turn, as on messages: the opening's key leaves them out everywhere (found by review: a
// mark moved on a system block or a tool opened a new conversation). What they mark still counts.
TEST(SessionKey, AnOpeningsKeyLeavesOutCacheMarksOnTheSystemAndTools) {
  const auto key = [](std::string_view system_mark, std::string_view tool_mark) {
    return OpeningKeyOf(
               fmt::format(R"({{"model":"m","system":[{{"type":"text","text":"Be terse."{}}},)"
                           R"({{"type":"text","text":"Use tools."}}],)"
                           R"("tools":[{{"name":"grep","input_schema":{{}}{}}}],)"
                           R"("messages":[{{"role":"user","content":"Fix parser.c"}}]}})",
                           system_mark, tool_mark))
        .key;
  };
  const std::string plain = key("", "");
  EXPECT_TRUE(plain.starts_with("opening:"));
  EXPECT_EQ(key(R"(,"cache_control":{"type":"ephemeral"})", ""), plain);
  EXPECT_EQ(key(R"(,"cache_control":{"type":"ephemeral","ttl":"1h"})", ""), plain);
  EXPECT_EQ(key("", R"(,"cache_control":{"type":"ephemeral"})"), plain);
  EXPECT_NE(OpeningKeyOf(R"({"model":"m","system":[{"type":"text","text":"Be brief."}],)"
                         R"("tools":[{"name":"grep","input_schema":{}}],)"
                         R"("messages":[{"role":"user","content":"Fix parser.c"}]})")
                .key,
            plain);
  EXPECT_NE(key("", R"(,"description":"search")"), plain);
  // Nor does the whitespace after a field's object value (found by review: a pretty-printed mark
  // after an object changed the key).
  const std::string spaced =
      OpeningKeyOf(R"({"model":"m","system":[{"type":"text","text":"Be terse."},)"
                   R"({"type":"text","text":"Use tools."}],)"
                   R"("tools":[{"name":"grep","input_schema":{} )"
                   "\n"
                   R"(,"cache_control":{"type":"ephemeral"} })"
                   "\n"
                   R"(],"messages":[{"role":"user","content":"Fix parser.c"}]})")
          .key;
  EXPECT_EQ(spaced, plain);
}

// Claude Code 2.1.154 and later also sends roles "ctx" and "msg", which vLLM takes as "user": they
// end a keyless conversation's opening as a user message does.
TEST(SessionKey, ClaudeCodesCtxAndMsgRolesEndTheOpening) {
  for (const char* role : {"ctx", "msg"}) {
    const SessionKey k = OpeningKeyOf(fmt::format(
        R"({{"model":"m","system":"Be terse.","messages":[{{"role":"{}","content":"hi"}}]}})",
        role));
    EXPECT_EQ(k.source, KeySource::kOpening) << role;
    EXPECT_TRUE(k.key.starts_with("opening:")) << role;
  }
}

// OpenAI's Responses API: "instructions" open the conversation like a system prompt, "input" like
// its messages (a string is the one user message).
TEST(SessionKey, ResponsesApiRequestsAreKeyedByTheirOpeningToo) {
  const std::string turn1 =
      R"({"model":"m","instructions":"be a coder","input":[{"role":"user","content":"fix it"}]})";
  const std::string turn2 =
      R"({"model":"m","instructions":"be a coder","input":[{"role":"user","content":"fix it"},)"
      R"({"type":"function_call","name":"ls","arguments":"{}"},)"
      R"({"type":"function_call_output","output":"a.txt"}]})";
  const std::string other =
      R"({"model":"m","instructions":"be a writer","input":[{"role":"user","content":"fix it"}]})";
  const SessionKey a = OpeningKeyOf(turn1), b = OpeningKeyOf(turn2), c = OpeningKeyOf(other);
  EXPECT_EQ(a.source, KeySource::kOpening);
  EXPECT_EQ(a.key, b.key);
  EXPECT_NE(a.key, c.key);
  const SessionKey text = OpeningKeyOf(R"({"model":"m","input":"hello"})");
  EXPECT_EQ(text.source, KeySource::kOpening);
  // A string input opens the conversation as the user message holding it: the history the client
  // sends as items next starts with that message.
  EXPECT_EQ(text.key,
            OpeningKeyOf(R"({"model":"m","input":[{"role":"user","content":"hello"}]})").key);
  EXPECT_NE(text.key, OpeningKeyOf(R"({"model":"m","input":"hello there"})").key);
}

TEST(SessionKey, OpeningKeyComesLastAndOnlyWithAUserMessage) {
  EXPECT_TRUE(OpeningKeyOf(R"({"messages":[{"role":"system","content":"x"}]})").key.empty());
  EXPECT_TRUE(OpeningKeyOf(R"({"prompt":"a completion has no turns"})").key.empty());
  const std::string body = R"({"user":"u-7","messages":[{"role":"user","content":"hi"}]})";
  EXPECT_EQ(OpeningKeyOf(body).key, "u-7");
  SessionKeyConfig off;
  off.key_from_opening = false;
  off.body_fields = {};
  EXPECT_TRUE(OpeningKeyOf(body, off).key.empty());
  const HeaderView headers[] = {{"X-Session-Id", "s-1"}};
  EXPECT_TRUE(HeadersCarryKey(headers, {}));
  EXPECT_FALSE(HeadersCarryKey({}, {}));
}

// Claude Code's two captured turns without their session id: the attribution line, which differs
// between requests in some versions, is not part of the opening.
TEST(SessionKey, ClaudeCodesTwoTurnsShareTheirOpeningWhateverTheAttributionLine) {
  std::vector<std::string> keys;
  for (const char* name : {"claude-code-turn1.json", "claude-code-turn2.json"}) {
    std::ifstream f(std::string(WARDEN_FIXTURES_DIR) + "/" + name);
    std::stringstream ss;
    ss << f.rdbuf();
    boost::json::value doc = boost::json::parse(ss.str());
    boost::json::object& body = doc.at("body").as_object();
    body.erase("metadata");
    body.at("system").as_array()[0].as_object()["text"] =
        std::string("x-anthropic-billing-header: cc_version=") + name + ";";
    keys.push_back(OpeningKeyOf(boost::json::serialize(body)).key);
  }
  EXPECT_TRUE(keys[0].starts_with("opening:"));
  EXPECT_EQ(keys[1], ContinuedOpeningKey(keys[0], ReplyHash("lorem ipsum")));
}

// Conversations that open alike (the same system prompt and first message) part with their first
// replies; only the reply's text counts, as clients resend it: not its block structure, thinking,
// tool calls, cache marks or the whitespace around it.
TEST(SessionKey, KeylessTurnsAfterTheFirstAreKeyedByTheFirstReplyToo) {
  const std::string opening = R"({"model":"m","system":"Be terse.","messages":[)"
                              R"({"role":"user","content":"hi"},)";
  const auto later = [&](const std::string& reply) {
    return OpeningKeyOf(opening + reply + R"(,{"role":"user","content":"more"}]})");
  };
  const SessionKey a = later(R"({"role":"assistant","content":"Hello! How can I help?"})");
  const SessionKey b = later(R"({"role":"assistant","content":"Hi there."})");
  EXPECT_EQ(a.source, KeySource::kOpening);
  EXPECT_NE(a.key, b.key);
  const std::string first_hi = OpeningKeyOf(opening.substr(0, opening.size() - 1) + "]}").key;
  EXPECT_EQ(a.key, ContinuedOpeningKey(first_hi, ReplyHash("Hello! How can I help?")));
  EXPECT_EQ(
      later(R"({"content":[{"type":"thinking","thinking":"hm"},)"
            R"({"text":"Hello! ","type":"text"},{"type":"tool_use","id":"t","input":{}},)"
            R"({"type":"text","text":"How can I help?\n","cache_control":{"type":"ephemeral"}}],)"
            R"("role":"assistant"})")
          .key,
      ContinuedOpeningKey(first_hi,
                          ReplyHash("Hello! How can I help?", std::vector<std::string>{"t"})));
  // A reply with neither text nor tool calls leaves the opening alone to key the conversation.
  EXPECT_EQ(later(R"({"role":"assistant","content":"  "})").key, first_hi);
  EXPECT_EQ(later(R"({"role":"assistant","content":[{"type":"thinking","thinking":"x"}]})").key,
            first_hi);
  // Tool calls: their ids, which engines make unique, tell replies alike apart (OpenAI's
  // tool_calls, Anthropic's tool_use blocks).
  const std::vector<std::string> ids = {"call_1", "call_2"};
  const SessionKey openai =
      later(R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",)"
            R"("function":{"name":"ls","arguments":"{}"}},{"function":{},"id":"call_2"}]})");
  EXPECT_EQ(openai.key, ContinuedOpeningKey(first_hi, ReplyHash("", ids)));
  EXPECT_EQ(later(R"({"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"ls",)"
                  R"("input":{}},{"id":"call_2","type":"tool_use","input":{"text":"no"}}]})")
                .key,
            openai.key);
  EXPECT_NE(later(R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_3"}]})").key,
            openai.key);
  EXPECT_NE(ReplyHash("Hi there.", ids), ReplyHash("Hi there."));
  // The first assistant message counts, whatever comes between (a second user message).
  EXPECT_EQ(OpeningKeyOf(opening + R"({"role":"user","content":"?"},)"
                                   R"({"role":"assistant","content":"Hi there."}]})")
                .key,
            b.key);
  EXPECT_EQ(ReplyHash(" \n\t "), 0u);
  EXPECT_EQ(ReplyHash("\nHi there. "), ReplyHash("Hi there."));
  const SessionKey with_text = later(R"({"role":"assistant","content":"Hi there."})");
  EXPECT_EQ(with_text.opening_key, first_hi);  // its first turn's key
  EXPECT_TRUE(OpeningKeyOf(opening.substr(0, opening.size() - 1) + "]}").opening_key.empty());
}

// An agent that opens with a canned exchange (Qwen Code: a context message, then the assistant's
// "Got it. Thanks for the context!", then the real prompt) brings a reply in its first request:
// its key follows its replies, one by one, up to kKeyedReplies of them, each shorter key kept.
TEST(SessionKey, KeylessKeysFollowTheRepliesARequestBrings) {
  const std::string opening =
      R"({"model":"m","messages":[{"role":"system","content":"Be an agent."},)"
      R"({"role":"user","content":"Today is Monday; the folder holds a.c"},)";
  const std::string first = OpeningKeyOf(opening + R"({"role":"user","content":"x"}]})").key;
  std::string messages = opening;
  std::vector<std::string> keys = {first};
  for (int reply = 0; reply < kKeyedReplies + 2; ++reply) {
    const std::string text =
        reply == 0 ? "Got it. Thanks for the context!" : "Reply " + std::to_string(reply);
    messages +=
        R"({"role":"assistant","content":")" + text + R"("},{"role":"user","content":"go"},)";
    const SessionKey key = OpeningKeyOf(messages.substr(0, messages.size() - 1) + "]}");
    EXPECT_EQ(key.source, KeySource::kOpening);
    EXPECT_EQ(key.opening_key, first);
    if (reply < kKeyedReplies) keys.push_back(ContinuedOpeningKey(keys.back(), ReplyHash(text)));
    EXPECT_EQ(key.key, keys.back()) << reply;
    EXPECT_EQ(key.shorter_keys, std::vector<std::string>(keys.rbegin() + 1, keys.rend())) << reply;
    EXPECT_EQ(key.replies_full, reply + 1 >= kKeyedReplies) << reply;
  }
  // A reply with neither text nor tool calls ends the replies the key follows.
  const SessionKey empty_second = OpeningKeyOf(
      opening + R"({"role":"assistant","content":"Got it."},{"role":"user","content":"go"},)"
                R"({"role":"assistant","content":" "},{"role":"user","content":"go"},)"
                R"({"role":"assistant","content":"More."},{"role":"user","content":"go"}]})");
  EXPECT_EQ(empty_second.key, ContinuedOpeningKey(first, ReplyHash("Got it.")));
  EXPECT_FALSE(empty_second.replies_full);
}

// The Responses API's stateless history: the reply is every output item of the first response
// (reasoning, messages, function calls by call_id) up to the next input, as its response listed
// them.
TEST(SessionKey, AResponsesApiReplyIsItsOutputItems) {
  const std::string opening = R"({"model":"m","instructions":"be a coder","input":[)"
                              R"({"role":"user","content":"fix it"},)";
  const std::string first = OpeningKeyOf(R"({"model":"m","instructions":"be a coder",)"
                                         R"("input":[{"role":"user","content":"fix it"}]})")
                                .key;
  const SessionKey calls = OpeningKeyOf(
      opening +
      R"({"type":"reasoning","id":"rs_1","summary":[]},)"
      R"({"type":"function_call","id":"fc_1","call_id":"call_1","name":"ls","arguments":"{}"},)"
      R"({"type":"function_call","call_id":"call_2","name":"cat","arguments":"{}"},)"
      R"({"type":"function_call_output","call_id":"call_1","output":"a.txt"},)"
      R"({"type":"function_call_output","call_id":"call_2","output":"x"},)"
      R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]},)"
      R"({"role":"user","content":"thanks"}]})");
  // Two replies: the calls, then (after their outputs) the message.
  const std::string after_calls =
      ContinuedOpeningKey(first, ReplyHash("", std::vector<std::string>{"call_1", "call_2"}));
  EXPECT_EQ(calls.key, ContinuedOpeningKey(after_calls, ReplyHash("Done.")));
  EXPECT_EQ(calls.shorter_keys, (std::vector<std::string>{after_calls, first}));
  const SessionKey text = OpeningKeyOf(
      opening +
      R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]},)"
      R"({"role":"user","content":"thanks"}]})");
  EXPECT_EQ(text.key, ContinuedOpeningKey(first, ReplyHash("Done.")));
}

// An image's base64 is hashed as the thousand tokens or so a vision model reads it as (found by
// review: a 400 KB image was 100 K tokens to admission's claims), and two images still differ.
TEST(BodyFacts, AnImagesDataIsHashedAsAStandInOfItsTokens) {
  const auto facts_with = [](char fill) {
    const std::string body =
        R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"look"},)"
        R"({"type":"image_url","image_url":{"url":"data:image/png;base64,)" +
        std::string(400000, fill) + R"("}}]}]})";
    BodyFacts facts;
    std::string error;
    EXPECT_TRUE(ReadBodyFacts(body, body.size(), {}, &facts, &error, {.hash_prompt = true}));
    return facts;
  };
  const BodyFacts a = facts_with('A'), again = facts_with('A'), b = facts_with('B');
  EXPECT_LT(a.prompt_bytes, 200 + kInlineDataTokens * kPromptBytesPerToken);
  EXPECT_GT(a.prompt_bytes, kInlineDataTokens * kPromptBytesPerToken);
  EXPECT_EQ(a.prompt_hashes, again.prompt_hashes);
  ASSERT_EQ(a.prompt_hashes.size(), b.prompt_hashes.size());
  EXPECT_EQ(a.prompt_hashes.front(), b.prompt_hashes.front());  // the text before it
  EXPECT_NE(a.prompt_hashes.back(), b.prompt_hashes.back());
}

TEST(BodyFacts, HashingTheOpeningLeavesThePromptHashesAlone) {
  std::ifstream f(std::string(WARDEN_FIXTURES_DIR) + "/claude-code-turn2.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string body = boost::json::serialize(boost::json::parse(ss.str()).at("body"));
  BodyFacts alone, with_opening;
  std::string error;
  ASSERT_TRUE(ReadBodyFacts(body, body.size(), {}, &alone, &error, {.hash_prompt = true}));
  ASSERT_TRUE(ReadBodyFacts(body, body.size(), {}, &with_opening, &error,
                            {.hash_prompt = true, .hash_opening = true}));
  EXPECT_GT(alone.prompt_hashes.size(), 1000u);
  EXPECT_EQ(alone.prompt_hashes, with_opening.prompt_hashes);
  EXPECT_EQ(alone.prompt_bytes, with_opening.prompt_bytes);
  EXPECT_NE(with_opening.opening_hash, 0u);
}

// The same prompt under two LoRA adapters: two caches in the engine, so two conversations and two
// sets of prefix hashes here; under one adapter, the same as ever.
TEST(SessionKey, EachLoraAdapterHasItsOwnConversationsAndPrefixes) {
  const std::string body = R"({"model":"sql","messages":[{"role":"system","content":"Be terse."},)"
                           R"({"role":"user","content":"Fix the bug in parser.c and add a test )"
                           R"(that shows it, then run every test of the project once more"}]})";
  const auto read = [&](std::string_view adapter) {
    BodyFacts facts;
    std::string error;
    EXPECT_TRUE(ReadBodyFacts(body, body.size(), {}, &facts, &error,
                              {.hash_prompt = true, .hash_opening = true}));
    if (!adapter.empty()) SeparateAdapterPrompts(adapter, &facts);
    return facts;
  };
  const BodyFacts model = read(""), sql = read("sql"), sql_again = read("sql"), chat = read("chat");
  ASSERT_FALSE(model.prompt_hashes.empty());
  EXPECT_EQ(sql.prompt_hashes, sql_again.prompt_hashes);
  EXPECT_EQ(ExtractSessionKey({}, sql, {}).key, ExtractSessionKey({}, sql_again, {}).key);
  for (const BodyFacts* other : {&model, &chat}) {
    EXPECT_NE(ExtractSessionKey({}, sql, {}).key, ExtractSessionKey({}, *other, {}).key);
    for (size_t i = 0; i < sql.prompt_hashes.size(); ++i)
      EXPECT_NE(sql.prompt_hashes[i], other->prompt_hashes[i]);
  }
  EXPECT_EQ(ExtractSessionKey({}, sql, {}).source, KeySource::kOpening);
}

TEST(HeaderNameMatches, GlobIsCaseInsensitive) {
  EXPECT_TRUE(HeaderNameMatches("x-*-session-id", "X-Foo-Session-ID"));
  EXPECT_TRUE(HeaderNameMatches("x-session-id", "X-Session-Id"));
  EXPECT_FALSE(HeaderNameMatches("x-*-session-id", "x-session-idx"));
  EXPECT_TRUE(HeaderNameMatches("*", "anything"));
}

}  // namespace
}  // namespace warden
