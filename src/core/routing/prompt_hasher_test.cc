#include "core/routing/prompt_hasher.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/routing/session_key.h"

namespace warden {
namespace {

std::vector<uint64_t> Hash(std::string_view text) {
  PromptHasher h;
  h.Feed(text);
  return h.TakeHashes();
}

size_t SharedPrefix(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

std::vector<uint64_t> BodyHashes(const std::string& body) {
  BodyFacts facts;
  std::string error;
  EXPECT_TRUE(
      ReadBodyFacts(body, body.size(), SessionKeyConfig{}, &facts, &error, {.hash_prompt = true}))
      << error;
  return facts.prompt_hashes;
}

std::string FixtureBody(const char* name) {
  std::ifstream f(std::string(WARDEN_FIXTURES_DIR) + "/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  simdjson::padded_string json(ss.str());
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc = parser.iterate(json);
  simdjson::ondemand::object body = doc["body"].get_object();
  return std::string(std::string_view(body.raw_json()));
}

TEST(PromptHasher, OneHashPerCompleteChunkHoweverTheTextIsFed) {
  const std::string text(1000, 'x');
  PromptHasher pieces;
  pieces.Feed(std::string_view(text).substr(0, 10));
  pieces.Feed(std::string_view(text).substr(10, 500));
  pieces.Feed(std::string_view(text).substr(510));
  EXPECT_EQ(pieces.hashes(), Hash(text));
  EXPECT_EQ(Hash(text).size(), 1000 / kPromptChunkBytes);
  EXPECT_EQ(pieces.bytes(), 1000u);
}

TEST(PromptHasher, HashesAreChainedSoOnlyACommonPrefixMatches) {
  std::string a(640, 'a'), b = a;
  b[100] = 'b';  // chunk 1 differs: chunks 2.. differ too, although their bytes are equal
  const auto ha = Hash(a), hb = Hash(b);
  EXPECT_EQ(SharedPrefix(ha, hb), 1u);
  EXPECT_EQ(ha.size(), hb.size());
}

TEST(PromptHasher, ClaudeCodesSecondTurnExtendsItsFirst) {
  const auto t1 = BodyHashes(FixtureBody("claude-code-turn1.json"));
  const auto t2 = BodyHashes(FixtureBody("claude-code-turn2.json"));
  ASSERT_GT(t1.size(), 1000u);  // ~80 KB of system, tools and messages
  EXPECT_GT(t2.size(), t1.size());
  EXPECT_GE(SharedPrefix(t1, t2), t1.size() - 1);  // all but the chunk holding turn 1's last ']'
}

TEST(PromptHasher, TheAttributionBlockDoesNotBreakTheSharedSystemPrompt) {
  const std::string system(2000, 's');
  auto body = [&](const char* version, const char* user) {
    return std::string(
               R"({"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: )") +
           version + R"("},{"type":"text","text":")" + system +
           R"("}],"messages":[{"role":"user","content":")" + user + R"("}]})";
  };
  const auto a = BodyHashes(body("cc_version=2.1.1", "first session's question"));
  const auto b = BodyHashes(body("cc_version=2.1.9", "another session's question"));
  EXPECT_GE(SharedPrefix(a, b), 2000 / kPromptChunkBytes);
}

TEST(PromptHasher, CompletionsPromptsAndChatMessagesAreHashed) {
  const std::string text(300, 'p');
  EXPECT_EQ(BodyHashes(R"({"model":"m","prompt":")" + text + R"("})").size(),
            302 / kPromptChunkBytes);
  EXPECT_FALSE(
      BodyHashes(R"({"model":"m","messages":[{"role":"user","content":")" + text + R"("}]})")
          .empty());
}

TEST(PromptHasher, NotAskedForNothingIsHashed) {
  const std::string body = R"({"model":"m","prompt":")" + std::string(300, 'p') + R"("})";
  BodyFacts facts;
  std::string error;
  ASSERT_TRUE(ReadBodyFacts(body, body.size(), SessionKeyConfig{}, &facts, &error));
  EXPECT_TRUE(facts.prompt_hashes.empty());
  EXPECT_EQ(facts.model, "m");
}

}  // namespace
}  // namespace warden
