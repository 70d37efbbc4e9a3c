#include "core/routing/token_history.h"

#include <cmath>

namespace warden {

TokenHistory::TokenHistory(int num_replicas, double bucket_s, int buckets)
    : num_replicas_(num_replicas), bucket_s_(bucket_s), ring_(buckets) {}

int64_t TokenHistory::IndexOf(double now) const {
  return static_cast<int64_t>(std::floor(now / bucket_s_));
}

const TokenHistory::Slot& TokenHistory::SlotAt(int64_t index) const {
  const int64_t n = static_cast<int64_t>(ring_.size());
  return ring_[static_cast<size_t>(((index % n) + n) % n)];  // (negative indices too)
}

TokenHistory::Slot& TokenHistory::SlotFor(int64_t index) {
  Slot& slot = const_cast<Slot&>(SlotAt(index));
  if (slot.index != index) {
    slot.index = index;
    slot.cached.assign(num_replicas_, 0);
    slot.computed.assign(num_replicas_, 0);
  }
  return slot;
}

void TokenHistory::Add(int replica, int64_t cached, int64_t computed, double now) {
  if (!std::isfinite(now)) return;
  Slot& slot = SlotFor(IndexOf(now));
  slot.cached[replica] += cached;
  slot.computed[replica] += computed;
  ++version_;
}

std::vector<TokenHistory::Bucket> TokenHistory::Window(double now) const {
  const int64_t last = IndexOf(now);
  const int64_t n = static_cast<int64_t>(ring_.size());
  std::vector<Bucket> out;
  out.reserve(ring_.size());
  for (int64_t index = last - n + 1; index <= last; ++index) {
    Bucket b{static_cast<double>(index) * bucket_s_, std::vector<int64_t>(num_replicas_, 0),
             std::vector<int64_t>(num_replicas_, 0)};
    if (const Slot& slot = SlotAt(index); slot.index == index) {
      b.cached = slot.cached;
      b.computed = slot.computed;
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace warden
