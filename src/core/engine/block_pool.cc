#include "core/engine/block_pool.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace warden {

BlockPool::BlockPool(int num_gpu_blocks)
    : num_gpu_blocks_(num_gpu_blocks), sentinel_(num_gpu_blocks), blocks_(num_gpu_blocks + 1) {
  assert(num_gpu_blocks >= 2);
  blocks_[sentinel_].prev = blocks_[sentinel_].next = sentinel_;
  for (BlockId b = 1; b < num_gpu_blocks; ++b) PushBack(b);
  cached_.reserve(static_cast<size_t>(num_gpu_blocks) * 2);
}

double BlockPool::Usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_gpu_blocks_ - 1);
}

int BlockPool::MatchPrefix(std::span<const BlockHash> hashes, int max_blocks,
                           std::vector<BlockId>* out) const {
  int matched = 0;
  const int limit = std::min<int>(max_blocks, static_cast<int>(hashes.size()));
  while (matched < limit) {
    const auto it = cached_.find(hashes[matched]);
    if (it == cached_.end()) break;
    out->push_back(it->second);
    ++matched;
  }
  return matched;
}

void BlockPool::Acquire(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    if (blocks_[b].in_free_queue) Unlink(b);
    ++blocks_[b].ref_count;
  }
}

void BlockPool::AllocateFresh(int n, std::vector<BlockId>* out) {
  assert(n <= num_free_);
  for (int i = 0; i < n; ++i) {
    const BlockId b = blocks_[sentinel_].next;
    Unlink(b);
    if (blocks_[b].cached) Evict(b);
    blocks_[b].ref_count = 1;
    out->push_back(b);
  }
}

void BlockPool::Cache(BlockId block, BlockHash hash) {
  Block& blk = blocks_[block];
  assert(!blk.cached);
  blk.hash = hash;
  blk.cached = true;
  auto [it, inserted] = cached_.try_emplace(hash, block);
  blk.next_same_hash = inserted ? -1 : std::exchange(it->second, block);
}

void BlockPool::ReleaseTailFirst(std::span<const BlockId> block_table) {
  for (auto it = block_table.rbegin(); it != block_table.rend(); ++it) {
    Block& blk = blocks_[*it];
    assert(blk.ref_count > 0);
    if (--blk.ref_count > 0) continue;
    if (blk.cached) {
      PushBack(*it);
    } else {
      PushFront(*it);
    }
  }
}

void BlockPool::ForgetCachedContents() {
  for (Block& blk : blocks_) {
    assert(blk.ref_count == 0);
    blk.cached = false;
    blk.next_same_hash = -1;
  }
  cached_.clear();
}

void BlockPool::Evict(BlockId b) {
  Block& blk = blocks_[b];
  auto it = cached_.find(blk.hash);
  assert(it != cached_.end());
  if (it->second == b) {
    if (blk.next_same_hash < 0) {
      cached_.erase(it);
    } else {
      it->second = blk.next_same_hash;
    }
  } else {
    BlockId prev = it->second;
    while (blocks_[prev].next_same_hash != b) prev = blocks_[prev].next_same_hash;
    blocks_[prev].next_same_hash = blk.next_same_hash;
  }
  blk.cached = false;
  blk.next_same_hash = -1;
  ++evictions_;
}

void BlockPool::PushBack(BlockId b) {
  Block& s = blocks_[sentinel_];
  blocks_[b].prev = s.prev;
  blocks_[b].next = sentinel_;
  blocks_[s.prev].next = b;
  s.prev = b;
  blocks_[b].in_free_queue = true;
  ++num_free_;
}

void BlockPool::PushFront(BlockId b) {
  Block& s = blocks_[sentinel_];
  blocks_[b].next = s.next;
  blocks_[b].prev = sentinel_;
  blocks_[s.next].prev = b;
  s.next = b;
  blocks_[b].in_free_queue = true;
  ++num_free_;
}

void BlockPool::Unlink(BlockId b) {
  Block& blk = blocks_[b];
  blocks_[blk.prev].next = blk.next;
  blocks_[blk.next].prev = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free_queue = false;
  --num_free_;
}

}  // namespace warden
