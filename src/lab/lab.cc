#include "lab/lab.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <queue>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "core/chat_template.h"
#include "core/engine/engine.h"
#include "core/routing/admission_queue.h"
#include "core/routing/model_router.h"
#include "core/routing/policy_factory.h"
#include "core/tokenizer.h"
#include "report/stage_counts.h"
#include "util/first_repeated.h"
#include "util/stats.h"

namespace warden {
namespace {

// One stage: its counts and the engines' counters when it began.
struct Window {
  StageCounts counts;
  double start = 0;
  double queries_before = 0, hits_before = 0;
};

// The upper bound on the hit rate: each request on the replica the policy sent it to, caches
// never evicting, so every token is computed once per replica that needs it. (Counted when the
// request is sent, earlier than the engine can hit what others compute: a bound, not an estimate.)
class HitBound {
 public:
  explicit HitBound(int replicas) : seen_(replicas) {}
  // Hit tokens the prompt would get on `replica`; records the prompt's blocks there.
  int Query(int replica, std::span<const BlockHash> hashes, int prompt_tokens, int block_size) {
    auto& seen = seen_[replica];
    const int cap = (prompt_tokens - 1) / block_size;
    int hit = 0;
    while (hit < cap && hit < static_cast<int>(hashes.size()) && seen.contains(hashes[hit])) ++hit;
    seen.insert(hashes.begin(), hashes.end());
    return hit * block_size;
  }
  // The blocks of a finished turn (its reply's included) on `replica`.
  void Record(int replica, std::span<const BlockHash> hashes) {
    seen_[replica].insert(hashes.begin(), hashes.end());
  }

 private:
  std::vector<std::unordered_set<BlockHash>> seen_;
};

class LabRun {
 public:
  // `bound` goes with `engines`: engines kept warm from a run before keep what it cached there.
  LabRun(const LabOptions& o, const EngineProfile& profile,
         std::vector<std::unique_ptr<Engine>>* engines, HitBound* bound, const std::string& policy,
         const std::string& admission, std::vector<LabRequest>* requests)
      : o_(o),
        requests_(requests),
        profile_(profile),
        engines_(*engines),
        owner_(engines->size()),
        stepping_(engines->size(), false),
        bound_(*bound),
        rng_(o.workload.seed * 7919 + 1) {
    ModelRouterOptions ro;
    ro.settings.overflow_limit =
        o.overflow_limit > 0 ? o.overflow_limit : std::max(1, profile.max_num_seqs / 4);
    ro.overflow_limit_auto = o.overflow_limit == 0;
    router_ =
        std::make_unique<ModelRouter>(static_cast<int>(engines->size()), MakePolicy(policy), ro);
    scrape_interval_ = router_->policy().refresh_interval_s() > 0
                           ? router_->policy().refresh_interval_s()
                           : o.scrape_interval_s;
    latency_ = o.api_latency_s >= 0 ? o.api_latency_s : profile.api_latency_s;
    AdmissionOptions admission_options;
    ParseAdmission(admission, &admission_options);
    admission_ =
        std::make_unique<AdmissionQueue>(static_cast<int>(engines->size()), profile.block_size,
                                         o.workload.max_output_tokens, admission_options);
    system_tokens_.clear();
    BeginMessage(Role::kSystem, &system_tokens_);
    Tokenize(SessionScript::SystemPrompt(o.workload), &system_tokens_);
    EndMessage(&system_tokens_);
    BeginMessage(Role::kSystem, &subagent_system_tokens_);
    Tokenize(FillerText(o.workload.seed * 977 + 5, o.subagent_system_tokens),
             &subagent_system_tokens_);
    EndMessage(&subagent_system_tokens_);
    for (int i = 0; i < static_cast<int>(engines->size()); ++i)
      admission_->SetCapacity(i, profile.kv_capacity_tokens());
  }

