#include "core/routing/chwbl_policy.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/routing/hash_ring.h"
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

// Past the bound, the request walks the ring in its order: the first replica clockwise under the
// bound takes it, not the least loaded one; a replica with capacity - 1 in flight is under it.
TEST(ChwblPolicy, TakesTheFirstReplicaClockwiseUnderTheBound) {
  testing::PolicyHarness h(4);
  ChwblPolicy p;
  const std::vector<int> order = HashRing(4).Walk(99);
  // 8 in flight: capacity ceil(1.25 x 9 / 4) = 3.
  h.loads[order[0]].in_flight = 3;  // full: 3 + 1 > 3
  h.loads[order[1]].in_flight = 2;  // 2 + 1 <= 3: takes it
  h.loads[order[2]].in_flight = 0;  // the least loaded, not reached
  h.loads[order[3]].in_flight = 3;
  RouteDecision d = h.Route(p, testing::Keyed(99));
  EXPECT_EQ(d.replica, order[1]);
  EXPECT_EQ(d.kind, RouteKind::kOverflow);
  h.loads[order[1]].in_flight = 4;  // 10 in flight, capacity 4: the first two are full
  h.loads[order[0]].in_flight = 4;
  h.loads[order[3]].in_flight = 2;
  d = h.Route(p, testing::Keyed(99));
  EXPECT_EQ(d.replica, order[2]);
}

TEST(ChwblPolicy, AffinityOffRotatesKeyedRequestsLikeRequestsWithoutAKey) {
  ChwblPolicy p;
  EXPECT_EQ(testing::FourTurnsWithAffinityOff(p), (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace warden
