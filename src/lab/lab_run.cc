#include "lab/lab_run.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cassert>
#include <cmath>
#include <limits>

#include "core/chat_template.h"
#include "core/routing/dynamo_policy.h"
#include "core/routing/policy_factory.h"
#include "core/routing/warden_policy.h"
#include "core/tokenizer.h"

namespace warden {

namespace {

// Leading blocks of `hashes` in `seen`, capped so that the prompt's last token is computed (as the
// engine's lookup is).
int LeadingBlocksSeen(const std::unordered_set<BlockHash>& seen, std::span<const BlockHash> hashes,
                      int cap) {
  int hit = 0;
  while (hit < cap && hit < static_cast<int>(hashes.size()) && seen.contains(hashes[hit])) ++hit;
  return hit;
}

}  // namespace

HitBound::Hits HitBound::Query(int replica, std::span<const BlockHash> hashes, int prompt_tokens,
                               int block_size) {
  const int cap = (prompt_tokens - 1) / block_size;
  const Hits hits{LeadingBlocksSeen(seen_[replica], hashes, cap) * block_size,
                  LeadingBlocksSeen(seen_anywhere_, hashes, cap) * block_size};
  Record(replica, hashes);
  return hits;
}

EngineProfile LabProfile(const LabOptions& o) {
  EngineProfile profile = *FindProfile(o.profile);
  if (o.kv_tokens > 0) profile.num_gpu_blocks = o.kv_tokens / profile.block_size + 1;
  if (o.max_num_seqs > 0) profile.max_num_seqs = o.max_num_seqs;
  profile.reserve_full_prompt = o.reserve_full_prompt;
  profile.count_every_lookup = o.count_every_lookup;
  profile.kv_offloading_gib = o.kv_offloading_gib;
  if (profile.max_model_len > profile.kv_capacity_tokens())
    profile.max_model_len = profile.kv_capacity_tokens();
  return profile;
}

PolicySpec SplitPolicySpec(const std::string& text, const std::string& default_admission) {
  const size_t plus = text.find('+');
  if (plus != std::string::npos) return {text.substr(0, plus), text.substr(plus + 1), text};
  const bool admits = !default_admission.empty() && default_admission != "off";
  return {text, default_admission, admits ? text + "+" + default_admission : text};
}

std::unique_ptr<RoutingPolicy> MakeLabPolicy(const std::string& name) {
  if (name == "warden:exact") {
    return std::make_unique<WardenPolicy>(WardenPolicyOptions{.exact_cache = true},
                                          std::string(name));
  }
  if (name == "dynamo:events")
    return std::make_unique<DynamoPolicy>(DynamoPolicy::Options{.kv_events = true});
  return MakePolicy(name);
}

std::string LabPolicyNameList() {
  return PolicyNameList() +
         "; in the lab also warden:exact and dynamo:events (told what each engine caches)";
}

LabRun::LabRun(const LabOptions& o, const EngineProfile& profile,
               std::vector<std::unique_ptr<Engine>>* engines, HitBound* bound,
               const std::string& policy, const std::string& admission,
               std::vector<LabRequest>* requests)
    : o_(o),
      profile_(profile),
      engines_(*engines),
      bound_(*bound),
      requests_(requests),
      owner_(engines->size()),
      stepping_(engines->size(), false),
      rng_(o.workload.seed * 7919 + 1) {
  ModelRouterOptions ro;
  ro.settings.overflow_limit =
      o.overflow_limit > 0 ? o.overflow_limit : std::max(1, profile.max_num_seqs / 4);
  ro.overflow_limit_auto = o.overflow_limit == 0;
  router_ =
      std::make_unique<ModelRouter>(static_cast<int>(engines->size()), MakeLabPolicy(policy), ro);
  router_->SetCacheView(this);
  scrape_interval_ = router_->policy().refresh_interval_s() > 0
                         ? router_->policy().refresh_interval_s()
                         : o.scrape_interval_s;
  latency_ = o.api_latency_s >= 0 ? o.api_latency_s : profile.api_latency_s;
  AdmissionOptions admission_options;
  ParseAdmission(admission, &admission_options);
  admission_ =
      std::make_unique<AdmissionQueue>(static_cast<int>(engines->size()), profile.block_size,
                                       o.workload.max_output_tokens, admission_options);
  if (o.admission_max_hold_s > 0) admission_->SetMaxHold(o.admission_max_hold_s);
  for (int i = 0; i < static_cast<int>(engines->size()); ++i)
    admission_->SetCapacity(i, profile.kv_capacity_tokens());
}

int LabRun::CachedBlocks(int replica, std::span<const uint64_t> hashes) const {
  thread_local std::vector<BlockId> blocks;
  blocks.clear();
  return engines_[replica]->block_pool().MatchPrefix(hashes, static_cast<int>(hashes.size()),
                                                     &blocks);
}

void LabRun::Begin(double t) {
  Push(t, kScrape, 0, 0);
  // The first sample a second in, as the bench takes it: at the start nothing runs yet.
  Push(t + 1.0, kSample, 0, 0);
}

void LabRun::StartCounting(Window* w) const {
  if (!w) return;
  w->queries_before = w->hits_before = 0;
  for (const auto& e : engines_) {
    w->queries_before += e->counters().prefix_cache_queries;
    w->hits_before += e->counters().prefix_cache_hits;
  }
}

void LabRun::Measure(Window* w) {
  window_ = w;
  StartCounting(w);
}

void LabRun::MeasureSlice(Window* w) {
  slice_ = w;
  StartCounting(w);
}

void LabRun::DropUnfinished() {
  for (size_t i = 0; i < engines_.size(); ++i) {
    for (const auto& [id, slot] : owner_[i]) engines_[i]->Abort(id);
    if (stepping_[i]) {
      std::vector<TokenEvent> ignored;
      engines_[i]->EndStep(now_, &ignored);
    }
  }
}

// The turn leaves the client. A gateway's policy routes it now; vLLM's own balancer picks when
// it reaches the API server (kArrival with no replica yet).
void LabRun::SendTurn(int s, double t) {
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

void LabRun::RouteTurn(int s, double t) {
  Slot& slot = slots_[s];
  const Conversation& c = slot.conversation();
  RouteRequest request;
  request.sticky = !c.key.empty();
  request.prefix_hashes = c.hashes;
  request.prompt_tokens = static_cast<int>(c.tokens.size());
  const RouteDecision d = router_->Route(c.key, request, t);
  slot.replica = d.replica;
  slot.kind = d.kind;
  slot.request_id = d.request_id;
}

// The request reaches the gateway: admitted to its replica now, or held there.
void LabRun::Offer(int engine, int s, double t) {
  Slot& slot = slots_[s];
  const Conversation& c = slot.conversation();
  AdmissionQueue::Request request;
  request.id = static_cast<uint64_t>(s);
  request.blocks = c.hashes;
  request.last_active = router_->LastActive(c.key, engine);
  // An overflowed turn keeps no room where it went (the next one goes home), and gives up what
  // its conversation kept at home.
  request.conversation = c.key.empty() ? 0 : c.id + 1;  // (none: it reserves nothing)
  request.reserves = slot.kind != RouteKind::kOverflow;
  released_.clear();
  const bool admitted = admission_->Offer(engine, std::move(request), t, &released_);
  LetIn(t);
  if (admitted) Arrive(engine, s, t);
}

// Sends on the requests admission just let in, and wakes it when a reservation expires.
void LabRun::LetIn(double t) {
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
void LabRun::Admitted(int engine, int s, int prompt_tokens, double t) {
  released_.clear();
  admission_->Done(static_cast<uint64_t>(s), prompt_tokens, slots_[s].output, &released_, t,
                   /*completed=*/true);
  LetIn(t);
}

void LabRun::Arrive(int engine, int s, double t) {
  Slot& slot = slots_[s];
  slot.admitted = t;
  NewRequest r;
  const std::vector<TokenId>& prompt = slot.conversation().tokens;
  r.prompt = prompt;
  r.max_output_tokens = slot.max_output > 0 ? slot.max_output : o_.workload.max_output_tokens;
  r.reply_tokens = slot.reply_tokens > 0 ? slot.reply_tokens : o_.reply_tokens;
  r.output_seed = XXH3_64bits(prompt.data(), prompt.size() * sizeof(TokenId));
  owner_[engine][engines_[engine]->Add(std::move(r), t)] = s;
  Kick(engine, t);
}

void LabRun::Kick(int engine, double t) {
  if (stepping_[engine] || !engines_[engine]->has_work()) return;
  const double d = engines_[engine]->BeginStep(t);
  // The bound is taken when the engine looks the request up, and counted in the stage its
  // counters count it in; from then on its prompt is the replica's (in the engine, its blocks
  // are as they are computed: a request admitted meanwhile may hit them).
  for (const RequestId id : engines_[engine]->first_admitted()) {
    const Conversation& c = slots_[owner_[engine].at(id)].conversation();
    const int prompt = static_cast<int>(c.tokens.size());
    const HitBound::Hits hits = bound_.Query(engine, c.hashes, prompt, profile_.block_size);
    EachWindow([&](StageCounts& counts) {
      counts.bound_queries += prompt;
      counts.bound_hits += hits.on_replica;
      counts.any_bound_hits += hits.any_placement;
    });
  }
  if (d <= 0) return;
  stepping_[engine] = true;
  const double slowdown =
      engine < static_cast<int>(o_.replica_slowdown.size()) ? o_.replica_slowdown[engine] : 1.0;
  Push(t + d * slowdown, kStepEnd, engine, 0);
}

void LabRun::StepEnd(int engine, double t) {
  stepping_[engine] = false;
  token_events_.clear();
  engines_[engine]->EndStep(t, &token_events_);
  for (const TokenEvent& e : token_events_) OnToken(engine, e, t);
  Kick(engine, t);
}

void LabRun::OnToken(int engine, const TokenEvent& e, double t) {
  auto it = owner_[engine].find(e.id);
  const int s = it->second;
  Slot& slot = slots_[s];
  Conversation& c = slot.conversation();
  EachWindow([](StageCounts& counts) { ++counts.tokens; });
  if (e.output_index == 0) {
    slot.first_token = t;
    router_->FirstToken(slot.request_id, t);
    EachWindow([&](StageCounts& counts) { counts.ttfb_s.push_back(t - slot.sent); });
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
  EachWindow([&](StageCounts& counts) {
    ++counts.turns;
    if (c.previous_replica >= 0) {
      ++counts.follow_ups;
      if (c.previous_replica == slot.replica) ++counts.stayed;
    }
  });
  Admitted(engine, s, e.prompt_tokens, t);
  TurnEnded(s, t);
}

void LabRun::Record(const Slot& slot, const Conversation& c, const TokenEvent& e) {
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
  r.ended_s = now_ - window_->start;
  r.prompt_tokens = e.prompt_tokens;
  r.cached_tokens = e.cached_tokens;
  r.output_tokens = slot.output;
  requests_->push_back(std::move(r));
}

void LabRun::Scrape(double t) {
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

void LabRun::Sample(double t) {
  int busy = 0;
  for (const auto& e : engines_) busy += e->num_running() > 0 ? 1 : 0;
  EachWindow([&](StageCounts& counts) { counts.busy.push_back(busy); });
  Push(t + 1.0, kSample, 0, 0);
}

void LabRun::RunUntil(double end) {
  while (!events_.empty() && events_.top().t < end) {
    if (Done()) return;
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
      case kDue:
        Due(e.a, e.b, e.t);
        break;
    }
  }
  now_ = end;
}

StageResult LabRun::Result(const std::string& variant, Window& w, double seconds) const {
  w.counts.prefix_queries = -w.queries_before;
  w.counts.prefix_hits = -w.hits_before;
  for (const auto& e : engines_) {
    w.counts.prefix_queries += e->counters().prefix_cache_queries;
    w.counts.prefix_hits += e->counters().prefix_cache_hits;
  }
  return Summarize(w.counts, variant, seconds);
}

}  // namespace warden
