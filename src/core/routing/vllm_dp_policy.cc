#include "core/routing/vllm_dp_policy.h"

#include <limits>

namespace warden {

RouteDecision VllmDpPolicy::Route(const RouteRequest&, const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (static_cast<int>(counts_.size()) != n) counts_.assign(n, {});
  if (fresh_ && view.scrape_epoch != epoch_) {
    epoch_ = view.scrape_epoch;
    for (int i = 0; i < n; ++i) counts_[i] = {view.replicas[i].waiting, view.replicas[i].running};
  }
  int best = -1;
  long best_score = std::numeric_limits<long>::max();
  for (int i = 0; i < n; ++i) {
    if (!view.replicas[i].healthy) continue;
    const long score = 4 * counts_[i].waiting + counts_[i].running;
    if (score < best_score) {
      best_score = score;
      best = i;
    }
  }
  if (best >= 0) ++counts_[best].waiting;
  return {best, RouteKind::kBalanced, -1};
}

}  // namespace warden
