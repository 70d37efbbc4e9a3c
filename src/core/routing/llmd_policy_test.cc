#include "core/routing/llmd_policy.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace warden
