#include "core/routing/least_loaded.h"

#include <limits>

namespace warden {

double SeedLoadScore(const ReplicaLoad& r) {
  return r.in_flight + r.peer_in_flight + r.waiting + r.active_conversations + r.kv_cache_usage;
}

int LeastLoadedPicker::Pick(std::span<const ReplicaLoad> replicas, int exclude) {
  const int n = static_cast<int>(replicas.size());
  int best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  for (int k = 0; k < n; ++k) {
    const int i = (next_ % n + k) % n;
    if (i == exclude || !replicas[i].healthy) continue;
    const double score = SeedLoadScore(replicas[i]);
    if (score < best_score - 1e-9) {
      best_score = score;
      best = i;
    }
  }
  if (best >= 0) next_ = (best + 1) % n;
  return best;
}

}  // namespace warden