  std::vector<StageResult> Run(const std::string& variant) {
    variant_ = variant;
    std::vector<StageResult> results;
    double t = now_;
    Push(t, kScrape, 0, 0);
    // The first sample a second in, as the bench takes it: at the start nothing runs yet.
    Push(t + 1.0, kSample, 0, 0);
    for (int sessions : o_.stages) {
      Window w;
      w.counts.sessions = sessions;
      w.start = t;
      for (const auto& e : engines_) {
        w.queries_before += e->counters().prefix_cache_queries;
        w.hits_before += e->counters().prefix_cache_hits;
      }
      window_ = &w;
      wanted_ = sessions;
      // Slots a smaller stage left idle first, then new ones.
      for (int s = 0; s < std::min(sessions, static_cast<int>(slots_.size())); ++s) {
        if (slots_[s].idle) StartSession(s, t);
      }
      while (static_cast<int>(slots_.size()) < sessions) {
        slots_.emplace_back();
        StartSession(static_cast<int>(slots_.size()) - 1, t);
      }
      const double end = t + o_.stage_seconds;
      RunUntil(end);
      results.push_back(Result(variant, w));
      t = end;
    }
    window_ = nullptr;
    // Requests still in the engines belong to this run: drop them (warm runs reuse the engines).
    for (size_t i = 0; i < engines_.size(); ++i) {
      for (const auto& [id, slot] : owner_[i]) engines_[i]->Abort(id);
      if (stepping_[i]) {
        std::vector<TokenEvent> ignored;
        engines_[i]->EndStep(now_, &ignored);
      }
    }
    return results;
  }

 private:
  enum Kind { kStepEnd, kArrival, kReleased, kScrape, kSample, kExpire };
  struct Event {
    double t;
    uint64_t seq;
    Kind kind;
    int a;
    int b;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  // One conversation of a session (its affinity key and prompt so far).
  struct Conversation {
    std::string key;
    uint64_t id = 0;              // its number (admission's conversation id is id + 1)
    std::vector<TokenId> tokens;  // the prompt of the current turn
    std::vector<BlockHash> hashes;
    int turn = 0;
    int previous_replica = -1;
  };
  struct Slot {
    std::unique_ptr<SessionScript> script;
    uint64_t session = 0;           // global index of the session
    Conversation conversations[2];  // the session's main conversation, and its subagent's
    int active = 0;                 // which one the request in flight belongs to
    int subagents_done = 0;
    int replica = -1;
    RouteKind kind = RouteKind::kBalanced;
    double sent = 0, first_token = -1, admitted = 0;
    uint64_t request_id = 0;  // the router's number for the turn in flight (RouteDecision)
    int output = 0;
    int bound_hit = 0, bound_query = 0;  // the upper bound's for the request in flight
    bool idle = false;                   // its session ended while the stage wanted fewer
    Conversation& conversation() { return conversations[active]; }
  };

  void Push(double t, Kind kind, int a, int b) { events_.push({t, seq_++, kind, a, b}); }

  void StartSession(int s, double t) {
    Slot& slot = slots_[s];
    slot.idle = false;
    slot.session = next_session_++;
    slot.script = std::make_unique<SessionScript>(o_.workload, 0, slot.session);
    slot.active = 0;
    slot.subagents_done = 0;
    Conversation& c = slot.conversation();
    Restart(&c, slot.script->id(), slot.session, system_tokens_);
    AppendMessage(Role::kUser, slot.script->UserText(0), &c.tokens);
    AppendGenerationPrompt(&c.tokens);
    SendTurn(s, t);
  }

  static void Restart(Conversation* c, std::string key, uint64_t id,
                      const std::vector<TokenId>& system) {
    c->key = std::move(key);
    c->id = id;
    c->tokens = system;
    c->hashes.clear();
    c->turn = 0;
    c->previous_replica = -1;
  }

  // A subagent: the same session id with an agent id (its own affinity key), its own system
  // prompt (shared by all subagents), a task, then turns of tool results; the parent waits.
  void StartSubagent(int s, double t) {
    Slot& slot = slots_[s];
    const int n = ++slot.subagents_done;
    slot.active = 1;
    Conversation& c = slot.conversation();
    Restart(&c, fmt::format("{}:agent-{}", slot.script->id(), n),
            (uint64_t{1} << 40) + slot.session * 16 + static_cast<uint64_t>(n),
            subagent_system_tokens_);
    AppendMessage(Role::kUser, FillerText(SubagentSeed(slot, 0), o_.subagent_task_tokens),
                  &c.tokens);
    AppendGenerationPrompt(&c.tokens);
    SendTurn(s, t);
  }

