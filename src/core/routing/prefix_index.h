// What a router can know about each replica's prefix cache without asking it: the block hashes of
// the requests it sent there (SGLang's approximate radix tree, llm-d's prefix-cache scorer,
// Dynamo's index all keep a variant of this). Bounded per replica; the least recently used blocks
// go first. Not thread-safe.
#pragma once

#include <boost/unordered/unordered_flat_map.hpp>
#include <cstdint>
#include <span>
#include <vector>

namespace warden {

class PrefixIndex {
 public:
  // REQUIRES: num_replicas >= 1, capacity_blocks >= 1.
  PrefixIndex(int num_replicas, size_t capacity_blocks);

  // Leading blocks of `hashes` recorded for `replica`.
  int Match(int replica, std::span<const uint64_t> hashes) const;
  // Records that `replica` received (and will cache) these blocks at `now`; refreshes their
  // recency. The last block is the most recent, unless `head_newest`: then the first is, and the
  // prompt's tail goes before its head, as vLLM frees a finished request's blocks tail first.
  void Insert(int replica, std::span<const uint64_t> hashes, double now = 0,
              bool head_newest = false);
  // Holds at most `capacity_blocks` a replica from now on, forgetting the least recently used
  // blocks past it. REQUIRES: capacity_blocks >= 1.
  void SetCapacity(size_t capacity_blocks);
  // Forgets every block last recorded before `t`: an index whose entries live a fixed time
  // (Dynamo's without the engines' KV events).
  void ExpireBefore(double t);
  // Blocks recorded for `replica` (SGLang's "tree size").
  size_t size(int replica) const { return replicas_[replica].where.size(); }
  int num_replicas() const { return static_cast<int>(replicas_.size()); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // A block in a replica's recency list: about 42 bytes a block with the map, against 80 for a
  // std::list and std::unordered_map (2^20 blocks a replica in the baselines' defaults).
  struct Node {
    uint64_t hash;
    uint32_t newer, older;
    double at;  // when last recorded
  };
  struct Replica {
    std::vector<Node> nodes;     // slots, reused once full
    std::vector<uint32_t> free;  // slots of expired blocks
    uint32_t newest = kNone, oldest = kNone;
    boost::unordered_flat_map<uint64_t, uint32_t> where;  // hash -> slot
  };
  static void Unlink(Replica& r, uint32_t slot);
  static void LinkNewest(Replica& r, uint32_t slot);
  void InsertOne(Replica& r, uint64_t h, double now);

  size_t capacity_;
  std::vector<Replica> replicas_;
};

}  // namespace warden
