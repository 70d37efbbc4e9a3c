#include "core/routing/prefix_index.h"

#include <algorithm>
#include <cassert>

namespace warden {

PrefixIndex::PrefixIndex(int num_replicas, size_t capacity_blocks)
    : capacity_(std::min<size_t>(capacity_blocks, kNone)), replicas_(num_replicas) {
  assert(num_replicas >= 1 && capacity_blocks >= 1);
}

int PrefixIndex::Match(int replica, std::span<const uint64_t> hashes) const {
  const Replica& r = replicas_[replica];
  int matched = 0;
  for (uint64_t h : hashes) {
    if (!r.where.contains(h)) break;
    ++matched;
  }
  return matched;
}

void PrefixIndex::Unlink(Replica& r, uint32_t slot) {
  Node& n = r.nodes[slot];
  (n.newer == kNone ? r.newest : r.nodes[n.newer].older) = n.older;
  (n.older == kNone ? r.oldest : r.nodes[n.older].newer) = n.newer;
}

void PrefixIndex::LinkNewest(Replica& r, uint32_t slot) {
  Node& n = r.nodes[slot];
  n.newer = kNone;
  n.older = r.newest;
  (r.newest == kNone ? r.oldest : r.nodes[r.newest].newer) = slot;
  r.newest = slot;
}

void PrefixIndex::Insert(int replica, std::span<const uint64_t> hashes, double now,
                         bool head_newest) {
  Replica& r = replicas_[replica];
  if (head_newest) {
    for (auto it = hashes.rbegin(); it != hashes.rend(); ++it) InsertOne(r, *it, now);
  } else {
    for (uint64_t h : hashes) InsertOne(r, h, now);
  }
}

void PrefixIndex::InsertOne(Replica& r, uint64_t h, double now) {
  if (const auto it = r.where.find(h); it != r.where.end()) {
    Unlink(r, it->second);
    LinkNewest(r, it->second);
    r.nodes[it->second].at = now;
    return;
  }
  uint32_t slot;
  if (r.where.size() >= capacity_) {  // full: the least recently used block's slot
    slot = r.oldest;
    r.where.erase(r.nodes[slot].hash);
    Unlink(r, slot);
    r.nodes[slot].hash = h;
  } else if (!r.free.empty()) {
    slot = r.free.back();
    r.free.pop_back();
    r.nodes[slot].hash = h;
  } else {
    slot = static_cast<uint32_t>(r.nodes.size());
    r.nodes.push_back({h, kNone, kNone, now});
  }
  r.nodes[slot].at = now;
  LinkNewest(r, slot);
  r.where.emplace(h, slot);
}

void PrefixIndex::SetCapacity(size_t capacity_blocks) {
  assert(capacity_blocks >= 1);
  capacity_ = std::clamp<size_t>(capacity_blocks, 1, kNone);  // (slots are 32-bit)
  for (Replica& r : replicas_) {
    while (r.where.size() > capacity_) {
      const uint32_t slot = r.oldest;
      r.where.erase(r.nodes[slot].hash);
      Unlink(r, slot);
      r.free.push_back(slot);
    }
  }
}

void PrefixIndex::ExpireBefore(double t) {
  for (Replica& r : replicas_) {
    while (r.oldest != kNone && r.nodes[r.oldest].at < t) {
      const uint32_t slot = r.oldest;
      r.where.erase(r.nodes[slot].hash);
      Unlink(r, slot);
      r.free.push_back(slot);
    }
  }
}

}  // namespace warden
