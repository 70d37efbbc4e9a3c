#include "core/workload/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/tokenizer.h"

namespace warden {
namespace {

TEST(Workload, SizesAreTokensAndJitteredWithinBounds) {
  WorkloadOptions o;
  std::set<int> firsts;
  for (int i = 0; i < 50; ++i) {
    SessionScript s(o, 0, i);
    const int n = s.user_tokens(0);
    EXPECT_GE(n, 7150);
    EXPECT_LE(n, 7450);
    firsts.insert(n);
    EXPECT_EQ(CountTokens(s.UserText(0)), size_t(n));
    EXPECT_GE(s.user_tokens(3), 360);
    EXPECT_LE(s.user_tokens(3), 440);
  }
  EXPECT_GT(firsts.size(), 30u);  // not in lockstep
  EXPECT_EQ(CountTokens(SessionScript::SystemPrompt(o)), 3500u);
}

TEST(Workload, SameSeedSameSessionsOtherSeedOthers) {
  WorkloadOptions a, b;
  b.seed = 2;
  EXPECT_EQ(SessionScript(a, 1, 5).UserText(2), SessionScript(a, 1, 5).UserText(2));
  EXPECT_EQ(SessionScript(a, 1, 5).id(), SessionScript(a, 1, 5).id());
  EXPECT_NE(SessionScript(a, 1, 5).UserText(0), SessionScript(a, 1, 6).UserText(0));
  EXPECT_NE(SessionScript(a, 1, 5).id(), SessionScript(b, 1, 5).id());
  EXPECT_EQ(SessionScript(a, 1, 5).id().size(), 36u);
}

// The load test's variants run the same sessions in other words: no variant finds its prompts in
// the prefix cache the one before it left behind.
TEST(Workload, AnotherVariantKeepsTheSizesAndChangesTheWords) {
  WorkloadOptions o;
  const SessionScript first(o, 0, 5), same(o, 0, 5, 0), second(o, 0, 5, 1);
  EXPECT_EQ(first.id(), same.id());
  EXPECT_EQ(first.UserText(0), same.UserText(0));
  EXPECT_NE(first.id(), second.id());
  for (int t = 0; t < o.turns; ++t) {
    EXPECT_EQ(first.user_tokens(t), second.user_tokens(t)) << t;
    EXPECT_NE(first.UserText(t).substr(0, 40), second.UserText(t).substr(0, 40)) << t;
  }
  EXPECT_EQ(first.AttributionLine(), second.AttributionLine());
}

TEST(Workload, FirstMessagesDivergeFromTheFirstWord) {
  WorkloadOptions o;
  const std::string a = SessionScript(o, 0, 1).UserText(0), b = SessionScript(o, 0, 2).UserText(0);
  std::vector<TokenId> ta, tb;
  Tokenize(a.substr(0, 200), &ta);
  Tokenize(b.substr(0, 200), &tb);
  int same = 0;
  while (same < 5 && ta[same] == tb[same]) ++same;
  EXPECT_LT(same, 5);  // 64-word vocabulary: an equal first word or two can happen, not a prefix
}

TEST(Workload, RejectsBadOptions) {
  WorkloadOptions o;
  o.turns = 0;
  EXPECT_NE(ValidateWorkload(o).find("--turns"), std::string::npos);
  o = {};
  o.turn_jitter = 400;
  EXPECT_NE(ValidateWorkload(o).find("--turn-jitter"), std::string::npos);
  o = {};
  o.system_tokens = 2'000'000'000;  // a prompt of gigabytes
  EXPECT_NE(ValidateWorkload(o).find("--system-tokens"), std::string::npos);
  EXPECT_EQ(ValidateWorkload(WorkloadOptions{}), "");
}

// The widest jitter allowed stays within its bounds (its spread is past an int's range).
TEST(Workload, AWideJitterStaysWithinItsBounds) {
  WorkloadOptions o;
  o.first_message_tokens = 10'000'000;
  o.first_message_jitter = 9'999'999;
  ASSERT_EQ(ValidateWorkload(o), "");
  for (int i = 0; i < 20; ++i) {
    const int n = SessionScript(o, 0, i).user_tokens(0);
    EXPECT_GE(n, 1);
    EXPECT_LE(n, 19'999'999);
  }
}

// A run's description says the workload flags that differ from the defaults.
TEST(Workload, FlagsSayWhatDiffersFromTheDefaults) {
  WorkloadOptions o;
  o.seed = 7;
  EXPECT_EQ(WorkloadFlags(o), "");
  o.first_message_tokens = 20000;
  o.tool_seconds = 2.5;
  o.attribution_per_session = true;
  EXPECT_EQ(WorkloadFlags(o), "--first-tokens 20000 --tool-seconds 2.5 --attribution per-session");
}

// Tool pauses: none by default; else exponential around their mean (about 63 % below it), never
// past ten means, the same in every variant of a session and different between its turns.
TEST(Workload, ToolPausesAverageTheirMeanAndAreTheSameInEveryVariant) {
  WorkloadOptions o;
  EXPECT_EQ(SessionScript(o, 0, 1).ToolSecondsBefore(1), 0.0);
  o.tool_seconds = 4;
  double sum = 0, most = 0;
  int below_mean = 0, n = 0;
  std::set<double> distinct;
  for (int i = 0; i < 400; ++i) {
    const SessionScript s(o, 0, i), other_words(o, 0, i, 3);
    for (int t = 1; t < o.turns; ++t, ++n) {
      const double p = s.ToolSecondsBefore(t);
      EXPECT_EQ(p, other_words.ToolSecondsBefore(t));
      EXPECT_GE(p, 0);
      sum += p;
      most = std::max(most, p);
      below_mean += p < 4;
      distinct.insert(p);
    }
  }
  EXPECT_NEAR(sum / n, 4.0, 0.3);
  EXPECT_NEAR(static_cast<double>(below_mean) / n, 1 - std::exp(-1.0), 0.04);
  EXPECT_LE(most, kMaxToolPauses * 4);
  EXPECT_GT(distinct.size(), static_cast<size_t>(n) * 9 / 10);
  o.tool_seconds = -1;
  EXPECT_NE(ValidateWorkload(o).find("--tool-seconds"), std::string::npos);
}

}  // namespace
}  // namespace warden
