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

// The launcher's defaults: a match above 30 % is enough, and the pool counts as imbalanced only
// past 64 apart and 1.5 x.
TEST(SglangCacheAwarePolicy, TheLaunchersDefaultsFollowAThirdAndBalanceLater) {
  testing::PolicyHarness h(2);
  SglangCacheAwarePolicy p(SglangOptions::CommandLineDefaults(), "sglang-cache-aware:cli");
  EXPECT_EQ(p.name(), "sglang-cache-aware:cli");
  std::vector<uint64_t> a = {1, 2, 3}, third_and_more = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_EQ(h.Route(p, Prompt(&a)).replica, 0);
  // 3 of 9 blocks: > 30 % (the Rust defaults would take the smallest tree, replica 1)
  EXPECT_EQ(h.Route(p, Prompt(&third_and_more)).replica, 0);
  h.loads[0].in_flight = 110;  // 50 apart: past 32, not past 64
  h.loads[1].in_flight = 60;
  EXPECT_EQ(h.Route(p, Prompt(&a)).replica, 0);
  h.loads[1].in_flight = 40;  // 70 apart, and 110 > 1.5 x 40: the least loaded
  EXPECT_EQ(h.Route(p, Prompt(&a)).replica, 1);
}

}  // namespace
}  // namespace warden
