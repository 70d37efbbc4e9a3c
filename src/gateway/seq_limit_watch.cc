#include "gateway/seq_limit_watch.h"

#include <algorithm>

namespace warden {

std::optional<SeqLimitWatch::Finding> SeqLimitWatch::Observe(int running, int waiting,
                                                             double kv_cache_usage) {
  if (running > configured_) return Finding{running, true};
  most_running_ = std::max(most_running_, running);
  // Waiting with a fifth of the cache free, at the most ever seen running, most likely means
  // the sequence limit holds requests back. Not surely: vLLM (scheduler_reserve_full_isl, on by
  // default) admits a request only when its whole prompt fits, so a prompt larger than the free
  // fifth waits too, and the warning says so.
  const bool capped = waiting > 0 && running > 0 && running < configured_ &&
                      running == most_running_ && kv_cache_usage < 0.8;
  if (!capped) {
    capped_at_ = -1;
    streak_ = 0;
    return std::nullopt;
  }
  streak_ = running == capped_at_ ? streak_ + 1 : 1;
  capped_at_ = running;
  if (streak_ < kScrapesToBelieve) return std::nullopt;
  return Finding{running, false};
}

}  // namespace warden
