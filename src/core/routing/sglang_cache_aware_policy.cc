#include "core/routing/sglang_cache_aware_policy.h"

#include <algorithm>
#include <limits>

namespace warden {

RouteDecision SglangCacheAwarePolicy::Route(const RouteRequest& request, const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (!trees_ || trees_->num_replicas() != n)
    trees_ = std::make_unique<PrefixIndex>(n, options_.tree_capacity_blocks);
  int least = -1, most = -1;
  for (int i = 0; i < n; ++i) {
    if (!view.replicas[i].healthy) continue;
    if (least < 0 || view.replicas[i].in_flight < view.replicas[least].in_flight) least = i;
    if (most < 0 || view.replicas[i].in_flight > view.replicas[most].in_flight) most = i;
  }
  if (least < 0) return {-1, RouteKind::kBalanced, -1};
  const int lo = view.replicas[least].in_flight, hi = view.replicas[most].in_flight;
  int chosen = -1;
  if (hi - lo > options_.balance_abs_threshold && hi > options_.balance_rel_threshold * lo) {
    chosen = least;
  } else {
    int best = -1, best_match = -1;
    for (int i = 0; i < n; ++i) {
      if (!view.replicas[i].healthy) continue;
      const int m = trees_->Match(i, request.prefix_hashes);
      if (m > best_match) {
        best_match = m;
        best = i;
      }
    }
    const double coverage =
        request.prefix_hashes.empty()
            ? 0
            : static_cast<double>(best_match) / static_cast<double>(request.prefix_hashes.size());
    if (coverage > options_.cache_threshold) {
      chosen = best;
    } else {
      size_t smallest = std::numeric_limits<size_t>::max();
      for (int i = 0; i < n; ++i) {
        if (view.replicas[i].healthy && trees_->size(i) < smallest) {
          smallest = trees_->size(i);
          chosen = i;
        }
      }
    }
  }
  trees_->Insert(chosen, request.prefix_hashes);
  return {chosen, RouteKind::kBalanced, -1};
}

}  // namespace warden
