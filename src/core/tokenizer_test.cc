#include "core/tokenizer.h"

#include <gtest/gtest.h>

#include "core/chat_template.h"
#include "core/filler.h"

namespace warden {
namespace {

TEST(Tokenizer, WordsAndPunctuationAreOneTokenEach) {
  std::vector<TokenId> t;
  Tokenize("Hello, world!  foo_bar\n42", &t);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0], WordToken("Hello"));
  EXPECT_EQ(t[1], WordToken(","));
  EXPECT_EQ(t[2], WordToken("world"));
  EXPECT_EQ(t[4], WordToken("foo_bar"));
  EXPECT_EQ(CountTokens("Hello, world!  foo_bar\n42"), 6u);
}

TEST(Tokenizer, WordTokensNeverCollideWithSpecialTokens) {
  for (int i = 0; i < 10000; ++i) EXPECT_GE(WordToken(std::to_string(i)), kFirstWordToken);
}

TEST(Tokenizer, GeneratedReplyTokenizesBackToTheGeneratedTokens) {
  std::string text;
  std::vector<TokenId> generated;
  for (int i = 0; i < 50; ++i) {
    const FillerWord w = GeneratedWord(77, i);
    if (i > 0) text += ' ';
    text += w.text;
    generated.push_back(w.token);
  }
  std::vector<TokenId> back;
  Tokenize(text, &back);
  EXPECT_EQ(back, generated);
}

TEST(ChatTemplate, NextTurnExtendsPreviousPromptPlusReply) {
  std::vector<TokenId> turn1;
  AppendMessage(Role::kSystem, "you are helpful", &turn1);
  AppendMessage(Role::kUser, "fix the bug", &turn1);
  AppendGenerationPrompt(&turn1);

  std::vector<TokenId> reply = {GeneratedWord(1, 0).token, GeneratedWord(1, 1).token, kImEnd};
  std::vector<TokenId> turn2;
  AppendMessage(Role::kSystem, "you are helpful", &turn2);
  AppendMessage(Role::kUser, "fix the bug", &turn2);
  AppendMessage(Role::kAssistant,
                std::string(GeneratedWord(1, 0).text) + " " + std::string(GeneratedWord(1, 1).text),
                &turn2);
  AppendMessage(Role::kUser, "thanks", &turn2);
  AppendGenerationPrompt(&turn2);

  std::vector<TokenId> expected_prefix = turn1;
  expected_prefix.insert(expected_prefix.end(), reply.begin(), reply.end());
  ASSERT_GT(turn2.size(), expected_prefix.size());
  EXPECT_TRUE(std::equal(expected_prefix.begin(), expected_prefix.end(), turn2.begin()));
}

TEST(ChatTemplate, RecognisesClaudeCodeAttributionLine) {
  EXPECT_TRUE(
      IsAttributionBlock("x-anthropic-billing-header: cc_version=2.1.328; cc_entrypoint=cli;"));
  EXPECT_FALSE(IsAttributionBlock("You are Claude Code"));
}

}  // namespace
}  // namespace warden