  uint64_t SubagentSeed(const Slot& slot, int turn) const {
    return XXH3_64bits_withSeed(&slot.session, sizeof slot.session,
                                o_.workload.seed * 131 + slot.subagents_done * 17 + turn);
  }

  // The turn leaves the client. A gateway's policy routes it now; vLLM's own balancer picks when
  // it reaches the API server (kArrival with no replica yet).
  void SendTurn(int s, double t) {
    Slot& slot = slots_[s];
    Conversation& c = slot.conversation();
    ExtendBlockHashes(c.tokens, profile_.block_size, &c.hashes);
    slot.sent = t;
    slot.first_token = -1;
    slot.output = 0;
    if (!router_->policy().routes_on_arrival()) RouteTurn(s, t);
    std::uniform_real_distribution<double> jitter(1 - o_.latency_jitter, 1 + o_.latency_jitter);
    Push(t + latency_ * jitter(rng_), kArrival, -1, s);
  }

  void RouteTurn(int s, double t) {
    Slot& slot = slots_[s];
    const Conversation& c = slot.conversation();
    RouteRequest request;
    request.sticky = true;
    request.prefix_hashes = c.hashes;
    request.prompt_tokens = static_cast<int>(c.tokens.size());
    const RouteDecision d = router_->Route(c.key, request, t);
    slot.replica = d.replica;
    slot.kind = d.kind;
    slot.request_id = d.request_id;
  }

  // The request reaches the gateway: admitted to its replica now, or held there.
  void Offer(int engine, int s, double t) {
    Slot& slot = slots_[s];
    const Conversation& c = slot.conversation();
    AdmissionQueue::Request request;
    request.id = static_cast<uint64_t>(s);
    request.blocks = c.hashes;
    request.last_active = router_->LastActive(c.key, engine);
    // An overflowed turn keeps no room where it went (the next one goes home), and gives up what
    // its conversation kept at home.
    request.conversation = c.id + 1;
    request.reserves = slot.kind != RouteKind::kOverflow;
    released_.clear();
    const bool admitted = admission_->Offer(engine, std::move(request), t, &released_);
    LetIn(t);
    if (admitted) Arrive(engine, s, t);
  }

  // Sends on the requests admission just let in, and wakes it when a reservation expires.
  void LetIn(double t) {
    for (uint64_t id : released_) {
      const int s = static_cast<int>(id);
      Push(t, kReleased, slots_[s].replica, s);
    }
    const double expiry = admission_->next_expiry();
    if (expiry < std::numeric_limits<double>::infinity() && expiry != expiry_pushed_) {
      expiry_pushed_ = expiry;
      Push(expiry, kExpire, 0, 0);
    }
  }

  // The request of slot s ended: admission lets in the next ones.
  void Admitted(int engine, int s, int prompt_tokens, double t) {
    released_.clear();
    admission_->Done(static_cast<uint64_t>(s), prompt_tokens, slots_[s].output, &released_, t,
                     /*completed=*/true);
    LetIn(t);
  }

  void Arrive(int engine, int s, double t) {
    Slot& slot = slots_[s];
    slot.admitted = t;
    NewRequest r;
    const std::vector<TokenId>& prompt = slot.conversation().tokens;
    r.prompt = prompt;
    r.max_output_tokens = o_.workload.max_output_tokens;
    r.reply_tokens = o_.reply_tokens;
    r.output_seed = XXH3_64bits(prompt.data(), prompt.size() * sizeof(TokenId));
    owner_[engine][engines_[engine]->Add(std::move(r), t)] = s;
    Kick(engine, t);
  }

