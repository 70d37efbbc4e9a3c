#include "core/routing/session_key.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

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
  EXPECT_FALSE(error.empty());
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

TEST(HeaderNameMatches, GlobIsCaseInsensitive) {
  EXPECT_TRUE(HeaderNameMatches("x-*-session-id", "X-Foo-Session-ID"));
  EXPECT_TRUE(HeaderNameMatches("x-session-id", "X-Session-Id"));
  EXPECT_FALSE(HeaderNameMatches("x-*-session-id", "x-session-idx"));
  EXPECT_TRUE(HeaderNameMatches("*", "anything"));
}

}  // namespace
}  // namespace warden
