#include "core/routing/dynamo_policy.h"

#include <gtest/gtest.h>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

TEST(DynamoPolicy, LowestPrefillBlocksPlusActiveDecodeBlocks) {
  testing::PolicyHarness h(2);
  h.loads[0].kv_capacity_blocks = h.loads[1].kv_capacity_blocks = 100;
  DynamoPolicy p;
  std::vector<uint64_t> blocks(10);
  for (int i = 0; i < 10; ++i) blocks[i] = i + 1;
  RouteRequest r;
  r.prefix_hashes = blocks;
  EXPECT_EQ(h.Route(p, r).replica, 0);  // equal costs: rotation from 0
  h.loads[0].kv_cache_usage = 0.05;     // 0 to prefill + 5 active = 5 < 10 to prefill
  EXPECT_EQ(h.Route(p, r).replica, 0);
  h.loads[0].kv_cache_usage = 0.15;  // 15 > 10
  EXPECT_EQ(h.Route(p, r).replica, 1);
}

}  // namespace
}  // namespace warden
