#include "core/engine/dp_balancer.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(DpBalancer, StaleCountsDegradeToRoundRobin) {
  DpBalancer b(4, DpBalancer::Mode::kStale);
  const EngineLoad busy[] = {{5, 5}, {0, 0}, {0, 0}, {0, 0}};
  std::vector<int> picks;
  for (int i = 0; i < 6; ++i) {
    picks.push_back(b.Pick());
    b.Refresh(busy);  // ignored: a dense model's engines never publish
  }
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 2, 3, 0, 1}));
}

TEST(DpBalancer, FreshCountsPickLowestWaitingTimesFourPlusRunning) {
  DpBalancer b(3, DpBalancer::Mode::kFresh);
  const EngineLoad loads[] = {{1, 0}, {0, 3}, {0, 4}};  // scores 4, 3, 4
  b.Refresh(loads);
  EXPECT_EQ(b.Pick(), 1);  // score 3, then 7
  EXPECT_EQ(b.Pick(), 0);  // ties (4, 4) go to the lowest index
  EXPECT_EQ(b.Pick(), 2);
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
