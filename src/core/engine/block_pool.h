// The KV-cache block pool of one engine, with vLLM V1's prefix cache and LRU free queue.
//
// Blocks hold `block_size` tokens of KV state. A full block can be cached under its chained hash;
// a cached block that no request holds stays in the free queue with its contents, so a later
// request with the same prefix can take it back. New blocks come from the free queue's front,
// evicting whatever they cached. Requests release their blocks tail-first, so the tail of a
// conversation's chain is evicted before its head. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/engine/block_hash.h"

namespace warden {

using BlockId = int32_t;

class BlockPool {
 public:
  // Block 0 is vLLM's null block: it is reserved and never handed out.
  // REQUIRES: num_gpu_blocks >= 2.
  explicit BlockPool(int num_gpu_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_gpu_blocks() const { return num_gpu_blocks_; }
  // Blocks in the free queue: never-used ones and cached ones no request holds.
  int num_free() const { return num_free_; }
  // vLLM's kv_cache_usage_perc: 1 - free / (num_gpu_blocks - 1).
  double Usage() const;
  int64_t evictions() const { return evictions_; }
  int ref_count(BlockId block) const { return blocks_[block].ref_count; }

  // Appends to `out` the cached blocks of the longest cached prefix of `hashes`, looking at no more
  // than max_blocks of them, and returns how many it appended.
  int MatchPrefix(std::span<const BlockHash> hashes, int max_blocks,
                  std::vector<BlockId>* out) const;

  // Takes a reference on each block; blocks no one held leave the free queue.
  void Acquire(std::span<const BlockId> blocks);

  // Takes n blocks from the front of the free queue, evicting their cached contents, and appends
  // them (each with one reference) to `out`. REQUIRES: n <= num_free().
  void AllocateFresh(int n, std::vector<BlockId>* out);

  // Makes a full block findable under `hash`. Two blocks may hold the same hash (two requests that
  // computed the same prefix at once); a lookup finds either.
  void Cache(BlockId block, BlockHash hash);

  // Drops one reference from each block of a request's block table, last block first. Blocks no one
  // holds any more join the free queue: cached ones at the back (evicted last, tail of the chain
  // before its head), uncached ones at the front (reused first).
  void ReleaseTailFirst(std::span<const BlockId> block_table);

  // Forgets what every block caches (vLLM's sleep mode discards the KV cache; its
  // reset_prefix_cache). Not counted as evictions. REQUIRES: no block is held.
  void ForgetCachedContents();

 private:
  struct Block {
    BlockHash hash = 0;
    int32_t ref_count = 0;
    BlockId prev = -1;  // free-queue links
    BlockId next = -1;
    BlockId next_same_hash = -1;  // chain of blocks sharing one hash
    bool cached = false;
    bool in_free_queue = false;
  };

  void PushBack(BlockId b);
  void PushFront(BlockId b);
  void Unlink(BlockId b);
  void Evict(BlockId b);

  const int num_gpu_blocks_;
  const BlockId sentinel_;  // the free queue is a ring through blocks_[sentinel_]
  std::vector<Block> blocks_;
  int num_free_ = 0;
  int64_t evictions_ = 0;
  std::unordered_map<BlockHash, BlockId> cached_;  // hash -> first block of its chain
};

}  // namespace warden
