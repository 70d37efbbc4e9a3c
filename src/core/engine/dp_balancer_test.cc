#include "core/engine/dp_balancer.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(DpBalancer, StaleCountsMakeRoundRobinThatZerosDoNotRestart) {
  DpBalancer b(4, DpBalancer::Mode::kStale);
  const EngineLoad busy[] = {{5, 5}, {0, 0}, {0, 0}, {0, 0}};
  std::vector<int> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(b.Pick());
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 2, 3, 0, 1}));
  b.Broadcast(busy);  // the engines' counts never reached the coordinator: zeros
  EXPECT_EQ(b.counts()[0].waiting, 0);
  picks.clear();
  for (int i = 0; i < 3; ++i) picks.push_back(b.Pick());
  EXPECT_EQ(picks, (std::vector<int>{2, 3, 0}));  // the rotation goes on where it was
  EXPECT_DOUBLE_EQ(b.broadcast_interval_s(), 5.0);
}

TEST(DpBalancer, FreshCountsPickLowestWaitingTimesFourPlusRunningTiesRotating) {
  DpBalancer b(3, DpBalancer::Mode::kFresh);
  const EngineLoad loads[] = {{1, 0}, {0, 3}, {0, 4}};  // scores 4, 3, 4
  b.Broadcast(loads);
  EXPECT_EQ(b.Pick(), 1);  // score 3, then 7; the scan now starts at 1
  EXPECT_EQ(b.Pick(), 2);  // 4 ties 4: the first scanned from 1
  EXPECT_EQ(b.Pick(), 0);
  EXPECT_DOUBLE_EQ(b.broadcast_interval_s(), 0.1);
}

TEST(DpBalancer, AnApiServersRotationStartsAtItsOwnEngine) {
  DpBalancer b(4, DpBalancer::Mode::kStale, 2);
  EXPECT_EQ(b.Pick(), 2);
  EXPECT_EQ(b.Pick(), 3);
  EXPECT_EQ(b.Pick(), 0);
}

// A pick adds the number of API servers to the engine's waiting count (vLLM's client_count): with
// four, one pick outweighs a running request more, and the next goes elsewhere.
TEST(DpBalancer, APickCountsOncePerApiServer) {
  const EngineLoad loads[] = {{0, 5}, {0, 0}};  // scores 5 and 0
  DpBalancer one(2, DpBalancer::Mode::kFresh);
  one.Broadcast(loads);
  EXPECT_EQ(one.Pick(), 1);
  EXPECT_EQ(one.Pick(), 1);  // 4 < 5
  DpBalancer four(2, DpBalancer::Mode::kFresh, 0, 4);
  four.Broadcast(loads);
  EXPECT_EQ(four.Pick(), 1);
  EXPECT_EQ(four.Pick(), 0);  // 16 > 5
}

TEST(DpBalancer, PicksOnlyUsableEngines) {
  DpBalancer b(3, DpBalancer::Mode::kFresh);
  EXPECT_EQ(b.Pick({false, true, true}), 1);
  EXPECT_EQ(b.Pick({false, false, false}), -1);
  EXPECT_EQ(b.counts()[1].waiting, 1);
}

// vLLM's coordinator: the first look publishes; then changed counts 100 ms after the last
// publication, unchanged ones 5 s after it.
TEST(DpCoordinator, PublishesChangesAfter100MsAndTheSameCountsEvery5s) {
  DpCoordinator c;
  const std::vector<EngineLoad> idle(2), busy{{0, 1}, {0, 0}};
  EXPECT_TRUE(c.Publishes(idle, 0.0));
  EXPECT_FALSE(c.Publishes(idle, 0.1));
  EXPECT_FALSE(c.Publishes(busy, 0.05));  // changed, but too soon
  EXPECT_TRUE(c.Publishes(busy, 0.1));
  EXPECT_FALSE(c.Publishes(busy, 5.0));
  EXPECT_TRUE(c.Publishes(busy, 5.1));
  EXPECT_TRUE(c.Publishes(idle, 5.2));
}

TEST(DpBalancer, ParsesBothNames) {
  DpBalancer::Mode m;
  ASSERT_TRUE(ParseDpBalancerMode("vllm-dp-fresh", &m));
  EXPECT_EQ(m, DpBalancer::Mode::kFresh);
  ASSERT_TRUE(ParseDpBalancerMode("vllm-dp", &m));
  EXPECT_EQ(m, DpBalancer::Mode::kStale);
  EXPECT_FALSE(ParseDpBalancerMode("round-robin", &m));
}

}  // namespace
}  // namespace warden
