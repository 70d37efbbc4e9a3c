#include "core/routing/chwbl_policy.h"

#include <cmath>

#include "core/routing/round_robin_policy.h"

namespace warden {

RouteDecision ChwblPolicy::Route(const RouteRequest& request, const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (!ring_ || ring_->num_replicas() != n) ring_ = std::make_unique<HashRing>(n);
  if (!request.sticky || request.key_hash == 0 || !view.settings.affinity)
    return {NextHealthy(view.replicas, &next_), RouteKind::kBalanced, -1};
  int healthy = 0;
  long in_flight = 0;
  for (const ReplicaLoad& r : view.replicas) {
    if (!r.healthy) continue;
    ++healthy;
    in_flight += r.in_flight;
  }
  if (healthy == 0) return {-1, RouteKind::kBalanced, -1};
  const double capacity = std::ceil((1 + epsilon_) * static_cast<double>(in_flight + 1) / healthy);
  const std::vector<int> order = ring_->Walk(request.key_hash);
  int first_healthy = -1;
  for (int r : order) {
    if (!view.replicas[r].healthy) continue;
    if (first_healthy < 0) first_healthy = r;
    if (view.replicas[r].in_flight + 1 <= capacity) {
      const RouteKind kind =
          r != first_healthy ? RouteKind::kOverflow : HashOwnerKind(request.session, r);
      return {r, kind, first_healthy};
    }
  }
  return {first_healthy, HashOwnerKind(request.session, first_healthy), first_healthy};
}

}  // namespace warden
