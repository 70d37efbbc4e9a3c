#include "core/routing/seed_policy.h"

namespace warden {

RouteDecision SeedPolicy::Route(const RouteRequest& request, const RoutingView& view) {
  if (!view.settings.affinity || !request.sticky) {
    return {picker_.Pick(view.replicas), RouteKind::kBalanced, -1};
  }
  const int home = request.session ? request.session->home : -1;
  if (home < 0 || home >= static_cast<int>(view.replicas.size())) {
    const int r = picker_.Pick(view.replicas);
    return {r, RouteKind::kNew, r};
  }
  if (!view.replicas[home].healthy) {
    const int r = picker_.Pick(view.replicas);
    return {r, RouteKind::kRehome, r};
  }
  const ReplicaLoad& at_home = view.replicas[home];
  if (at_home.in_flight + at_home.peer_in_flight >= view.settings.overflow_limit) {
    const int r = picker_.Pick(view.replicas, home);
    if (r >= 0) return {r, RouteKind::kOverflow, -1};
  }
  return {home, RouteKind::kSticky, -1};
}

}  // namespace warden
