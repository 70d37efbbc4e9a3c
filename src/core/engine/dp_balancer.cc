#include "core/engine/dp_balancer.h"

#include <limits>

namespace warden {

int DpBalancer::Pick() {
  int best = 0;
  long best_score = std::numeric_limits<long>::max();
  for (int i = 0; i < static_cast<int>(counts_.size()); ++i) {
    const long score = 4L * counts_[i].waiting + counts_[i].running;
    if (score < best_score) {
      best_score = score;
      best = i;
    }
  }
  ++counts_[best].waiting;
  return best;
}

void DpBalancer::Refresh(std::span<const EngineLoad> published) {
  if (mode_ == Mode::kStale) return;
  counts_.assign(published.begin(), published.end());
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
