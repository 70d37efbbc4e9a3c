#include "core/routing/chwbl_policy.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

TEST(ChwblPolicy, StaysOnTheHashedReplicaUnderTheBound) {
  testing::PolicyHarness h(4);
  ChwblPolicy p;
  const int home = h.Route(p, testing::Keyed(99)).replica;
  h.loads = {{.in_flight = 1}, {.in_flight = 1}, {.in_flight = 1}, {.in_flight = 1}};
  // average with this request: 5/4, capacity ceil(1.25 * 1.25) = 2: home has 1, may take one more.
  EXPECT_EQ(h.Route(p, testing::Keyed(99)).replica, home);
}

TEST(ChwblPolicy, WalksTheRingPastReplicasAtCapacity) {
  testing::PolicyHarness h(4);
  ChwblPolicy p;
  const int home = h.Route(p, testing::Keyed(99)).replica;
  h.loads[home].in_flight = 2;  // capacity ceil(1.25 * 3 / 4) = 1: home is full
  const RouteDecision d = h.Route(p, testing::Keyed(99));
  EXPECT_NE(d.replica, home);
  EXPECT_EQ(d.kind, RouteKind::kOverflow);
  EXPECT_LE(h.loads[d.replica].in_flight + 1, 1);
}

TEST(ChwblPolicy, AffinityOffRotatesKeyedRequestsLikeRequestsWithoutAKey) {
  ChwblPolicy p;
  EXPECT_EQ(testing::FourTurnsWithAffinityOff(p), (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace warden