  void Kick(int engine, double t) {
    if (stepping_[engine] || !engines_[engine]->has_work()) return;
    const double d = engines_[engine]->BeginStep(t);
    // The bound is taken when the engine looks the request up, and counted in the stage its
    // counters count it in; from then on its prompt is the replica's (in the engine, its blocks
    // are as they are computed: a request admitted meanwhile may hit them).
    for (const RequestId id : engines_[engine]->first_admitted()) {
      Slot& slot = slots_[owner_[engine].at(id)];
      const Conversation& c = slot.conversation();
      slot.bound_query = static_cast<int>(c.tokens.size());
      slot.bound_hit = bound_.Query(engine, c.hashes, slot.bound_query, profile_.block_size);
      bound_.Record(engine, c.hashes);
      if (!window_) continue;
      window_->counts.bound_queries += slot.bound_query;
      window_->counts.bound_hits += slot.bound_hit;
    }
    if (d <= 0) return;
    stepping_[engine] = true;
    const double slowdown =
        engine < static_cast<int>(o_.replica_slowdown.size()) ? o_.replica_slowdown[engine] : 1.0;
    Push(t + d * slowdown, kStepEnd, engine, 0);
  }

  void StepEnd(int engine, double t) {
    stepping_[engine] = false;
    token_events_.clear();
    engines_[engine]->EndStep(t, &token_events_);
    for (const TokenEvent& e : token_events_) OnToken(engine, e, t);
    Kick(engine, t);
  }

  void OnToken(int engine, const TokenEvent& e, double t) {
    auto it = owner_[engine].find(e.id);
    const int s = it->second;
    Slot& slot = slots_[s];
    Conversation& c = slot.conversation();
    if (window_) ++window_->counts.tokens;
    if (e.output_index == 0) {
      slot.first_token = t;
      router_->FirstToken(slot.request_id, t);
      if (window_) window_->counts.ttfb_s.push_back(t - slot.sent);
    }
    if (e.token != kImEnd) c.tokens.push_back(e.token);
    ++slot.output;
    if (e.finish == FinishReason::kNone) return;
    owner_[engine].erase(it);
    const RequestOutcome outcome{e.prompt_tokens, e.cached_tokens, slot.first_token - slot.sent,
                                 slot.output};
    router_->Finish(slot.replica, outcome, t, c.key);
    router_->Ended(slot.request_id, t);
    if (window_ && requests_) Record(slot, c, e);
    if (window_) {
      ++window_->counts.turns;
      if (c.previous_replica >= 0) {
        ++window_->counts.follow_ups;
        if (c.previous_replica == slot.replica) ++window_->counts.stayed;
      }
    }
    Admitted(engine, s, e.prompt_tokens, t);
    c.previous_replica = slot.replica;
    EndMessage(&c.tokens);
    ExtendBlockHashes(c.tokens, profile_.block_size, &c.hashes);
    bound_.Record(slot.replica, c.hashes);
    ++c.turn;
    const bool session_done = slot.active == 0 && c.turn >= slot.script->turns();
    if (session_done && window_) ++window_->counts.sessions_completed;
    // A stage of fewer sessions than the one before stops those past its count once their turn
    // under way ends, as the bench does.
    if (s >= wanted_) {
      slot.idle = true;  // until a larger stage wants it again
      return;
    }
    if (slot.active == 1) return NextSubagentTurn(s, t);
    if (session_done) return StartSession(s, t);
    if (slot.subagents_done < o_.subagents && c.turn == slot.subagents_done + 1)
      return StartSubagent(s, t);
    NextMainTurn(s, t);
  }

  void Record(const Slot& slot, const Conversation& c, const TokenEvent& e) {
    LabRequest r;
    r.variant = variant_;
    r.sessions = window_->counts.sessions;
    r.session = slot.session;
    r.subagent = slot.active == 1;
    r.turn = c.turn;
    r.replica = slot.replica;
    r.route = RouteKindName(slot.kind);
    r.sent_s = slot.sent - window_->start;
    r.held_s = slot.admitted - slot.sent;
    r.ttft_s = slot.first_token - slot.sent;
    r.prompt_tokens = e.prompt_tokens;
    r.cached_tokens = e.cached_tokens;
    r.output_tokens = slot.output;
    requests_->push_back(std::move(r));
  }

