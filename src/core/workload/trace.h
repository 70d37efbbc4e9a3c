// A traffic trace: one JSON object per line per request, in the Mooncake trace format (Mooncake's
// FAST'25 traces, read by NVIDIA's aiperf and Dynamo's tools) with aiperf's two multi-turn fields:
//
//   {"timestamp": 27482, "session_id": "a1b2…", "delay": 1200, "input_length": 6955,
//    "output_length": 52, "hash_ids": [46, 47, 48]}
//
// timestamp: when the request arrived, in milliseconds (from any origin: readers subtract the
// first); each line is a whole prompt (as in Mooncake's traces; aiperf's multi-turn mode reads a
// session's later lines as the conversation's new part only, by default); input_length,
// output_length: its prompt and reply in tokens; hash_ids: one id per block of the prompt's tokens
// (Mooncake's blocks are 512 tokens), equal ids meaning equal blocks *and* equal prefixes before
// them, so that two prompts share a cached prefix exactly as long as their leading ids agree.
// session_id (optional): the conversation it belongs to; delay (optional, with a session):
// milliseconds since the session's previous request ended, for a replay that waits on its own
// answers. `warden serve` writes such lines (traffic_log), `warden lab --trace` replays them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

struct TraceRequest {
  double timestamp_ms = -1;  // < 0: none (aiperf leaves it out after a session's first turn)
  std::string session_id;    // empty: none
  double delay_ms = -1;      // < 0: none
  int input_length = 0;
  int output_length = 0;
  std::vector<uint64_t> hash_ids;
};

// One line (with its '\n').
std::string TraceLine(const TraceRequest& request);

// Parses a whole trace; blank lines are skipped. Returns false with an error naming the line and
// the field. Requests come out in the order of the file (not sorted by timestamp). With
// `not_json`, a line that is not JSON at all (one a full disk cut short) is left out and counted
// there rather than refused.
bool ParseTrace(std::string_view text, std::vector<TraceRequest>* requests, std::string* error,
                int* not_json = nullptr);

}  // namespace warden
