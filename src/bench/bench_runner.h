// `warden bench`: the seed's load test against a gateway (or any OpenAI/Anthropic endpoint):
// closed-loop synthetic sessions, stages of N concurrent sessions, variants switched through the
// gateway's admin API, and the seed's columns measured with the seed's definitions (SPEC §6).
#pragma once

#include <string>
#include <vector>

#include "bench/conversation.h"
#include "core/workload/workload.h"
#include "report/stage_result.h"

namespace warden {

struct BenchOptions {
  std::string target = "http://127.0.0.1:8080";
  // More gateways in front of the same replicas: turn t of the n-th session goes to target
  // (n + t) mod (1 + this many), as when a load balancer spreads an agent's requests over them.
  std::vector<std::string> also_targets;
  std::string model = "qwen3-4b-dp4";
  BenchApi api = BenchApi::kAnthropic;
  bool session_ids = true;  // false: requests carry no session id (the gateway keys their opening)
  bool system_reminders = false;  // Conversation::set_system_reminders
  std::vector<int> stages = {4, 8, 16, 24, 32};
  double stage_seconds = 180;  // simulated seconds when the target runs faster than real time
  std::vector<std::string> variants = {"off", "on"};
  std::string out = "bench-out";
  // The target's time scale (a simulator run X times faster than real time): stages last
  // stage_seconds / X of wall time and every duration is reported in simulated seconds.
  double time_scale = 1;
  std::vector<std::string> metrics_urls;  // replicas' base URLs; default: from the admin API
  std::string admin_token;                // the gateways' admin_token, if they have one
  std::string api_key;  // sent as "Authorization: Bearer <key>" with every turn (if not empty)
  WorkloadOptions workload;
  bool progress = true;
};

// An error naming the flag, or empty.
std::string ValidateBenchOptions(const BenchOptions& options);

// Runs every variant and stage; fills `results` and writes the report into options.out. Returns
// false with an error when the target cannot be driven or the report cannot be written.
bool RunLoadTest(const BenchOptions& options, std::vector<StageResult>* results,
                 std::string* error);

}  // namespace warden
