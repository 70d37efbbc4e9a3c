#include "core/routing/dynamo_policy.h"

#include <limits>

namespace warden {

RouteDecision DynamoPolicy::Route(const RouteRequest& request, const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (!index_ || index_->num_replicas() != n) index_ = std::make_unique<PrefixIndex>(n, capacity_);
  const double blocks = static_cast<double>(request.prefix_hashes.size());
  int best = -1;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int k = 0; k < n; ++k) {
    const int i = (next_ + k) % n;
    const ReplicaLoad& r = view.replicas[i];
    if (!r.healthy) continue;
    const double prefill = blocks - index_->Match(i, request.prefix_hashes);
    const double decode = r.kv_cache_usage * r.kv_capacity_blocks;
    const double cost = overlap_weight_ * prefill + decode;
    if (cost < best_cost - 1e-9) {
      best_cost = cost;
      best = i;
    }
  }
  if (best < 0) return {-1, RouteKind::kBalanced, -1};
  next_ = (best + 1) % n;
  index_->Insert(best, request.prefix_hashes);
  return {best, RouteKind::kBalanced, -1};
}

}  // namespace warden
