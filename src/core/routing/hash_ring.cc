#include "core/routing/hash_ring.h"

#include <xxhash.h>

#include <algorithm>

namespace warden {

HashRing::HashRing(int num_replicas, int points_per_replica) : num_replicas_(num_replicas) {
  for (int r = 0; r < num_replicas; ++r) {
    for (int p = 0; p < points_per_replica; ++p) {
      const uint64_t seed[2] = {static_cast<uint64_t>(r), static_cast<uint64_t>(p)};
      points_.emplace_back(XXH3_64bits(seed, sizeof(seed)), r);
    }
  }
  std::sort(points_.begin(), points_.end());
}

std::vector<int> HashRing::Walk(uint64_t key) const {
  std::vector<int> order;
  std::vector<bool> seen(num_replicas_, false);
  auto it = std::lower_bound(points_.begin(), points_.end(), std::make_pair(key, -1));
  for (size_t k = 0; k < points_.size() && static_cast<int>(order.size()) < num_replicas_;
       ++k, ++it) {
    if (it == points_.end()) it = points_.begin();
    if (!seen[it->second]) {
      seen[it->second] = true;
      order.push_back(it->second);
    }
  }
  return order;
}

RouteKind HashOwnerKind(const SessionTable::Entry* session, int replica) {
  if (!session || session->home < 0) return RouteKind::kNew;  // (a known one with no home yet)
  return session->home != replica ? RouteKind::kRehome : RouteKind::kSticky;
}

}  // namespace warden
