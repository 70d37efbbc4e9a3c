#include "core/routing/vllm_dp_policy.h"

#include <cmath>

namespace warden {

// Whether a coordinator broadcast has come since the last pick: kFresh, the engines' counts as
// last scraped, when the coordinator publishes them (looked at as a request comes: a change undone
// between two requests is missed); kStale, the next 5-s mark of the clock (zeros).
bool VllmDpPolicy::Broadcasts(const RoutingView& view, std::span<const EngineLoad> loads) {
  if (mode_ == DpBalancer::Mode::kFresh) return coordinator_.Publishes(loads, view.now);
  const double interval = api_servers_.front().broadcast_interval_s();
  const auto period = static_cast<int64_t>(std::floor(view.now / interval));
  if (period == period_) return false;
  period_ = period;
  return true;
}

DpBalancer& VllmDpPolicy::ApiServer(const RouteRequest& request) {
  const uint64_t n = api_servers_.size();
  return api_servers_[request.key_hash != 0 ? request.key_hash % n : keyless_++ % n];
}

RouteDecision VllmDpPolicy::Route(const RouteRequest& request, const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (n == 0) return {-1, RouteKind::kBalanced, -1};
  if (static_cast<int>(api_servers_.size()) != n) {
    api_servers_.clear();
    for (int i = 0; i < n; ++i) api_servers_.emplace_back(n, mode_, i, n);
  }
  loads_.resize(n);
  for (int i = 0; i < n; ++i) loads_[i] = {view.replicas[i].waiting, view.replicas[i].running};
  if (Broadcasts(view, loads_)) {
    for (DpBalancer& b : api_servers_) b.Broadcast(loads_);
  }
  std::vector<bool> usable(n);
  for (int i = 0; i < n; ++i) usable[i] = view.replicas[i].healthy;
  return {ApiServer(request).Pick(usable), RouteKind::kBalanced, -1};
}

}  // namespace warden
