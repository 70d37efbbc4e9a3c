#include "core/routing/warden_policy.h"

#include <algorithm>
#include <limits>

namespace warden {

void WardenPolicy::Resize(const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (static_cast<int>(caches_.size()) != n) {
    caches_.clear();
    capacity_blocks_.assign(n, 0);
    for (int i = 0; i < n; ++i)
      caches_.push_back(std::make_unique<PrefixIndex>(1, options_.default_capacity_blocks));
  }
  for (int i = 0; i < n; ++i) {
    const int published = view.replicas[i].kv_capacity_blocks;
    if (published > 0 && published != capacity_blocks_[i]) {
      capacity_blocks_[i] = published;  // (it follows the tokens a block is learned to hold)
      caches_[i]->SetCapacity(static_cast<size_t>(published));
    }
  }
}

// A conversation whose latest news came from a peer gateway (it placed it, or routed its latest
// turn): this gateway's index has not seen those blocks, so the home counts as caching the prompt
// (as far as anyone knows, it does).
int WardenPolicy::PeerServedBlocks(const RouteRequest& request) {
  const SessionTable::Entry* s = request.session;
  if (!s || s->news_from == SessionTable::kHere) return 0;
  return static_cast<int>(request.prefix_hashes.size());
}

RouteDecision WardenPolicy::Route(const RouteRequest& request, const RoutingView& view) {
  Resize(view);
  const int n = static_cast<int>(view.replicas.size());
  const double blocks = static_cast<double>(request.prefix_hashes.size());
  const bool keyed = request.sticky && view.settings.affinity;
  const int home = keyed && request.session ? request.session->home : -1;

  int best = -1;
  double best_cost = std::numeric_limits<double>::infinity();
  int shared_blocks = std::numeric_limits<int>::max();  // the prefix every replica caches
  std::vector<int> cached(n, 0);
  for (int k = 0; k < n; ++k) {
    const int i = (next_ + k) % n;
    const ReplicaLoad& r = view.replicas[i];
    if (!r.healthy) continue;
    cached[i] = options_.exact_cache && view.cache
                    ? view.cache->CachedBlocks(i, request.prefix_hashes)
                    : caches_[i]->Match(0, request.prefix_hashes);
    if (i == home) cached[i] = std::max(cached[i], PeerServedBlocks(request));
    shared_blocks = std::min(shared_blocks, cached[i]);
    const double compute_tokens = (blocks - cached[i]) * view.tokens_per_block;
    double cost = compute_tokens + options_.tokens_per_request * r.in_flight;
    // Ties: the home, then the fewest active conversations (spreads new ones).
    cost += (i == home ? 0 : 0.5) + 0.01 * r.active_conversations;
    if (cost < best_cost) {
      best_cost = cost;
      best = i;
    }
  }
  if (best < 0) return {-1, RouteKind::kBalanced, -1};
  next_ = (best + 1) % n;
  caches_[best]->Insert(0, request.prefix_hashes, 0, /*head_newest=*/true);

  if (!keyed) return {best, RouteKind::kBalanced, -1};
  if (home < 0) return {best, RouteKind::kNew, best};
  if (!view.replicas[home].healthy) return {best, RouteKind::kRehome, best};
  if (best == home) return {best, RouteKind::kSticky, -1};
  // Served elsewhere: move the home only if the old one kept nothing of this conversation's own.
  const bool home_cold = cached[home] <= shared_blocks;
  return {best, home_cold ? RouteKind::kRehome : RouteKind::kOverflow, home_cold ? best : -1};
}

}  // namespace warden
