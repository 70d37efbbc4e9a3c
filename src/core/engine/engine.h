// A simulated vLLM V1 engine (one data-parallel rank, one replica): prefix cache, continuous
// batching scheduler with chunked prefill and preemption, vLLM's counters, and a time model.
//
// The engine has no clock and does no I/O: its driver calls BeginStep(now) to schedule a step,
// waits (in real or simulated time) for the duration it returns, then calls EndStep(now + duration)
// to apply the step's results. The same engine runs inside `warden sim` (real time) and `warden
// lab` (discrete-event time). Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/engine/block_pool.h"
#include "core/engine/cpu_kv_tier.h"
#include "core/engine/kv_cache_manager.h"
#include "core/engine/profile.h"
#include "core/engine/sequence.h"
#include "util/histogram.h"

namespace warden {

// vLLM's per-engine counters, as its /metrics exports them.
struct EngineCounters {
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up at first admission
  int64_t prefix_cache_hits = 0;     // of which found in the prefix cache
  // With CPU offloading (vLLM's KV connector counters): the tokens looked up there (those the
  // GPU's cache did not have), and of them the ones read back.
  int64_t external_prefix_cache_queries = 0;
  int64_t external_prefix_cache_hits = 0;
  int64_t prompt_tokens = 0;  // counted when a request's first token is out
  int64_t generation_tokens = 0;
  int64_t preemptions = 0;
  int64_t requests_stopped = 0;  // finished with end-of-sequence
  int64_t requests_length = 0;   // finished at max_tokens
  int64_t requests_aborted = 0;
  Histogram ttft{kTtftBuckets};  // engine arrival to first token, seconds
};

// What a step produced for one request: one generated token.
struct TokenEvent {
  RequestId id = 0;
  TokenId token = 0;  // kImEnd for the end-of-sequence token (no text)
  int output_index = 0;
  FinishReason finish = FinishReason::kNone;  // kNone while the reply goes on
  int prompt_tokens = 0;
  // Prefix-cache hit tokens at first admission, those read back from CPU memory included
  // (usage's cached_tokens).
  int cached_tokens = 0;
};

struct NewRequest {
  std::vector<TokenId> prompt;
  int max_output_tokens = 1;
  // The reply's natural length, end-of-sequence token included: the reply ends with kStop when it
  // reaches this before max_output_tokens.
  int reply_tokens = 1 << 30;
  uint64_t output_seed = 0;  // picks the generated words (see core/filler.h)
  // Requests read only cached blocks of their own namespace: 0 is the base model's; a LoRA
  // adapter has one of its own, as in vLLM.
  uint64_t cache_namespace = 0;
  // The request's place in the queue with EngineProfile::priority_scheduling (lower goes first);
  // 0 otherwise.
  int priority = 0;
};

class Engine {
 public:
  // REQUIRES: profile.max_model_len <= profile.kv_capacity_tokens().
  explicit Engine(const EngineProfile& profile);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request that arrived at now_s. REQUIRES: 0 < prompt size <= max_model_len - 1.
  RequestId Add(NewRequest request, double now_s);

  // Drops a request (its client went away): its blocks are freed at once; no event follows.
  // Unknown or finished ids are ignored.
  void Abort(RequestId id);

  // Schedules the next step at now_s and returns how long it takes, or 0 if there is nothing to do.
  // REQUIRES: no step in progress.
  double BeginStep(double now_s);

  // Completes the step begun last, at end_s: appends one event per token generated.
  void EndStep(double end_s, std::vector<TokenEvent>* events);

  // vLLM's sleep mode at level 1 or 2 (and keep mode): the KV cache is gone. Running requests are
  // preempted (counted so, as vLLM's reset_prefix_cache does) and go back to the front of the
  // queue in their order, to be computed again from their start; nothing stays cached.
  // REQUIRES: no step in progress.
  void DiscardKvCache();
  // The clock that drives the engine starts again from 0 (a lab run after another on the same
  // engines, caches kept): no read back from CPU memory is under way then.
  // REQUIRES: nothing running or waiting.
  void ClockRestarted();

  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  bool step_in_progress() const { return step_in_progress_; }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  double kv_cache_usage() const { return pool_.Usage(); }
  const BlockPool& block_pool() const { return pool_; }
  // The CPU tier of the KV cache; null without offloading.
  const CpuKvTier* cpu_tier() const { return cpu_.get(); }
  const EngineCounters& counters() const { return counters_; }
  // The requests the last step begun admitted for the first time: those whose prompts the
  // prefix-cache counters counted then (the lab counts its upper bound alongside).
  const std::vector<RequestId>& first_admitted() const { return first_admitted_; }
  const EngineProfile& profile() const { return profile_; }
  // The shape of the last step begun (for tests and the lab's accounting).
  const StepShape& last_step() const { return last_step_; }

 private:
  struct Scheduled {
    Sequence* seq;
    int num_new_tokens;
    int computed_before;
  };

  bool ScheduleRunning(int* budget);
  void ScheduleWaiting(int* budget, double now_s);
  enum class Admission { kAdmitted, kLoading, kNoRoom };
  // `reserved`: the free blocks the reads back under way still need; kept free, and updated.
  Admission AdmitLoaded(Sequence* seq, int* budget, int* reserved);
  Admission Admit(Sequence* seq, int* budget, double now_s, int* reserved);
  void Run(Sequence* seq, int n, int* budget);  // admitted: n tokens of it in this step
  // Starts reading back the blocks of `seq`'s prefix the CPU tier holds after `hit_blocks` (the
  // GPU's), if there are any and the cache has room for the whole request.
  Admission StartLoad(Sequence* seq, const std::vector<BlockId>& hit_blocks, double now_s,
                      bool counted, int* reserved);
  // `external`: the lookup went on to the CPU tier (vLLM counts a connector's lookups once the
  // request has its blocks).
  void CountLookup(const Sequence& seq, int hit_tokens, int loaded_tokens, bool external);
  void Offload(Sequence* seq);  // its prompt's computed blocks to the CPU tier
  // Seconds until the first read back from CPU memory ends (0: none under way).
  double UntilLoaded(double now_s) const;
  void Preempt(Sequence* seq);
  // Puts `seq` back in the waiting queue: at its place by priority and arrival with priority
  // scheduling, else at the front (a preempted request) or the back (a new one).
  void Enqueue(Sequence* seq, bool preempted);
  // Where in running_ the request to preempt when a block is short is: the last admitted, or
  // with priority scheduling the one of the lowest priority. REQUIRES: running_ not empty.
  size_t VictimIndex() const;
  // Takes back a running request's share of the step being scheduled (it is to be preempted).
  void Unschedule(Sequence* seq, int* budget);
  void AppendToken(Sequence* seq, double now_s, std::vector<TokenEvent>* events);
  void Finish(Sequence* seq, FinishReason reason);
  void AddToShape(const Scheduled& s);

  const EngineProfile profile_;
  BlockPool pool_;
  KvCacheManager kv_;
  std::unique_ptr<CpuKvTier> cpu_;
  EngineCounters counters_;
  std::vector<RequestId> first_admitted_;
  RequestId next_id_ = 1;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> running_;  // in admission order: the last is preempted first
  std::deque<Sequence*> waiting_;
  std::vector<Scheduled> scheduled_;
  std::vector<RequestId> to_erase_;
  std::vector<BlockId> hit_scratch_;
  StepShape last_step_;
  bool step_in_progress_ = false;
  double copies_done_at_ = 0;  // when the reads back from CPU memory under way are done
};

}  // namespace warden
