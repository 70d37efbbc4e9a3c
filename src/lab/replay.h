// `warden lab --trace`: a recorded trace (core/workload/trace.h: the gateway's traffic_log, or a
// Mooncake trace) replayed against the lab's engines under each policy, so that policies are
// compared on real traffic rather than the load test's sessions.
//
// Each request's prompt is made of one run of tokens per hash id (the same id, the same tokens),
// cut or padded (with tokens of its own) to its input_length, so prompts share exactly the
// prefixes their ids share; it generates output_length tokens. A request is sent at its timestamp
// (divided by the speed-up); with closed_loop, a later request of a session that carries a delay is
// sent that long after the session's previous request ends in the replay, and one without (sent
// while the one before it ran) that long after the previous was sent as in the trace, so that a
// faster or slower policy moves a conversation's turns as its client would.
#pragma once

#include <string>
#include <vector>

#include "core/workload/trace.h"
#include "lab/lab.h"
#include "report/stage_result.h"

namespace warden {

struct ReplayOptions {
  int block_tokens = 512;  // tokens per hash id (Mooncake's 512; the gateway's traffic_log_block)
  // Where the trace's prompts are not as long as their ids say, each id stands for its share of
  // block_tokens (ReplayNotes::tokens_per_id); false: block_tokens whatever the lengths.
  bool fit_blocks = true;
  double speed = 1;  // timestamps and delays are divided by this
  bool closed_loop = true;
  // > 0: this many conversations at once, each the trace's next (by its first request) as soon as
  // one ends, whatever its recorded start; within a conversation, its recorded timing. A trace
  // becomes a load test of its own traffic (how a policy does at N at once), as `warden bench`'s
  // stages are of its sessions. Needs closed_loop.
  int concurrency = 0;
  // > 0: also a result per window of this many seconds of the replay (after the speed-up), from
  // its first request on: how each policy did hour by hour of a long trace, where one row over
  // the whole of it mixes busy hours with quiet ones.
  double window_s = 0;
};

// One window of a replay (ReplayOptions::window_s): its counts as a stage's, its `sessions` the
// conversations that sent a request in it.
struct ReplayWindow {
  double start_s = 0;  // since the replay's first request
  StageResult result;
};

// What the replay left out, for the report.
struct ReplayNotes {
  int requests = 0;          // replayed
  int sessions = 0;          // distinct session ids (requests without one count one each)
  int too_long = 0;          // prompts longer than a replica's context: left out
  double trace_seconds = 0;  // from the first timestamp to the last, after the speed-up
  int tokens_per_id = 0;     // what each hash id was replayed as
};

// windows.csv: a header line, then a line per window (its start and length in seconds, the
// seed's columns with `sessions` the window's conversations, the upper bound on the hit rate).
std::string ReplayWindowsCsv(const std::vector<ReplayWindow>& windows);

// An error naming the flag, or empty.
std::string ValidateReplayOptions(const ReplayOptions& options);

// Replays `trace` under every policy of `o` (its stages and workload unused), one result per
// policy over the whole replay: from the first request sent to the last one's end. `requests`,
// when given, receives every request; `windows`, with a window_s, each policy's windows in turn.
bool RunReplay(const LabOptions& o, const ReplayOptions& replay,
               const std::vector<TraceRequest>& trace, std::vector<StageResult>* results,
               ReplayNotes* notes, std::string* error, std::vector<LabRequest>* requests = nullptr,
               std::vector<ReplayWindow>* windows = nullptr);

}  // namespace warden
