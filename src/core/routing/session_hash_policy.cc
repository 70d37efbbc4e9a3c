#include "core/routing/session_hash_policy.h"

#include "core/routing/round_robin_policy.h"

namespace warden {

RouteDecision SessionHashPolicy::Route(const RouteRequest& request, const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (!ring_ || ring_->num_replicas() != n) ring_ = std::make_unique<HashRing>(n);
  if (!request.sticky || request.key_hash == 0 || !view.settings.affinity)
    return {NextHealthy(view.replicas, &next_), RouteKind::kBalanced, -1};
  for (int r : ring_->Walk(request.key_hash)) {
    if (view.replicas[r].healthy) return {r, HashOwnerKind(request.session, r), r};
  }
  return {-1, RouteKind::kBalanced, -1};
}

}  // namespace warden
