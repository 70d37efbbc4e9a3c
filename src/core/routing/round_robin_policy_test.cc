#include "core/routing/round_robin_policy.h"

#include <gtest/gtest.h>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

TEST(RoundRobinPolicy, CyclesOverHealthyReplicasIgnoringLoadAndKeys) {
  testing::PolicyHarness h(3);
  h.loads[0].in_flight = 50;
  RoundRobinPolicy p;
  std::vector<int> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(h.Route(p, testing::Keyed(7)).replica);
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 2, 0}));
  h.loads[1].healthy = false;
  EXPECT_EQ(h.Route(p).replica, 2);
  EXPECT_EQ(h.Route(p).replica, 0);
}

}  // namespace
}  // namespace warden
