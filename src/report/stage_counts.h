// What a load test or a lab run measures during one stage, before it becomes the seed's columns.
#pragma once

#include <string>
#include <vector>

#include "report/stage_result.h"

namespace warden {

struct StageCounts {
  int sessions = 0;            // concurrent sessions of the stage
  std::vector<double> ttfb_s;  // time to first token of each turn whose first token came in it
  long tokens = 0;             // output tokens received
  long turns = 0;              // turns completed
  long errors = 0;
  long sessions_completed = 0;
  long follow_ups = 0;         // turns after a session's first
  long stayed = 0;             // of which on the replica of the session's previous turn
  std::vector<int> busy;       // replicas with running requests, sampled every second
  double prefix_queries = -1;  // the engines' counters over the stage (< 0: not measured)
  double prefix_hits = 0;
  double bound_queries = 0;  // the lab's upper bounds on hits: of the policy's placement,
  double bound_hits = 0;
  double any_bound_hits = 0;  // and of any placement
};

// The seed's columns (SPEC §6) from a stage's counts.
StageResult Summarize(const StageCounts& counts, const std::string& variant, double stage_seconds);

}  // namespace warden
