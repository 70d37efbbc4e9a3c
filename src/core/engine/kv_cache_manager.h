// Per-request KV-cache bookkeeping on top of a BlockPool, as vLLM V1's KVCacheManager does it.
#pragma once

#include <vector>

#include "core/engine/block_pool.h"
#include "core/engine/sequence.h"

namespace warden {

class KvCacheManager {
 public:
  // `pool` must outlive the manager.
  KvCacheManager(BlockPool* pool, int block_size) : pool_(pool), block_size_(block_size) {}

  // The cached blocks matching the longest prefix of the sequence, capped so that at least the last
  // token is computed (its logits are needed). Appends them to `hit_blocks`; returns hit tokens.
  int FindCachedPrefix(const Sequence& seq, std::vector<BlockId>* hit_blocks) const;

  // Gives the sequence the blocks it needs to compute `num_new_tokens` more tokens on top of its
  // num_computed tokens plus `hit_blocks` (the prefix hit found at admission; empty otherwise), and
  // caches the blocks those tokens fill. Returns false, changing nothing, if the pool lacks blocks.
  // `reserved_blocks` of the free ones are kept for others (reads back from CPU memory under
  // way); with `cache` false the blocks are not made findable yet (their contents are still being
  // copied in: vLLM's delay_cache_blocks), and a later call caches them.
  bool AllocateSlots(Sequence* seq, int num_new_tokens, const std::vector<BlockId>& hit_blocks,
                     int reserved_blocks = 0, bool cache = true);

  // Whether the pool has the blocks for the whole of a waiting sequence's tokens on top of
  // `hit_blocks` (a hit block in the free queue counts: taking it takes it off the queue), and
  // `reserved_blocks` besides.
  bool CanFitWhole(const Sequence& seq, const std::vector<BlockId>& hit_blocks,
                   int reserved_blocks = 0) const;

  // The blocks a sequence still lacks for the whole of its tokens.
  int BlocksToFinish(const Sequence& seq) const;

  // Releases the sequence's blocks, tail first, and clears its block table.
  void Free(Sequence* seq);

  int block_size() const { return block_size_; }

 private:
  int HitsInFreeQueue(const std::vector<BlockId>& hit_blocks) const;

  BlockPool* const pool_;
  const int block_size_;
};

}  // namespace warden
