// The lab's machinery apart from the traffic it carries: N engines stepping in discrete-event time,
// the gateway's ModelRouter and admission in front of them (with its in-flight accounting and a
// scrape delay), and the counts of a measured window. A driver subclass decides what requests are
// sent and when: the load test's sessions (lab.cc) or a recorded trace (replay.cc). Internal to
// the lab.
#pragma once

#include <memory>
#include <queue>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/engine/engine.h"
#include "core/routing/admission_queue.h"
#include "core/routing/model_router.h"
#include "core/workload/workload.h"
#include "lab/lab.h"
#include "report/stage_counts.h"

namespace warden {

// The upper bounds on the hit rate, caches never evicting. Of the policy's placement: each request
// on the replica the policy sent it to, so every token is computed once per replica that needs
// it. Of any placement: every token computed once on some replica, as if one replica held every
// cache (the request placed where the longest earlier prompt sharing its start was). (Counted
// when the engine looks the request up, earlier than it can hit what others compute: bounds, not
// estimates.)
class HitBound {
 public:
  explicit HitBound(int replicas) : seen_(replicas) {}
  struct Hits {
    int on_replica = 0;     // tokens the prompt would hit on the replica it went to
    int any_placement = 0;  // tokens it would hit on the best replica of any placement
  };
  // What the prompt would hit on `replica`, and anywhere; records its blocks there.
  Hits Query(int replica, std::span<const BlockHash> hashes, int prompt_tokens, int block_size);
  // The blocks of a finished turn (its reply's included) on `replica`.
  void Record(int replica, std::span<const BlockHash> hashes) {
    seen_[replica].insert(hashes.begin(), hashes.end());
    seen_anywhere_.insert(hashes.begin(), hashes.end());
  }

 private:
  std::vector<std::unordered_set<BlockHash>> seen_;
  std::unordered_set<BlockHash> seen_anywhere_;
};

class LabRun : public CacheView {
 public:
  // `bound` goes with `engines`: engines kept warm from a run before keep what it cached there.
  // `requests`, when not null, receives every request that ends in a measured window.
  LabRun(const LabOptions& o, const EngineProfile& profile,
         std::vector<std::unique_ptr<Engine>>* engines, HitBound* bound, const std::string& policy,
         const std::string& admission, std::vector<LabRequest>* requests);
  ~LabRun() override = default;
  // What engine `replica` caches of `hashes` (CacheView: for the policies told it).
  int CachedBlocks(int replica, std::span<const uint64_t> hashes) const override;
  LabRun(const LabRun&) = delete;
  LabRun& operator=(const LabRun&) = delete;

 protected:
  enum Kind { kStepEnd, kArrival, kReleased, kScrape, kSample, kExpire, kDue };
  struct Event {
    double t;
    uint64_t seq;
    Kind kind;
    int a;
    int b;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  // One conversation (its affinity key and prompt so far).
  struct Conversation {
    std::string key;
    uint64_t id = 0;              // its number (admission's conversation id is id + 1)
    std::vector<TokenId> tokens;  // the prompt of the current turn
    std::vector<BlockHash> hashes;
    int turn = 0;
    int previous_replica = -1;
  };
  // One client: a session of the load test, or a request of a trace. Its request in flight is
  // known by the slot's index.
  struct Slot {
    std::unique_ptr<SessionScript> script;  // the load test's
    uint64_t session = 0;                   // global index of the session
    Conversation conversations[2];          // the session's main conversation, and its subagent's
    int active = 0;                         // which one the request in flight belongs to
    int subagents_done = 0;
    int replica = -1;
    RouteKind kind = RouteKind::kBalanced;
    double sent = 0, first_token = -1, admitted = 0;
    uint64_t request_id = 0;  // the router's number for the turn in flight (RouteDecision)
    int output = 0;
    int max_output = 0;    // > 0: the request's own (else the workload's)
    int reply_tokens = 0;  // > 0: its reply's natural length (else the options')
    bool idle = false;     // its session ended while the stage wanted fewer
    Conversation& conversation() { return conversations[active]; }
  };
  // One measured window: its counts and the engines' counters when it began.
  struct Window {
    StageCounts counts;
    double start = 0;
    double queries_before = 0, hits_before = 0;
  };

