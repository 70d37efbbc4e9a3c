#include "core/routing/sglang_cache_aware_policy.h"

#include <gtest/gtest.h>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

RouteRequest Prompt(std::vector<uint64_t>* storage) {
  RouteRequest r;
  r.prefix_hashes = *storage;
  return r;
}

TEST(SglangCacheAwarePolicy, FollowsAPrefixMatchAboveHalfElseTheSmallestTree) {
  testing::PolicyHarness h(3);
  SglangCacheAwarePolicy p;
  std::vector<uint64_t> a = {1, 2, 3, 4}, a_longer = {1, 2, 3, 4, 5, 6}, b = {9, 8},
                        shared_half = {1, 2, 30, 40, 50};
  const int first = h.Route(p, Prompt(&a)).replica;  // all trees empty: smallest tree, replica 0
  EXPECT_EQ(first, 0);
  EXPECT_EQ(h.Route(p, Prompt(&a_longer)).replica, 0);  // 4 of 6 blocks match: > 50%
  EXPECT_EQ(h.Route(p, Prompt(&b)).replica, 1);         // no match: the smallest tree
  EXPECT_EQ(h.Route(p, Prompt(&shared_half)).replica,
            2);  // 2 of 5 match: not enough; smallest tree
}

TEST(SglangCacheAwarePolicy, AnImbalancedPoolGoesToTheLeastLoaded) {
  testing::PolicyHarness h(2);
  SglangCacheAwarePolicy p;
  std::vector<uint64_t> a = {1, 2, 3, 4};
  EXPECT_EQ(h.Route(p, Prompt(&a)).replica, 0);
  h.loads[0].in_flight = 40;  // 40 - 5 > 32 and 40 > 1.1 * 5
  h.loads[1].in_flight = 5;
  EXPECT_EQ(h.Route(p, Prompt(&a)).replica, 1);
  h.loads[0].in_flight = 36;  // 36 - 5 = 31: balanced enough, the cache wins
  EXPECT_EQ(h.Route(p, Prompt(&a)).replica, 0);
  // Both bounds must be passed: 420 and 385 are 35 apart, past the absolute bound, but 420 is
  // under 1.1 x 385 = 423.5.
  h.loads[0].in_flight = 420;
  h.loads[1].in_flight = 385;
  EXPECT_EQ(h.Route(p, Prompt(&a)).replica, 0);  // the relative bound holds it: the cache wins
}

// Exactly half the request's blocks matched is not above the threshold: the smallest tree.
TEST(SglangCacheAwarePolicy, HalfMatchedIsNotEnough) {
  testing::PolicyHarness h(2);
  SglangCacheAwarePolicy p;
  std::vector<uint64_t> a = {1, 2}, half = {1, 2, 3, 4};
  ASSERT_EQ(h.Route(p, Prompt(&a)).replica, 0);
  EXPECT_EQ(h.Route(p, Prompt(&half)).replica, 1);
}

}  // namespace
}  // namespace warden
