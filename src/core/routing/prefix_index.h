// What a router can know about each replica's prefix cache without asking it: the block hashes of
// the requests it sent there (SGLang's approximate radix tree, llm-d's prefix-cache scorer,
// Dynamo's index all keep a variant of this). Bounded per replica; the least recently used blocks
// go first. Not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace warden {

class PrefixIndex {
 public:
  // REQUIRES: num_replicas >= 1, capacity_blocks >= 1.
  PrefixIndex(int num_replicas, size_t capacity_blocks);

  // Leading blocks of `hashes` recorded for `replica`.
  int Match(int replica, std::span<const uint64_t> hashes) const;
  // Records that `replica` received (and will cache) these blocks; refreshes their recency.
  void Insert(int replica, std::span<const uint64_t> hashes);
  // Blocks recorded for `replica` (SGLang's "tree size").
  size_t size(int replica) const { return replicas_[replica].lru.size(); }
  int num_replicas() const { return static_cast<int>(replicas_.size()); }

 private:
  struct Replica {
    std::list<uint64_t> lru;  // most recent first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  size_t capacity_;
  std::vector<Replica> replicas_;
};

}  // namespace warden