  void NextMainTurn(int s, double t) {
    Slot& slot = slots_[s];
    slot.active = 0;
    Conversation& c = slot.conversation();
    AppendMessage(Role::kUser, slot.script->UserText(c.turn), &c.tokens);
    AppendGenerationPrompt(&c.tokens);
    SendTurn(s, t);
  }

  void NextSubagentTurn(int s, double t) {
    Slot& slot = slots_[s];
    Conversation& c = slot.conversation();
    if (c.turn >= o_.subagent_turns) return NextMainTurn(s, t);
    AppendMessage(Role::kUser, FillerText(SubagentSeed(slot, c.turn), o_.workload.turn_tokens),
                  &c.tokens);
    AppendGenerationPrompt(&c.tokens);
    SendTurn(s, t);
  }

  void Scrape(double t) {
    for (size_t i = 0; i < engines_.size(); ++i) {
      const Engine& e = *engines_[i];
      ScrapedMetrics m;
      m.running = e.num_running();
      m.waiting = e.num_waiting();
      m.kv_cache_usage = e.kv_cache_usage();
      m.prefix_cache_queries = static_cast<double>(e.counters().prefix_cache_queries);
      m.prefix_cache_hits = static_cast<double>(e.counters().prefix_cache_hits);
      m.block_size = profile_.block_size;
      m.num_gpu_blocks = profile_.num_gpu_blocks;
      router_->UpdateScrape(static_cast<int>(i), m);
    }
    Push(t + scrape_interval_, kScrape, 0, 0);
  }

  void Sample(double t) {
    int busy = 0;
    for (const auto& e : engines_) busy += e->num_running() > 0 ? 1 : 0;
    if (window_) window_->counts.busy.push_back(busy);
    Push(t + 1.0, kSample, 0, 0);
  }

  void RunUntil(double end) {
    while (!events_.empty() && events_.top().t < end) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.t;
      switch (e.kind) {
        case kStepEnd:
          StepEnd(e.a, e.t);
          break;
        case kArrival:
          if (router_->policy().routes_on_arrival()) RouteTurn(e.b, e.t);
          assert(slots_[e.b].replica >= 0);  // the lab's replicas are never out of service
          Offer(slots_[e.b].replica, e.b, e.t);
          break;
        case kReleased:
          Arrive(e.a, e.b, e.t);
          break;
        case kScrape:
          Scrape(e.t);
          break;
        case kSample:
          Sample(e.t);
          break;
        case kExpire:
          if (e.t == expiry_pushed_) expiry_pushed_ = -1;
          released_.clear();
          admission_->Expire(e.t, &released_);
          LetIn(e.t);
          break;
      }
    }
    now_ = end;
  }

  StageResult Result(const std::string& variant, Window& w) const {
    w.counts.prefix_queries = -w.queries_before;
    w.counts.prefix_hits = -w.hits_before;
    for (const auto& e : engines_) {
      w.counts.prefix_queries += e->counters().prefix_cache_queries;
      w.counts.prefix_hits += e->counters().prefix_cache_hits;
    }
    return Summarize(w.counts, variant, o_.stage_seconds);
  }

