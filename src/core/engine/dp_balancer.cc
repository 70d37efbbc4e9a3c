#include "core/engine/dp_balancer.h"

#include <algorithm>
#include <limits>

namespace warden {

int DpBalancer::Pick(const std::vector<bool>& usable) {
  const int n = static_cast<int>(counts_.size());
  int best = -1;
  long best_score = std::numeric_limits<long>::max();
  for (int k = 0; k < n; ++k) {
    const int i = (start_ + k) % n;
    if (!usable.empty() && !usable[i]) continue;
    const long score = 4L * counts_[i].waiting + counts_[i].running;
    if (score < best_score) {
      best_score = score;
      best = i;
    }
  }
  if (best < 0) return -1;
  counts_[best].waiting += api_servers_;
  start_ = (start_ + 1) % n;
  return best;
}

void DpBalancer::Broadcast(std::span<const EngineLoad> engines) {
  if (mode_ == Mode::kStale) {
    counts_.assign(counts_.size(), EngineLoad{});
  } else {
    counts_.assign(engines.begin(), engines.end());
  }
}

bool DpCoordinator::Publishes(std::span<const EngineLoad> counts, double now) {
  const bool changed =
      !std::equal(counts.begin(), counts.end(), published_.begin(), published_.end());
  // (A float's rounding would put a look exactly one interval on a tick just short of it.)
  const double since = now - published_at_ + 1e-9;
  if (ever_ && since < (changed ? kChangedInterval : kUnchangedInterval)) return false;
  published_.assign(counts.begin(), counts.end());
  published_at_ = now;
  ever_ = true;
  return true;
}

bool ParseDpBalancerMode(std::string_view name, DpBalancer::Mode* mode) {
  if (name == "vllm-dp") {
    *mode = DpBalancer::Mode::kStale;
  } else if (name == "vllm-dp-fresh") {
    *mode = DpBalancer::Mode::kFresh;
  } else {
    return false;
  }
  return true;
}

std::string_view DpBalancerModeName(DpBalancer::Mode mode) {
  return mode == DpBalancer::Mode::kStale ? "vllm-dp" : "vllm-dp-fresh";
}

}  // namespace warden
