#include "core/routing/vllm_dp_policy.h"

#include <cmath>

namespace warden {

// Whether a coordinator broadcast has come since the last pick: a new scrape (fresh counts), or
// the next 5-s mark of the clock (zeros).
bool VllmDpPolicy::Broadcasts(const RoutingView& view) {
  if (mode_ == DpBalancer::Mode::kFresh) {
    if (view.scrape_epoch == epoch_) return false;
    epoch_ = view.scrape_epoch;
    return true;
  }
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
  if (Broadcasts(view)) {
    std::vector<EngineLoad> loads(n);
    for (int i = 0; i < n; ++i) loads[i] = {view.replicas[i].waiting, view.replicas[i].running};
    for (DpBalancer& b : api_servers_) b.Broadcast(loads);
  }
  std::vector<bool> usable(n);
  for (int i = 0; i < n; ++i) usable[i] = view.replicas[i].healthy;
  return {ApiServer(request).Pick(usable), RouteKind::kBalanced, -1};
}

}  // namespace warden
