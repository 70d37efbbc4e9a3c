// vLLM's native CPU offloading of the KV cache (`--kv-offloading-size GiB`, its
// OffloadingConnector): the blocks of every prompt are copied to CPU memory as they are computed,
// and a request the GPU cache holds only the start of reads on from there, blocks in a row, and
// has them copied back instead of computing them. The CPU side holds whole blocks by hash, with
// LRU eviction; a lookup refreshes every block of the request it holds. Not thread-safe.
#pragma once

#include <list>
#include <span>
#include <unordered_map>

#include "core/engine/block_hash.h"

namespace warden {

class CpuKvTier {
 public:
  // REQUIRES: capacity_blocks >= 1.
  explicit CpuKvTier(int capacity_blocks) : capacity_(capacity_blocks) {}
  CpuKvTier(const CpuKvTier&) = delete;
  CpuKvTier& operator=(const CpuKvTier&) = delete;

  int capacity() const { return capacity_; }
  int size() const { return static_cast<int>(where_.size()); }
  bool Holds(BlockHash hash) const { return where_.contains(hash); }

  // Keeps a block, evicting the least recently used one when full; one it holds stays where it
  // is (vLLM stores a block once; a lookup, Touch, is what makes it recent).
  void Store(BlockHash hash);

  // How many of hashes[from], hashes[from + 1], ... (no further than hashes[end - 1]) it holds
  // in a row.
  int CountInARow(std::span<const BlockHash> hashes, int from, int end) const;

  // Makes each block of `hashes` it holds recent, the first ones most (so that a conversation's
  // shared head outlives its tail, as vLLM's LRU touches a request's keys in reverse).
  void Touch(std::span<const BlockHash> hashes);

 private:
  const int capacity_;
  std::list<BlockHash> lru_;  // least recently used first
  std::unordered_map<BlockHash, std::list<BlockHash>::iterator> where_;
};

}  // namespace warden
