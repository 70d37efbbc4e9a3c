#include "core/engine/cpu_kv_tier.h"

namespace warden {

void CpuKvTier::Store(BlockHash hash) {
  if (where_.contains(hash)) return;  // (as vLLM's: stored once; lookups make it recent)
  if (size() >= capacity_) {
    where_.erase(lru_.front());
    lru_.pop_front();
  }
  where_.emplace(hash, lru_.insert(lru_.end(), hash));
}

int CpuKvTier::CountInARow(std::span<const BlockHash> hashes, int from, int end) const {
  int n = 0;
  for (int b = from; b < end && b < static_cast<int>(hashes.size()) && Holds(hashes[b]); ++b) ++n;
  return n;
}

void CpuKvTier::Touch(std::span<const BlockHash> hashes) {
  for (auto h = hashes.rbegin(); h != hashes.rend(); ++h) {
    if (const auto it = where_.find(*h); it != where_.end())
      lru_.splice(lru_.end(), lru_, it->second);
  }
}

}  // namespace warden
