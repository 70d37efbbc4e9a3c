#include "core/routing/token_history.h"

#include <cmath>

namespace warden {

TokenHistory::TokenHistory(int num_replicas, double bucket_s, int buckets)
    : num_replicas_(num_replicas), bucket_s_(bucket_s), ring_(buckets) {}

TokenHistory::Slot& TokenHistory::SlotFor(int64_t index) {
  Slot& slot = ring_[static_cast<size_t>(index % static_cast<int64_t>(ring_.size()))];
  if (slot.index != index) {
    slot.index = index;
    slot.cached.assign(num_replicas_, 0);
    slot.computed.assign(num_replicas_, 0);
  }
  return slot;
}

void TokenHistory::Add(int replica, int64_t cached, int64_t computed, double now) {
  Slot& slot = SlotFor(static_cast<int64_t>(std::floor(std::max(0.0, now) / bucket_s_)));
  slot.cached[replica] += cached;
  slot.computed[replica] += computed;
}

std::vector<TokenHistory::Bucket> TokenHistory::Window(double now) const {
  const int64_t last = static_cast<int64_t>(std::floor(std::max(0.0, now) / bucket_s_));
  const int64_t n = static_cast<int64_t>(ring_.size());
  std::vector<Bucket> out;
  out.reserve(ring_.size());
  for (int64_t index = last - n + 1; index <= last; ++index) {
    Bucket b{static_cast<double>(index) * bucket_s_, std::vector<int64_t>(num_replicas_, 0),
             std::vector<int64_t>(num_replicas_, 0)};
    if (index >= 0) {
      const Slot& slot = ring_[static_cast<size_t>(index % n)];
      if (slot.index == index) {
        b.cached = slot.cached;
        b.computed = slot.computed;
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace warden
