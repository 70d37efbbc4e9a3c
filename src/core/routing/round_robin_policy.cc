#include "core/routing/round_robin_policy.h"

namespace warden {

int NextHealthy(std::span<const ReplicaLoad> replicas, int* next) {
  const int n = static_cast<int>(replicas.size());
  for (int k = 0; k < n; ++k) {
    const int i = (*next + k) % n;
    if (replicas[i].healthy) {
      *next = (i + 1) % n;
      return i;
    }
  }
  return -1;
}

RouteDecision RoundRobinPolicy::Route(const RouteRequest&, const RoutingView& view) {
  return {NextHealthy(view.replicas, &next_), RouteKind::kBalanced, -1};
}

}  // namespace warden