  const LabOptions& o_;
  std::vector<LabRequest>* requests_;
  std::string variant_;
  const EngineProfile& profile_;
  std::vector<std::unique_ptr<Engine>>& engines_;
  std::vector<std::unordered_map<RequestId, int>> owner_;
  std::vector<bool> stepping_;
  std::unique_ptr<ModelRouter> router_;
  std::unique_ptr<AdmissionQueue> admission_;
  std::vector<uint64_t> released_;
  double expiry_pushed_ = -1;  // the latest expiry event queued
  HitBound& bound_;
  std::mt19937_64 rng_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  std::vector<Slot> slots_;
  std::vector<TokenId> system_tokens_;
  std::vector<TokenId> subagent_system_tokens_;
  std::vector<TokenEvent> token_events_;
  Window* window_ = nullptr;
  int wanted_ = 0;
  uint64_t next_session_ = 0;
  double now_ = 0;
  double scrape_interval_ = 1;
  double latency_ = 0;
};

// "NAME" or "NAME+ADMISSION": a policy, and the admission it runs with.
struct PolicySpec {
  std::string policy;
  std::string admission;
};
PolicySpec SplitPolicySpec(const std::string& text, const std::string& default_admission) {
  const size_t plus = text.find('+');
  if (plus == std::string::npos) return {text, default_admission};
  return {text.substr(0, plus), text.substr(plus + 1)};
}

}  // namespace

namespace {

// The most tokens a conversation can reach (prompt and reply), jitter and template included: a
// session's, or a subagent's.
int64_t LongestConversation(const LabOptions& o) {
  constexpr int64_t kTemplatePerMessage = 16;  // role markers and the like, generously
  const WorkloadOptions& w = o.workload;
  const int64_t turn =
      int64_t{w.turn_tokens} + w.turn_jitter + w.max_output_tokens + 2 * kTemplatePerMessage;
  const int64_t session = int64_t{w.system_tokens} + w.first_message_tokens +
                          w.first_message_jitter + kTemplatePerMessage + int64_t{w.turns} * turn;
  const int64_t subagent = o.subagents == 0
                               ? 0
                               : int64_t{o.subagent_system_tokens} + o.subagent_task_tokens +
                                     kTemplatePerMessage + int64_t{o.subagent_turns} * turn;
  return std::max(session, subagent);
}

}  // namespace

std::string ValidateLabOptions(const LabOptions& o) {
  if (!FindProfile(o.profile)) return fmt::format("--profile: unknown profile '{}'", o.profile);
  if (o.replicas < 1 || o.replicas > 256)
    return fmt::format("--replicas: must be 1 to 256, got {}", o.replicas);
  if (o.stages.empty()) return "--stages: at least one stage";
  if (o.stages.size() > 1000)
    return fmt::format("--stages: at most 1000 stages, got {}", o.stages.size());
  for (int s : o.stages) {
    // Each session holds its prompt and block hashes: 10,000 take about 1.3 GB.
    if (s < 1 || s > 10000) return fmt::format("--stages: {} must be 1 to 10000 sessions", s);
  }
  // (Flags left out are 0, or -1 for the latency: the profile's.)
  if (o.kv_tokens < 0 || o.kv_tokens > 50'000'000)
    return fmt::format("--kv-tokens: must be 1 to 50000000 tokens (0: the profile's), got {}",
                       o.kv_tokens);
  if (o.max_num_seqs < 0 || o.max_num_seqs > 100'000)
    return fmt::format("--max-num-seqs: must be 1 to 100000 (0: the profile's), got {}",
                       o.max_num_seqs);
  if (!(o.stage_seconds >= 1 && o.stage_seconds <= 1e6))
    return fmt::format("--stage-seconds: must be 1 to 1e6, got {}", o.stage_seconds);
  if (o.policies.empty()) return "--policy: at least one policy";
  if (const auto twice = FirstRepeated(o.policies))
    return fmt::format("--policy: '{}' is named twice (its rows could not be told apart)", *twice);
  // The flag's own value first: an error in it is not one policy's.
  AdmissionOptions flag_admission;
  if (std::string e = ParseAdmission(o.admission, &flag_admission); !e.empty()) return "--" + e;
  for (const std::string& p : o.policies) {
    const PolicySpec spec = SplitPolicySpec(p, o.admission);
    if (!MakePolicy(spec.policy))
      return fmt::format("--policy: unknown policy '{}' (one of: {})", spec.policy,
                         PolicyNameList());
    AdmissionOptions admission;
    if (std::string e = ParseAdmission(spec.admission, &admission); !e.empty())
      return fmt::format("--policy {}: {}", p, e);
  }
  if (!(o.scrape_interval_s >= 0.001 && o.scrape_interval_s <= 3600))
    return "--scrape-interval: must be 0.001 to 3600 seconds";
  if (o.overflow_limit < 0) return "--overflow-limit: must be >= 1, or 0 for auto";
  if (!(o.latency_jitter >= 0 && o.latency_jitter < 1))
    return "--latency-jitter: must be in [0, 1)";
  if (!((o.api_latency_s >= 0 && o.api_latency_s <= 3600) || o.api_latency_s == -1))
    return "--api-latency: must be 0 to 3600 seconds";
  if (o.reply_tokens < 1) return "--reply-tokens: must be >= 1";
  if (o.workload.turns < 1) return fmt::format("--turns: must be >= 1, got {}", o.workload.turns);
  if (o.subagents < 0 || o.subagents >= o.workload.turns)
    return fmt::format("--subagents: must be 0 to turns - 1 ({}), got {}", o.workload.turns - 1,
                       o.subagents);
  if (o.subagent_turns < 1) return "--subagent-turns: must be >= 1";
  if (o.subagent_system_tokens < 1 || o.subagent_task_tokens < 1)
    return "--subagent-system-tokens, --subagent-task-tokens: must be >= 1";

  for (double f : o.replica_slowdown) {
    if (!(f > 0 && f <= 1000)) return "--slow-replica: the factor must be > 0 and at most 1000";
  }
  return ValidateWorkload(o.workload);
}

std::string LabRequestsCsv(const std::vector<LabRequest>& requests) {
  std::string out =
      "variant,sessions,session,subagent,turn,replica,route,sent_s,held_s,ttft_s,prompt_tokens,"
      "cached_tokens,output_tokens\n";
  for (const LabRequest& r : requests) {
    fmt::format_to(std::back_inserter(out), "{},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{},{},{}\n",
                   r.variant, r.sessions, r.session, r.subagent ? 1 : 0, r.turn, r.replica, r.route,
                   r.sent_s, r.held_s, r.ttft_s, r.prompt_tokens, r.cached_tokens, r.output_tokens);
  }
  return out;
}

bool RunLab(const LabOptions& o, std::vector<StageResult>* results, std::string* error,
            std::vector<LabRequest>* requests) {
  if (std::string e = ValidateLabOptions(o); !e.empty()) {
    *error = e;
    return false;
  }
  EngineProfile profile = *FindProfile(o.profile);
  if (o.kv_tokens > 0) profile.num_gpu_blocks = o.kv_tokens / profile.block_size + 1;
  if (o.max_num_seqs > 0) profile.max_num_seqs = o.max_num_seqs;
  profile.reserve_full_prompt = o.reserve_full_prompt;
  profile.count_every_lookup = o.count_every_lookup;
  if (profile.max_model_len > profile.kv_capacity_tokens())
    profile.max_model_len = profile.kv_capacity_tokens();
  if (LongestConversation(o) > profile.max_model_len) {
    *error = fmt::format(
        "the sessions grow past the profile's max_model_len ({} tokens, at most the KV cache): "
        "shorten them",
        profile.max_model_len);
    return false;
  }
  std::vector<std::unique_ptr<Engine>> engines;
  std::optional<HitBound> bound;
  for (const std::string& policy : o.policies) {
    if (engines.empty() || !o.warm) {
      engines.clear();
      for (int i = 0; i < o.replicas; ++i) engines.push_back(std::make_unique<Engine>(profile));
      bound.emplace(o.replicas);
    }
    const PolicySpec spec = SplitPolicySpec(policy, o.admission);
    LabRun run(o, profile, &engines, &*bound, spec.policy, spec.admission, requests);
    for (StageResult& r : run.Run(policy)) {
      if (o.progress) {
        fmt::print(stderr,
                   "  {} {} sessions: {:.0f} tokens/min, ttfb p50 {:.2f} s p95 {:.2f} s, hits "
                   "{:.1f} % (bound {:.1f} %), stayed {}\n",
                   r.variant, r.sessions, r.output_tokens_per_min, r.ttfb_p50_s, r.ttfb_p95_s,
                   r.prefix_hit_pct, r.upper_bound_hit_pct,
                   std::isnan(r.stayed_on_replica_pct)
                       ? std::string("–")
                       : fmt::format("{:.1f} %", r.stayed_on_replica_pct));
      }
      results->push_back(std::move(r));
    }
  }
  return true;
}

}  // namespace warden
