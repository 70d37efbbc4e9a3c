// `warden lab`: the load test's sessions against N simulated engines under a routing policy, in
// discrete-event time: the same workload generator as `warden bench`, the same engine model as
// `warden sim`, the same ModelRouter and policies as `warden serve` (with the gateway's in-flight
// accounting and a scrape delay), and no sockets. Hours of traffic in seconds, deterministic.
#pragma once

#include <string>
#include <vector>

#include "core/workload/workload.h"
#include "report/stage_result.h"

namespace warden {

struct LabOptions {
  std::string profile = "a4000-qwen3-4b";
  int kv_tokens = 0;     // > 0: the KV cache per replica, in tokens, instead of the profile's
  int max_num_seqs = 0;  // > 0: instead of the profile's
  bool reserve_full_prompt = true;  // EngineProfile::reserve_full_prompt
  bool count_every_lookup = false;  // EngineProfile::count_every_lookup
  double kv_offloading_gib = 0;     // EngineProfile::kv_offloading_gib, per replica
  int replicas = 4;
  std::vector<int> stages = {4, 8, 16, 24, 32};
  double stage_seconds = 180;
  std::vector<std::string> policies = {"vllm-dp", "warden-seed"};
  std::string out = "lab-out";
  WorkloadOptions workload;
  double scrape_interval_s = 1.0;  // the gateway's default (a policy may ask for faster)
  int overflow_limit = 0;          // 0: auto, a quarter of max_num_seqs
  double api_latency_s = -1;       // < 0: the profile's
  double latency_jitter = 0.5;     // each request's latency is uniform in (1 ± this) x the mean
  int reply_tokens = 300;          // the natural reply length (max_tokens may cut it)
  // Per replica, a factor on its step times (a slower GPU): empty means all 1.
  std::vector<double> replica_slowdown;
  // Run the policies one after another on the same engines (caches warm from the previous
  // policy, as the seed's "on" variant followed its "off"); default: fresh engines per policy.
  bool warm = false;
  // Subagents (Claude Code's Task tool): after each of its first `subagents` turns a session
  // spawns one, with its own system prompt (shared by all subagents), a task message and
  // `subagent_turns` turns in all; the parent's next turn waits for it.
  int subagents = 0;
  int subagent_turns = 4;
  int subagent_system_tokens = 2500;
  int subagent_task_tokens = 1000;
  // Admission at the gateway (core/routing/admission_queue.h): "off", "fifo", "recent:K"
  // or "reserve:N[:SECONDS]".
  std::string admission = "off";
  // No request is held by admission longer than this (the gateway's admission_max_hold_s: past it
  // the request goes to its replica, where its client gets the head); 0: no bound.
  double admission_max_hold_s = 240;
  bool progress = true;
};

// One request that ended during a measured stage: who waited where, and what the cache held. For
// looking past a stage's percentiles into what a policy did to which turns.
struct LabRequest {
  std::string variant;
  int sessions = 0;      // the stage
  uint64_t session = 0;  // the session's global index
  bool subagent = false;
  int turn = 0;  // 0: the conversation's first request
  int replica = 0;
  std::string route;   // new, sticky, overflow, rehome or balanced
  double sent_s = 0;   // since the stage began
  double held_s = 0;   // from sending to entering the engine: network latency and admission
  double ttft_s = -1;  // from sending to the first token
  double ended_s = 0;  // since the stage began: its last token (not in requests.csv)
  int prompt_tokens = 0;
  int cached_tokens = 0;
  int output_tokens = 0;
};

// A header line, then one line per request.
std::string LabRequestsCsv(const std::vector<LabRequest>& requests);

// An error naming the flag, or empty.
std::string ValidateLabOptions(const LabOptions& options);

// The policies the lab runs, for --help and errors: the gateway's, warden:exact and dynamo:events.
std::string LabPolicyNameList();

// Runs every policy over every stage. Results carry the policy's name as their variant and the
// stage's upper bound on the hit rate; `requests`, when given, receives every request that ended
// in a measured stage. Does not write files.
bool RunLab(const LabOptions& options, std::vector<StageResult>* results, std::string* error,
            std::vector<LabRequest>* requests = nullptr);

}  // namespace warden
