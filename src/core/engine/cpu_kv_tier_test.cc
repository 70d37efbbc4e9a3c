#include "core/engine/cpu_kv_tier.h"

#include <gtest/gtest.h>

#include <vector>

namespace warden {
namespace {

TEST(CpuKvTier, EvictsTheLeastRecentlyStoredOrTouchedBlock) {
  CpuKvTier tier(3);
  tier.Store(1);
  tier.Store(2);
  tier.Store(3);
  tier.Store(1);  // stored already: stays the oldest (vLLM stores a block once)
  tier.Store(4);
  EXPECT_FALSE(tier.Holds(1));
  EXPECT_TRUE(tier.Holds(2));
  EXPECT_TRUE(tier.Holds(3));
  EXPECT_TRUE(tier.Holds(4));
  EXPECT_EQ(tier.size(), 3);
  const std::vector<BlockHash> request = {3, 9, 4};
  tier.Touch(request);  // 3 most recent, then 4; 2 the oldest
  tier.Store(5);
  EXPECT_FALSE(tier.Holds(2));
  tier.Store(6);
  EXPECT_FALSE(tier.Holds(4));  // a request's head outlives its tail
  EXPECT_TRUE(tier.Holds(3));
  tier.Store(3);  // stored again (computed again): not made recent, so the oldest goes
  tier.Store(7);
  EXPECT_FALSE(tier.Holds(3));
  EXPECT_TRUE(tier.Holds(5));
}

TEST(CpuKvTier, CountsTheBlocksItHoldsInARowFromAPlace) {
  CpuKvTier tier(10);
  for (BlockHash h : {10, 11, 12, 14}) tier.Store(h);
  const std::vector<BlockHash> chain = {10, 11, 12, 13, 14};
  EXPECT_EQ(tier.CountInARow(chain, 0, 5), 3);  // stops at the first block it lacks
  EXPECT_EQ(tier.CountInARow(chain, 1, 5), 2);
  EXPECT_EQ(tier.CountInARow(chain, 1, 2), 1);  // no further than the end given
  EXPECT_EQ(tier.CountInARow(chain, 3, 5), 0);
  EXPECT_EQ(tier.CountInARow(chain, 4, 9), 1);  // nor past the chain's
}

}  // namespace
}  // namespace warden
