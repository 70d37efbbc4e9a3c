#include "report/stage_counts.h"

#include <numeric>

#include "util/stats.h"

namespace warden {

StageResult Summarize(const StageCounts& c, const std::string& variant, double stage_seconds) {
  StageResult r;
  r.sessions = c.sessions;
  r.variant = variant;
  r.stage_seconds = stage_seconds;
  r.sessions_per_hour = c.sessions_completed * 3600.0 / stage_seconds;
  r.output_tokens_per_min = c.tokens * 60.0 / stage_seconds;
  r.ttfb_p50_s = Percentile(c.ttfb_s, 50);
  r.ttfb_p95_s = Percentile(c.ttfb_s, 95);
  if (!c.busy.empty())
    r.replicas_busy = std::accumulate(c.busy.begin(), c.busy.end(), 0.0) / c.busy.size();
  if (c.prefix_queries > 0) r.prefix_hit_pct = 100.0 * c.prefix_hits / c.prefix_queries;
  if (c.follow_ups > 0) r.stayed_on_replica_pct = 100.0 * c.stayed / c.follow_ups;
  if (c.bound_queries > 0) {
    r.upper_bound_hit_pct = 100.0 * c.bound_hits / c.bound_queries;
    r.any_placement_bound_hit_pct = 100.0 * c.any_bound_hits / c.bound_queries;
  }
  r.turns = c.turns;
  r.errors = c.errors;
  return r;
}

}  // namespace warden
