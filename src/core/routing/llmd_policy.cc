#include "core/routing/llmd_policy.h"

#include <algorithm>
#include <span>

namespace warden {

RouteDecision LlmdPolicy::Route(const RouteRequest& request, const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (!index_ || index_->num_replicas() != n) index_ = std::make_unique<PrefixIndex>(n, capacity_);
  int min_queue = 1 << 30, max_queue = -1;
  for (const ReplicaLoad& r : view.replicas) {
    if (!r.healthy) continue;
    min_queue = std::min(min_queue, r.waiting);
    max_queue = std::max(max_queue, r.waiting);
  }
  if (max_queue < 0) return {-1, RouteKind::kBalanced, -1};
  const std::span<const uint64_t> blocks =
      request.prefix_hashes.first(std::min(request.prefix_hashes.size(), kMaxPrefixBlocks));
  int best = -1;
  double best_score = -1;
  for (int k = 0; k < n; ++k) {
    const int i = (next_ + k) % n;
    const ReplicaLoad& r = view.replicas[i];
    if (!r.healthy) continue;
    const double prefix = blocks.empty() ? 0
                                         : static_cast<double>(index_->Match(i, blocks)) /
                                               static_cast<double>(blocks.size());
    const double queue = max_queue == min_queue ? 1.0
                                                : static_cast<double>(max_queue - r.waiting) /
                                                      static_cast<double>(max_queue - min_queue);
    const double kv = 1.0 - std::clamp(r.kv_cache_usage, 0.0, 1.0);
    const double score = weights_.prefix * prefix + weights_.queue * queue + weights_.kv * kv;
    if (score > best_score + 1e-12) {
      best_score = score;
      best = i;
    }
  }
  next_ = (best + 1) % n;
  index_->Insert(best, blocks);
  return {best, RouteKind::kBalanced, -1};
}

}  // namespace warden
