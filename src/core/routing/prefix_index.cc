#include "core/routing/prefix_index.h"

namespace warden {

PrefixIndex::PrefixIndex(int num_replicas, size_t capacity_blocks)
    : capacity_(capacity_blocks), replicas_(num_replicas) {}

int PrefixIndex::Match(int replica, std::span<const uint64_t> hashes) const {
  const Replica& r = replicas_[replica];
  int matched = 0;
  for (uint64_t h : hashes) {
    if (!r.where.contains(h)) break;
    ++matched;
  }
  return matched;
}

void PrefixIndex::Insert(int replica, std::span<const uint64_t> hashes) {
  Replica& r = replicas_[replica];
  for (uint64_t h : hashes) {
    auto it = r.where.find(h);
    if (it != r.where.end()) {
      r.lru.splice(r.lru.begin(), r.lru, it->second);
      continue;
    }
    r.lru.push_front(h);
    r.where.emplace(h, r.lru.begin());
    if (r.lru.size() > capacity_) {
      r.where.erase(r.lru.back());
      r.lru.pop_back();
    }
  }
}

}  // namespace warden
