#include "core/routing/least_loaded.h"

#include <algorithm>
#include <limits>

namespace warden {

double SeedLoadScore(const ReplicaLoad& r) {
  return r.in_flight + r.peer_in_flight + r.waiting + r.active_conversations + r.kv_cache_usage;
}

int LeastLoadedPicker::Pick(std::span<const ReplicaLoad> replicas, int exclude) {
  const int n = static_cast<int>(replicas.size());
  if (n == 0) return -1;
  const int in_share = share_count_ < 0 ? n : std::clamp(share_count_, 0, n);
  const int first = ((share_first_ % n) + n) % n;
  // Offsets from `first`: the share's [0, in_share) from next_, then the rest from next_out_.
  const auto offset_of = [&](int replica) { return ((replica - first) % n + n) % n; };
  const int in_start = in_share > 0 ? offset_of(((next_ % n) + n) % n) % in_share : 0;
  const int out_count = n - in_share;
  const int out_start =
      out_count > 0 ? (offset_of(((next_out_ % n) + n) % n) - in_share + n) % n % out_count : 0;
  int best = -1;
  bool best_in_share = false;
  double best_score = std::numeric_limits<double>::infinity();
  for (int k = 0; k < n; ++k) {
    const bool share = k < in_share;
    const int offset =
        share ? (in_start + k) % in_share : in_share + (out_start + k - in_share) % out_count;
    const int i = (first + offset) % n;
    if (i == exclude || !replicas[i].healthy) continue;
    const double score = SeedLoadScore(replicas[i]);
    if (score < best_score - 1e-9) {
      best_score = score;
      best = i;
      best_in_share = share;
    }
  }
  if (best < 0) return best;
  const int past = offset_of(best) + 1;  // the next offset round from the pick
  if (best_in_share) {
    next_ = (first + past % std::max(1, in_share)) % n;
  } else {
    next_out_ = (first + in_share + (past - in_share) % out_count) % n;
  }
  return best;
}

}  // namespace warden