  // What the driver does when slot s's request ends (after it is counted), and when an event it
  // queued with Push(t, kDue, a, b) comes.
  virtual void TurnEnded(int s, double t) = 0;
  virtual void Due(int a, int b, double t) {}
  // True once the driver has nothing more to send or wait for: RunUntil stops early.
  virtual bool Done() const { return false; }

  void Push(double t, Kind kind, int a, int b) { events_.push({t, seq_++, kind, a, b}); }
  // The first scrape and sample; then the events up to `end`.
  void Begin(double t);
  void RunUntil(double end);
  // Counts from now on into `w` (null: stop counting).
  void Measure(Window* w);
  // Also counts into `w`, a slice of the measured window (null: no slice).
  void MeasureSlice(Window* w);
  StageResult Result(const std::string& variant, Window& w, double seconds) const;
  // Drops the requests still in the engines (warm runs reuse them).
  void DropUnfinished();

  // The turn of slot s (its conversation's tokens) leaves the client.
  void SendTurn(int s, double t);

  const LabOptions& o_;
  const EngineProfile& profile_;
  std::vector<std::unique_ptr<Engine>>& engines_;
  HitBound& bound_;
  std::unique_ptr<ModelRouter> router_;
  std::vector<Slot> slots_;
  Window* window_ = nullptr;
  Window* slice_ = nullptr;
  std::string variant_;
  double now_ = 0;

  // `count` on each window counting now.
  template <class F>
  void EachWindow(F count) {
    if (window_) count(window_->counts);
    if (slice_) count(slice_->counts);
  }

 private:
  void StartCounting(Window* w) const;  // the engines' counters now, for its hit rate
  void RouteTurn(int s, double t);
  void Offer(int engine, int s, double t);
  void LetIn(double t);
  void Admitted(int engine, int s, int prompt_tokens, double t);
  void Arrive(int engine, int s, double t);
  void Kick(int engine, double t);
  void StepEnd(int engine, double t);
  void OnToken(int engine, const TokenEvent& e, double t);
  void Record(const Slot& slot, const Conversation& c, const TokenEvent& e);
  void Scrape(double t);
  void Sample(double t);

  std::vector<LabRequest>* requests_;
  std::vector<std::unordered_map<RequestId, int>> owner_;
  std::vector<bool> stepping_;
  std::unique_ptr<AdmissionQueue> admission_;
  std::vector<uint64_t> released_;
  double expiry_pushed_ = -1;  // the latest expiry event queued
  std::mt19937_64 rng_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  std::vector<TokenEvent> token_events_;
  double scrape_interval_ = 1;
  double latency_ = 0;
};

// The engines a run's policies run on, and their upper bound: afresh for each policy, or, with
// LabOptions::warm, kept from the policy before.
class LabEngines {
 public:
  LabEngines(const LabOptions& o, const EngineProfile& profile) : o_(o), profile_(profile) {}
  // Before each policy.
  void Ready() {
    if (!engines_.empty() && o_.warm) {
      for (const auto& engine : engines_) engine->ClockRestarted();  // (each run's starts at 0)
      return;
    }
    engines_.clear();
    for (int i = 0; i < o_.replicas; ++i) engines_.push_back(std::make_unique<Engine>(profile_));
    bound_ = std::make_unique<HitBound>(o_.replicas);
  }
  std::vector<std::unique_ptr<Engine>>* engines() { return &engines_; }
  HitBound* bound() { return bound_.get(); }

 private:
  const LabOptions& o_;
  const EngineProfile& profile_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::unique_ptr<HitBound> bound_;
};

// The profile every engine of a run has: the named one with the options' changes.
EngineProfile LabProfile(const LabOptions& o);

// "NAME" or "NAME+ADMISSION": a policy, and the admission it runs with.
struct PolicySpec {
  std::string policy;
  std::string admission;
  // The name its rows carry: the text, and "+ADMISSION" when --admission gave one (found by
  // review: a run with --admission reserve:3 was labelled as one without).
  std::string label;
};
PolicySpec SplitPolicySpec(const std::string& text, const std::string& default_admission);

// The gateway's policies by name (MakePolicy), and the lab's own, told what each engine caches
// (RoutingView::cache) instead of estimating it, as vLLM's KV events would tell a router:
// "warden:exact", the project's policy, a measure of what the events would give it; and
// "dynamo:events", Dynamo's router as it runs by default, on the engines' events. Null for an
// unknown name.
std::unique_ptr<RoutingPolicy> MakeLabPolicy(const std::string& name);

}  // namespace warden
