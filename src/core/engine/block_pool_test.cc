#include "core/engine/block_pool.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(BlockPool, NullBlockIsReservedAndUsageCountsTheRest) {
  BlockPool pool(5);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_DOUBLE_EQ(pool.Usage(), 0.0);
  std::vector<BlockId> got;
  pool.AllocateFresh(4, &got);
  EXPECT_EQ(got, (std::vector<BlockId>{1, 2, 3, 4}));
  EXPECT_DOUBLE_EQ(pool.Usage(), 1.0);
}

TEST(BlockPool, CachedBlocksSurviveReleaseAndAreEvictedTailFirst) {
  BlockPool pool(5);
  std::vector<BlockId> table;
  pool.AllocateFresh(3, &table);  // 1, 2, 3
  for (int i = 0; i < 3; ++i) pool.Cache(table[i], 100 + i);
  pool.ReleaseTailFirst(table);
  EXPECT_EQ(pool.num_free(), 4);  // free queue: 4, 3, 2, 1

  std::vector<BlockId> hits;
  const BlockHash chain[] = {100, 101, 102};
  EXPECT_EQ(pool.MatchPrefix(chain, 3, &hits), 3);

  std::vector<BlockId> fresh;
  pool.AllocateFresh(2, &fresh);  // takes 4 (never used) then 3 (tail of the chain)
  EXPECT_EQ(fresh, (std::vector<BlockId>{4, 3}));
  EXPECT_EQ(pool.evictions(), 1);
  hits.clear();
  EXPECT_EQ(pool.MatchPrefix(chain, 3, &hits), 2);
}

TEST(BlockPool, AcquiringACachedFreeBlockTakesItOutOfTheFreeQueue) {
  BlockPool pool(3);
  std::vector<BlockId> table;
  pool.AllocateFresh(1, &table);
  pool.Cache(table[0], 7);
  pool.ReleaseTailFirst(table);
  EXPECT_EQ(pool.num_free(), 2);
  pool.Acquire(table);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.ref_count(table[0]), 1);
}

TEST(BlockPool, UncachedReleasedBlocksAreReusedFirst) {
  BlockPool pool(4);
  std::vector<BlockId> cached, scratch;
  pool.AllocateFresh(1, &cached);  // 1
  pool.Cache(cached[0], 9);
  pool.AllocateFresh(1, &scratch);  // 2, never cached
  pool.ReleaseTailFirst(cached);    // queue: 3, 1
  pool.ReleaseTailFirst(scratch);   // queue: 2, 3, 1
  std::vector<BlockId> next;
  pool.AllocateFresh(2, &next);
  EXPECT_EQ(next, (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(pool.evictions(), 0);
}

TEST(BlockPool, DuplicateHashStaysFindableAfterOneCopyIsEvicted) {
  BlockPool pool(4);
  std::vector<BlockId> a, b;
  pool.AllocateFresh(1, &a);
  pool.AllocateFresh(1, &b);
  pool.Cache(a[0], 42);
  pool.Cache(b[0], 42);
  pool.ReleaseTailFirst(a);  // queue: 3, a
  pool.ReleaseTailFirst(b);  // queue: 3, a, b
  std::vector<BlockId> fresh;
  pool.AllocateFresh(2, &fresh);  // 3, then evicts a
  std::vector<BlockId> hits;
  const BlockHash h[] = {42};
  ASSERT_EQ(pool.MatchPrefix(h, 1, &hits), 1);
  EXPECT_EQ(hits[0], b[0]);
}

}  // namespace
}  // namespace warden
