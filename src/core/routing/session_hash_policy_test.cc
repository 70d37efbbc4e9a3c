#include "core/routing/session_hash_policy.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

TEST(SessionHashPolicy, SameKeySameReplicaWhateverTheLoad) {
  testing::PolicyHarness h(4);
  SessionHashPolicy p;
  const int home = h.Route(p, testing::Keyed(12345)).replica;
  h.loads[home].in_flight = 100;
  EXPECT_EQ(h.Route(p, testing::Keyed(12345)).replica, home);
  std::set<int> spread;
  for (uint64_t k = 1; k < 200; ++k)
    spread.insert(h.Route(p, testing::Keyed(k * 0x9e3779b97f4a7c15ULL)).replica);
  EXPECT_EQ(spread.size(), 4u);
}

TEST(SessionHashPolicy, AnUnhealthyHomeMovesOnlyItsKeys) {
  testing::PolicyHarness h(4);
  SessionHashPolicy p;
  std::vector<int> before;
  for (uint64_t k = 1; k <= 100; ++k)
    before.push_back(h.Route(p, testing::Keyed(k * 0x9e3779b97f4a7c15ULL)).replica);
  h.loads[2].healthy = false;
  for (uint64_t k = 1; k <= 100; ++k) {
    const int now = h.Route(p, testing::Keyed(k * 0x9e3779b97f4a7c15ULL)).replica;
    EXPECT_NE(now, 2);
    if (before[k - 1] != 2) {
      EXPECT_EQ(now, before[k - 1]);
    }
  }
}

TEST(SessionHashPolicy, AffinityOffRotatesKeyedRequestsLikeRequestsWithoutAKey) {
  SessionHashPolicy p;
  EXPECT_EQ(testing::FourTurnsWithAffinityOff(p), (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace warden
