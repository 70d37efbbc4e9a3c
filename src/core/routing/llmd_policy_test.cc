#include "core/routing/llmd_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

TEST(LlmdPolicy, WeighsPrefixThreeQueueTwoKvTwo) {
  testing::PolicyHarness h(2);
  LlmdPolicy p;
  std::vector<uint64_t> blocks = {1, 2, 3, 4};
  RouteRequest r;
  r.prefix_hashes = blocks;
  EXPECT_EQ(h.Route(p, r).replica,
            0);  // all equal: the rotation starts at 0, which now holds the prefix
  // Replica 0: prefix 1 x 3 + longest queue 0 x 2 + half-full cache 0.5 x 2 = 4.0.
  // Replica 1: prefix 0 + shortest queue 1 x 2 + cache 0.8 x 2 = 3.6.
  h.loads[0] = {.waiting = 4, .kv_cache_usage = 0.5};
  h.loads[1] = {.waiting = 0, .kv_cache_usage = 0.2};
  EXPECT_EQ(h.Route(p, r).replica, 0);
  h.loads[0].kv_cache_usage = 0.9;  // 3 + 0 + 0.2 = 3.2 < 3.6
  EXPECT_EQ(h.Route(p, r).replica, 1);
}

// The prefix scorer reads a prompt's first 256 blocks only (maxPrefixBlocksToMatch): a replica
// holding those matches a longer prompt wholly.
TEST(LlmdPolicy, MatchesTheFirst256BlocksOnly) {
  testing::PolicyHarness h(2);
  LlmdPolicy p;
  std::vector<uint64_t> head(256), longer(400);
  for (size_t i = 0; i < longer.size(); ++i) longer[i] = i + 1;
  std::copy(longer.begin(), longer.begin() + 256, head.begin());
  RouteRequest r;
  r.prefix_hashes = head;
  ASSERT_EQ(h.Route(p, r).replica, 0);
  // Replica 0: the whole 256 of 256 x 3 + longest queue 0 + cache 0.5 x 2 = 4.0; replica 1: 0 +
  // 2 + 0.9 x 2 = 3.8. Matched on all 400 blocks replica 0 would score 256/400 x 3 + 1 = 2.92.
  h.loads[0] = {.waiting = 4, .kv_cache_usage = 0.5};
  h.loads[1] = {.waiting = 0, .kv_cache_usage = 0.1};
  r.prefix_hashes = longer;
  EXPECT_EQ(h.Route(p, r).replica, 0);
}

}  // namespace
}  // namespace warden
