#include "core/routing/model_router.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <limits>
#include <unordered_set>
#include <utility>

#include "core/routing/session_key.h"

namespace warden {

namespace {

// The counter of requests routed with `kind`.
int64_t& KindCount(RouteKind kind, ReplicaCounters* c) {
  switch (kind) {
    case RouteKind::kNew:
      return c->new_conversations;
    case RouteKind::kSticky:
      return c->sticky;
    case RouteKind::kOverflow:
      return c->overflow;
    case RouteKind::kRehome:
      return c->rehomed;
    case RouteKind::kBalanced:
      break;
  }
  return c->balanced;
}

void CountOutcome(const RequestOutcome& outcome, ReplicaCounters* counters) {
  ReplicaCounters& c = *counters;
  if (outcome.prompt_tokens < 0) {
    if (outcome.usage_expected) ++c.usage_unknown;
    if (outcome.cut_without_usage) ++c.cut_without_usage;
  } else {
    ++(outcome.cached_tokens < 0 ? c.cache_unreported : c.cache_reported);
    if (outcome.cached_tokens >= 0)
      (outcome.anthropic_usage ? c.anthropic_reports_cache : c.openai_reports_cache) = true;
    const int cached = std::clamp(outcome.cached_tokens, 0, outcome.prompt_tokens);
    c.cached_prompt_tokens += cached;
    c.computed_prompt_tokens += outcome.prompt_tokens - cached;
  }
  if (outcome.ttft_s >= 0) c.ttft.Observe(outcome.ttft_s);
  if (outcome.duration_s >= 0) c.duration.Observe(outcome.duration_s);
  if (outcome.usage_expected && outcome.output_tokens > 0) c.output_tokens += outcome.output_tokens;
  if (outcome.broke_off) ++c.failed;
  if (outcome.error_answer) ++c.error_answers;
  if (outcome.client_error_answer) ++c.client_error_answers;
}

// A turn back on the replica where its conversation's previous turn ended, its prompt grown from
// that one's: how much of that prompt it read from the cache (ReplicaCounters::history_tokens).
// `block_tokens`: the replica's KV block (only full ones are cached).
void CountReturningTurn(const SessionTable::Entry& before, int replica, int64_t block_tokens,
                        const RequestOutcome& outcome, ReplicaCounters* c,
                        ModelRouter::HistoryWindow* window) {
  // vLLM leaves the cached count out when it is 0: once a replica has given one in this API's
  // usage, a missing one is 0 (before, it may not report them at all).
  const bool reports_cache =
      outcome.anthropic_usage ? c->anthropic_reports_cache : c->openai_reports_cache;
  if (before.last_end_replica != replica || before.last_prompt_tokens < block_tokens ||
      (outcome.cached_tokens < 0 && !reports_cache) ||
      outcome.prompt_tokens <= before.last_prompt_tokens)
    return;
  const int64_t history = before.last_prompt_tokens / block_tokens * block_tokens;
  const int64_t cached = std::clamp<int64_t>(outcome.cached_tokens, 0, history);
  ++c->returning_turns;
  c->history_tokens += history;
  c->history_cached_tokens += cached;
  ++window->turns;
  window->tokens += history;
  window->cached_tokens += cached;
}

}  // namespace

std::string_view RouteKindName(RouteKind kind) {
  switch (kind) {
    case RouteKind::kNew:
      return "new";
    case RouteKind::kSticky:
      return "sticky";
    case RouteKind::kOverflow:
      return "overflow";
    case RouteKind::kRehome:
      return "rehome";
    case RouteKind::kBalanced:
      return "balanced";
  }
  return "balanced";
}

ModelRouter::ModelRouter(int num_replicas, std::unique_ptr<RoutingPolicy> policy,
                         ModelRouterOptions options)
    : policy_(std::move(policy)),
      options_(options),
      sessions_(options.max_sessions, options.session_idle_timeout_s, num_replicas),
      loads_(num_replicas),
      healthy_(num_replicas, true),
      draining_(num_replicas, false),
      refused_at_(num_replicas, -std::numeric_limits<double>::infinity()),
      error_streaks_(num_replicas),
      failing_at_(num_replicas, -std::numeric_limits<double>::infinity()),
      woken_at_(num_replicas, -std::numeric_limits<double>::infinity()),
      server_of_(num_replicas),
      counters_(num_replicas),
      history_windows_(num_replicas),
      scraped_(num_replicas),
      admission_(num_replicas, kAdmissionBlockTokens, kAdmissionReplyTokens, options.admission),
      scrape_baseline_(num_replicas),
      has_baseline_(num_replicas, false),
      before_restarts_(num_replicas),
      history_(num_replicas + 1) {
  assert(num_replicas >= 1 && policy_);
  for (int r = 0; r < num_replicas; ++r) server_of_[r] = r;
}

void ModelRouter::SetServers(std::span<const int> server_of) {
  assert(static_cast<int>(server_of.size()) == num_replicas());
  server_of_.assign(server_of.begin(), server_of.end());
}

void ModelRouter::RefreshActive(double now) {
  sessions_.ExpireIdle(now);
  for (int i = 0; i < num_replicas(); ++i) loads_[i].active_conversations = sessions_.active_on(i);
}

// Claude Code sends its side requests (a conversation's title, a topic check, a quota probe) under
// the session's id, on its small model and without the conversation's history, and mostly without
// the request-class header that would say so. Taken as a turn, one would replace the
// conversation's context with its own few hundred tokens. A request that asks for another model
// than the conversation's latest turn, with less than half its body and under 32 KiB, is taken for
// one: a conversation switched to another model resends its whole history (a body as large or
// larger), and Claude Code's own system prompt and tools alone take about 80 KB (so a turn after
// a compaction done on another model is not taken for one either). It still goes where the
// conversation's turns go, so that a turn misjudged reads its cache all the same.
// Newer Claude Code sends them on the conversation's model, but without the tools its turns all
// offer: under Claude Code's keys, a request without tools is taken for one too when the latest
// turn was larger than any side request. (Not under other clients' keys: a new chat under an
// OpenAI `user` would have every turn of it taken for one until it grew past half the old turn.)
bool ModelRouter::IsSideRequest(const SessionTable::Entry& entry, const RouteRequest& request) {
  const bool other_model = request.asked_model != 0 && entry.thread_model != 0 &&
                           entry.thread_model != request.asked_model;
  if (request.needs_home || request.stored_on >= 0 || request.body_bytes >= kMostSideRequestBytes ||
      uint64_t{request.body_bytes} * 2 >= entry.thread_body_bytes)
    return false;
  // (The body is looked through last, and only here: most requests are turns.)
  return other_model ||
         (request.claude_code_key && entry.thread_body_bytes >= kMostSideRequestBytes &&
          !request.body.empty() && !OffersTools(request.body));
}

RouteDecision ModelRouter::Route(std::string_view key, RouteRequest request, double now) {
  RefreshActive(now);
  if (!request.sticky) key = {};  // auxiliary requests are not turns of the conversation
  const bool as_new = request.opens_conversation || request.place_as_new;
  SessionTable::Entry* entry = key.empty() || as_new ? nullptr : sessions_.Find(key);
  const bool side_request = entry && IsSideRequest(*entry, request);
  request.session = entry;
  if (!key.empty() && request.key_hash == 0) request.key_hash = XXH3_64bits(key.data(), key.size());
  const RoutingView view{loads_, options_.settings, now, scrape_epoch_, chunk_tokens_, cache_};
  if (request.request_id == 0 && policy_->tracks_requests())
    request.request_id = ++last_request_id_;
  RouteDecision d;
  // No other replica has the response a request is about: it goes where that is while healthy.
  int only = -1;
  if (request.stored_on >= 0 && request.stored_on < num_replicas()) {
    only = request.stored_on;
  } else if (request.needs_home && entry && entry->home >= 0) {
    only = entry->home;
  }
  const auto avoided = [&](int replica) {
    return std::find(request.avoid.begin(), request.avoid.end(), replica) != request.avoid.end();
  };
  if (only >= 0 && avoided(only)) {  // none: no other replica has what it is about
    d.request_id = request.request_id;
    return d;
  }
  const int home = entry && options_.settings.affinity ? entry->home : -1;
  const std::vector<int> cooling = only < 0 ? PassedOver(request, home, now) : std::vector<int>();
  if (only >= 0 && healthy_[only]) {
    d.replica = only;
    d.kind = RouteKind::kSticky;
    policy_->OnPlacedByRouter(request, only, view);
    if (request.follows_stored && entry && entry->home != only && !draining_[only])
      d.new_home = only;
  } else if (request.avoid.empty() && cooling.empty()) {
    d = policy_->Route(request, view);
  } else {
    d = RouteAvoiding(request, view, cooling);
  }
  if (d.replica < 0 && only < 0) d = RouteToDraining(request, view);
  d.side_request = side_request;
  d.request_id = request.request_id;
  if (d.replica < 0) return d;
  // Placed as a turn of its conversation (home: a misjudged turn loses no cache), counted as none.
  if (side_request) key = {};

  // A conversation opening under the key of one handed over to its later turns leaves that entry
  // alone (a conversation may still be known by it); it gets a key of its own when its reply
  // names it (ContinueAs).
  // So does one opening under a key whose own opening request still runs (unless this is that
  // request, tried again on another replica).
  const SessionTable::Entry* known = key.empty() || !as_new ? nullptr : sessions_.Find(key);
  if (known && (known->handed_over || (known->opening_in_flight && !request.place_as_new))) {
    key = {};
    d.key_left_alone = true;
  }
  if (!key.empty()) {
    bool created = false;
    // A conversation routed by load alone (affinity off, auxiliary) has no home to count it on.
    const int home_if_new = d.new_home >= 0                                   ? d.new_home
                            : d.kind == RouteKind::kBalanced || d.to_draining ? -1
                                                                              : d.replica;
    entry = sessions_.Touch(key, home_if_new, now, &created);
    if (!created && d.new_home >= 0 && entry->home != d.new_home)
      sessions_.SetHome(entry, d.new_home, now);
    if (!created && entry->handed_over && !as_new) LeaveUnusedLaterKey(key, *entry);
    if (!created && !as_new) LeaveFirstTurnKey(key);
    sessions_.SetOpenedOnly(entry, request.opens_conversation);
    if (request.opens_conversation) entry->opening_in_flight = true;
    entry->turn_in_flight = true;
    if (!as_new) d.previous_replica = entry->last_replica;
    if (request.asked_model != 0) {
      entry->thread_model = request.asked_model;
      entry->thread_body_bytes = request.body_bytes;
    }
  }

  if (TakenAsleep(d.replica, now)) NoteWaking(d.replica, now);
  ++loads_[d.replica].in_flight;
  if (!request.count_when_taken) Taken(d.replica, d.kind);
  RefreshActive(now);
  return d;
}

void ModelRouter::Taken(int replica, RouteKind kind) {
  ReplicaCounters& c = counters_[replica];
  ++c.requests;
  ++KindCount(kind, &c);
}

std::vector<int> ModelRouter::PassedOver(const RouteRequest& request, int home, double now) const {
  const auto listed = [&](int r) {
    return std::find(request.avoid.begin(), request.avoid.end(), r) != request.avoid.end();
  };
  const bool wake_if_needed = request.sleeping == SleepingReplicas::kWakeOnlyWhenNeeded;
  // `crowded`: awake replicas without room but the home (which the policy must see to keep to it
  // or overflow from it).
  std::vector<int> passed, sleeping, crowded;
  int in_service = 0;
  bool awake_with_room = false;
  for (int r = 0; r < num_replicas(); ++r) {
    if (listed(r) || !loads_[r].healthy) continue;
    ++in_service;
    if ((r != home && now - refused_at_[r] < kRefusalCooldownS) || failing(r, now)) {
      passed.push_back(r);
    } else if (wake_if_needed ? TakenAsleep(r, now)
                              : request.sleeping == SleepingReplicas::kPassOver && r != home &&
                                    scraped_[r].asleep.value_or(false)) {  // waking too
      sleeping.push_back(r);
    } else if (wake_if_needed) {
      if (HasRoomFor(r, request)) {
        awake_with_room = true;
      } else if (r != home) {
        crowded.push_back(r);
      }
    }
  }
  if (!sleeping.empty() && (!wake_if_needed || awake_with_room)) {
    passed.insert(passed.end(), sleeping.begin(), sleeping.end());
    passed.insert(passed.end(), crowded.begin(), crowded.end());
  }
  if (static_cast<int>(passed.size()) == in_service) passed.clear();
  return passed;
}

bool ModelRouter::TakenAsleep(int replica, double now) const {
  if (!scraped_[replica].asleep.value_or(false) || now - woken_at_[replica] < kWakeGraceS)
    return false;
  // Requests in flight on its server, this gateway's or a peer's, are waking it.
  for (int r = 0; r < num_replicas(); ++r) {
    if (server_of_[r] == server_of_[replica] && loads_[r].in_flight + loads_[r].peer_in_flight > 0)
      return false;
  }
  return true;
}

void ModelRouter::NoteWaking(int replica, double now) {
  for (int r = 0; r < num_replicas(); ++r) {
    if (server_of_[r] == server_of_[replica]) woken_at_[r] = now;
  }
}

bool ModelRouter::HasRoomFor(int replica, const RouteRequest& request) const {
  const ReplicaLoad& load = loads_[replica];
  if (load.in_flight + load.peer_in_flight >= options_.settings.overflow_limit) return false;
  const int64_t cache = scraped_[replica].kv_cache_tokens();
  if (cache == 0) return true;
  // At its home, a conversation's context is counted already: only its growth is new.
  const SessionTable::Entry* session = request.session;
  const int64_t counted =
      session && session->home == replica && session->active && !session->opened_only
          ? session->context_tokens
          : 0;
  return sessions_.active_context_on(replica) +
             std::max<int64_t>(0, request.prompt_tokens - counted) <=
         cache;
}

bool ModelRouter::AnyInService(std::span<const int> besides) const {
  for (int r = 0; r < num_replicas(); ++r) {
    if (loads_[r].healthy && std::find(besides.begin(), besides.end(), r) == besides.end())
      return true;
  }
  return false;
}

RouteDecision ModelRouter::RouteToDraining(const RouteRequest& request, const RoutingView& view) {
  std::vector<int> taken_back, passed_over;
  bool service_lost = false;  // a replica not drained is down, or failed this request
  for (int r = 0; r < num_replicas(); ++r) {
    if (std::find(request.avoid.begin(), request.avoid.end(), r) != request.avoid.end()) {
      const bool dropped = std::find(request.dropped_by.begin(), request.dropped_by.end(), r) !=
                           request.dropped_by.end();
      service_lost |= dropped && !draining_[r];
      // (No adapter there, say: not lost.)
      if (loads_[r].healthy) passed_over.push_back(r);
      continue;
    }
    if (loads_[r].healthy) return {};  // one in service was passed over for a reason of its own
    service_lost |= !draining_[r];
    if (healthy_[r] && draining_[r]) taken_back.push_back(r);
  }
  if (!service_lost || taken_back.empty()) return {};  // all drained on purpose: no traffic
  for (int r : taken_back) loads_[r].healthy = true;
  for (int r : passed_over) loads_[r].healthy = false;
  RouteDecision d = policy_->Route(request, view);
  for (int r : taken_back) loads_[r].healthy = false;
  for (int r : passed_over) loads_[r].healthy = true;
  if (d.replica < 0) return d;
  // A conversation is not homed where it will not stay: a known one keeps its home (an overflow),
  // a new one is placed by load and homed at its next turn.
  const bool homed = request.session && request.session->home >= 0;
  if (d.kind != RouteKind::kBalanced) d.kind = homed ? RouteKind::kOverflow : RouteKind::kBalanced;
  d.new_home = -1;
  d.to_draining = true;
  ++routed_to_draining_;
  return d;
}

RouteDecision ModelRouter::RouteAvoiding(const RouteRequest& request, const RoutingView& view,
                                         std::span<const int> cooling) {
  std::vector<int> passed_over;
  for (std::span<const int> list : {request.avoid, cooling}) {
    for (int r : list) {
      if (r >= 0 && r < num_replicas() && loads_[r].healthy) {
        loads_[r].healthy = false;
        passed_over.push_back(r);
      }
    }
  }
  RouteDecision d = policy_->Route(request, view);
  for (int r : passed_over) loads_[r].healthy = true;
  // A known conversation served away from the home it avoids, or from a home failing (whatever
  // the policy calls it, unless placed by load alone): the home stays, as after an overflow.
  const int home = request.session ? request.session->home : -1;
  const bool home_passed =
      home >= 0 &&
      (std::find(request.avoid.begin(), request.avoid.end(), home) != request.avoid.end() ||
       (failing(home, view.now) && healthy_[home] && !draining_[home]));
  if (home_passed && d.replica >= 0 && d.replica != home && d.kind != RouteKind::kBalanced) {
    d.kind = RouteKind::kOverflow;
    d.new_home = -1;
  }
  return d;
}

ModelRouter::HistoryWindow ModelRouter::TakeHistoryWindow(int replica, int64_t min_turns) {
  if (history_windows_[replica].turns < min_turns) return {};
  return std::exchange(history_windows_[replica], HistoryWindow{});
}

void ModelRouter::CountServedTurn(const RouteDecision& d, std::string_view key) {
  if (key.empty() || d.replica < 0) return;
  SessionTable::Entry* entry = sessions_.Find(key);
  if (!entry) return;
  if (d.previous_replica >= 0) {
    ++follow_up_turns_;
    if (d.previous_replica == d.replica) ++stayed_turns_;
  }
  entry->last_replica = d.replica;
}

void ModelRouter::FirstToken(uint64_t request_id, double now) {
  if (request_id != 0) policy_->OnFirstToken(request_id, now);
}

void ModelRouter::Ended(uint64_t request_id, double now) {
  if (request_id != 0) policy_->OnRequestDone(request_id, now);
}

void ModelRouter::Unsent(int replica, double now) {
  Finish(replica, {}, now);
}

void ModelRouter::NotTaken(int replica, double now) {
  RequestOutcome refused;
  refused.error_answer = true;
  Finish(replica, refused, now);
  refused_at_[replica] = now;
}

void ModelRouter::CountErrorStreak(int replica, const RequestOutcome& outcome, std::string_view key,
                                   double now) {
  ErrorStreak& streak = error_streaks_[replica];
  if (outcome.usage_expected) {  // a whole successful generation answer
    streak = {};
    return;
  }
  if (!outcome.error_answer) return;
  const uint64_t hash = key.empty() ? 0 : XXH3_64bits(key.data(), key.size());
  if (streak.errors == 0 || hash == 0 || hash != streak.last_key) ++streak.sources;
  streak.last_key = hash;
  if (++streak.errors >= kErrorStreak && streak.sources >= 2) failing_at_[replica] = now;
}

void ModelRouter::Finish(int replica, const RequestOutcome& outcome, double now,
                         std::string_view key, bool ends_opening) {
  ReplicaLoad& load = loads_[replica];
  if (load.in_flight > 0) --load.in_flight;
  CountOutcome(outcome, &counters_[replica]);
  CountErrorStreak(replica, outcome, key, now);
  if (outcome.prompt_tokens >= 0) {
    const int cached = std::clamp(outcome.cached_tokens, 0, outcome.prompt_tokens);
    history_.Add(replica, cached, outcome.prompt_tokens - cached, now);
  }
  // A sighting: a long turn does not leave its conversation idle, and the peers get its new
  // context with the next sync instead of the next turn.
  if (SessionTable::Entry* entry = key.empty() ? nullptr : sessions_.TouchKnown(key, now)) {
    if (ends_opening) entry->opening_in_flight = false;
    entry->turn_in_flight = false;
    constexpr int kVllmBlockTokens = 16;  // vLLM's default, until a scrape says
    const int block_tokens =
        scraped_[replica].block_size > 0 ? scraped_[replica].block_size : kVllmBlockTokens;
    CountReturningTurn(*entry, replica, block_tokens, outcome, &counters_[replica],
                       &history_windows_[replica]);
    if (outcome.prompt_tokens >= 0) entry->last_prompt_tokens = outcome.prompt_tokens;
    if (outcome.prompt_tokens >= 0) {
      sessions_.SetContext(entry, outcome.ContextAfter());
    } else if (outcome.prompt_tokens_guess > 0) {
      sessions_.SetContext(entry, outcome.prompt_tokens_guess);
    }
    entry->last_end_replica = replica;
    entry->last_end = now;
    RefreshActive(now);
  }
}

void ModelRouter::ContinueAs(std::string_view first_turn_key, std::string_view key, int replica,
                             int64_t context_tokens, double now, uint64_t reply_hash,
                             bool opened_key) {
  int64_t first_prompt_tokens = 0;  // for the second turn's history (CountReturningTurn)
  // Another conversation that opened alike and got the same reply goes on under this key already:
  // the two are one key's, and which of them a turn under the opening's key is cannot be told
  // (found by review: each left the other's key out of the counts, turn after turn).
  const SessionTable::Entry* known = sessions_.Find(key);
  const bool shared = known && !known->opened_only && !known->uncounted;
  if (SessionTable::Entry* first = sessions_.Find(first_turn_key)) {
    first_prompt_tokens = first->last_prompt_tokens;
    // Its own opening's entry: the request opened the key (wherever it was placed or tried
    // again), or the key was handed over to none yet (its client's first try failed, and the one
    // it sent again found the key retired). Not one that opened alike meanwhile and left the key
    // alone (found by review: with the opening's home as the sign, a second conversation placed
    // by load took the key of the first while that one's first turn still ran).
    const bool its_own = opened_key || (first->uncounted && first->handed_to_reply == 0);
    // Homed where the conversation goes on (placed by load, or its first try failed elsewhere): a
    // turn under the opening's key goes there, the state file keeps it, and its peers' news of
    // the later key (homed there too) hands it over. (A peer that learned the opening's entry
    // before does not learn the move: a retired entry is not sent.)
    if (its_own && first->home != replica) sessions_.SetHome(first, replica, now);
    if (its_own && !shared)
      HandOver(first_turn_key, first, reply_hash, /*another=*/true);
    else
      first->handed_to_reply = SessionTable::kHandedToSeveral;
  }
  bool created = false;
  SessionTable::Entry* entry = sessions_.Touch(key, replica, now, &created);
  if (created) entry->last_prompt_tokens = first_prompt_tokens;
  if (!created && entry->home != replica) sessions_.SetHome(entry, replica, now);
  if (!shared) sessions_.SetOpenedOnly(entry, true);  // its context counts once it continues
  sessions_.SetContext(entry, context_tokens);
  entry->last_replica = entry->last_end_replica = replica;
  entry->last_end = now;
  RefreshActive(now);
}

void ModelRouter::HandOver(std::string_view first_turn_key, SessionTable::Entry* first,
                           uint64_t reply_hash, bool another) {
  // A conversation goes on under the opening's key (a turn came under it since it was handed
  // over: its client changed the reply): the key is that conversation's, and the later key this
  // one's, not to be left out for it (found by review: two conversations opening alike on one
  // replica knocked each other out of the counts).
  // (Not when a peer tells of the one later key it was handed to: that is this conversation's own,
  // a turn of it through the peer before its reply changed. Found by review.)
  if (first->handed_over && !first->uncounted) {
    if (another || reply_hash != first->handed_to_reply)
      first->handed_to_reply = SessionTable::kHandedToSeveral;
    return;
  }
  // To one conversation's later key only: a second that opened alike makes it anyone's.
  const uint64_t before = first->handed_to_reply;
  first->handed_to_reply = before == 0                       ? reply_hash
                           : another || before != reply_hash ? SessionTable::kHandedToSeveral
                                                             : before;
  sessions_.Retire(first_turn_key);
}

void ModelRouter::LeaveFirstTurnKey(std::string_view key) {
  const std::string_view first_key = FirstTurnKeyOf(key);
  if (first_key.empty()) return;
  const SessionTable::Entry* first = sessions_.Find(first_key);
  if (first && first->handed_over && !first->uncounted &&
      SessionTable::HandedToOne(first->handed_to_reply) &&
      first->handed_to_reply == ReplyHashOf(key)) {
    sessions_.Leave(first_key);
  }
}

void ModelRouter::LeaveUnusedLaterKey(std::string_view first_turn_key,
                                      const SessionTable::Entry& first) {
  // Handed to one conversation only: this turn is that one's, whether its later key had turns
  // or not.
  if (!SessionTable::HandedToOne(first.handed_to_reply)) return;
  const std::string later = ContinuedOpeningKey(first_turn_key, first.handed_to_reply);
  const SessionTable::Entry* entry = sessions_.Find(later);
  if (entry && !entry->uncounted) sessions_.Leave(later);
}

void ModelRouter::AbandonOpening(std::string_view first_turn_key, double now) {
  sessions_.Retire(first_turn_key);
  RefreshActive(now);
}

void ModelRouter::EndUnanswered(std::string_view key) {
  if (SessionTable::Entry* entry = key.empty() ? nullptr : sessions_.Find(key))
    entry->turn_in_flight = false;
}

int ModelRouter::LearnHomes(std::span<const SessionTable::SharedHome> homes, double now, int from) {
  const int taken = static_cast<int>(sessions_.Learn(homes, now, from));
  // After all are learned: a message may list the later key before the first.
  HandOverFirstTurns(homes, now);
  return taken;
}

void ModelRouter::HandOverFirstTurns(std::span<const SessionTable::SharedHome> homes, double now) {
  // A keyless conversation past its first turn: its first turn's entry is handed over, as on the
  // gateway that saw the reply (ContinueAs).
  for (const SessionTable::SharedHome& h : homes) {
    if (h.home < 0 || h.home >= num_replicas() || h.key.empty()) continue;
    if (const std::string_view first = FirstTurnKeyOf(h.key); !first.empty()) {
      SessionTable::Entry* entry = sessions_.Find(first);
      // Or one handed over already, to a reply the peer's later key may not have (found by
      // review: two conversations alike through two gateways each left the other's key out).
      if (entry && (entry->home == h.home || entry->handed_over))
        HandOver(first, entry, ReplyHashOf(h.key), /*another=*/false);
    }
  }
  RefreshActive(now);
}

size_t ModelRouter::RestoreSessions(std::span<const SessionTable::SavedConversation> saved,
                                    double now) {
  const size_t before = sessions_.conversations();
  sessions_.Restore(saved, now);
  // A keyless conversation's first-turn entry was handed over to its later turns' key (ContinueAs)
  // before the save. A file of this version says so, and which keys no conversation goes on
  // under (SavedConversation::retired, left): only which later key it was handed to is found
  // again. One of an earlier version says neither: handed over again, the conversation counts
  // once.
  std::unordered_set<std::string_view> handed;  // retired entries given a later key here
  for (const SessionTable::SavedConversation& c : saved) {
    const std::string_view first = FirstTurnKeyOf(c.key);
    SessionTable::Entry* entry = first.empty() ? nullptr : sessions_.Find(first);
    if (!entry) continue;
    const SessionTable::Entry* later = sessions_.Find(c.key);
    if (!entry->handed_over) {
      if (entry->home == c.home) HandOver(first, entry, ReplyHashOf(c.key), /*another=*/true);
      continue;
    }
    // A conversation under each key, or one placed elsewhere (ContinueAs), or several later keys.
    const bool several = entry->home != c.home || (!entry->uncounted && later && !later->uncounted);
    if (several || !handed.insert(first).second) {
      entry->handed_to_reply = SessionTable::kHandedToSeveral;
      handed.insert(first);
    } else {
      entry->handed_to_reply = ReplyHashOf(c.key);
    }
  }
  RefreshActive(now);
  const size_t after = sessions_.conversations();
  return after > before ? after - before : 0;
}

void ModelRouter::SetPeerInFlight(std::span<const int> per_replica) {
  for (int i = 0; i < num_replicas(); ++i)
    loads_[i].peer_in_flight = i < static_cast<int>(per_replica.size()) ? per_replica[i] : 0;
}

void ModelRouter::SetGatewayRank(int rank, int gateways) {
  if (gateways < 1) return;
  share_first_ = rank * num_replicas() / gateways;
  share_count_ = (rank + 1) * num_replicas() / gateways - share_first_;
  policy_->SetGatewayShare(share_first_, share_count_);
}

void ModelRouter::SetPolicy(std::unique_ptr<RoutingPolicy> policy) {
  assert(policy);
  policy_ = std::move(policy);
  if (share_count_ >= 0) policy_->SetGatewayShare(share_first_, share_count_);
}

double ModelRouter::LastActive(std::string_view key, int replica) const {
  const SessionTable::Entry* entry = key.empty() ? nullptr : sessions_.Find(key);
  return entry && entry->last_end_replica == replica ? entry->last_end : -1;
}

void ModelRouter::StartDelegated() {
  ++delegated_in_flight_;
}

void ModelRouter::TakenDelegated() {
  ++delegated_.requests;
  ++delegated_.balanced;
}

void ModelRouter::FailDelegated() {
  if (delegated_in_flight_ > 0) --delegated_in_flight_;
  ++delegated_.failed;
}

void ModelRouter::FinishDelegated(const RequestOutcome& outcome, double now, std::string_view key) {
  if (delegated_in_flight_ > 0) --delegated_in_flight_;
  CountOutcome(outcome, &delegated_);
  if (SessionTable::Entry* entry = key.empty() ? nullptr : sessions_.Find(key)) {
    entry->last_replica = entry->last_end_replica = -1;
    entry->turn_in_flight = false;
  }
  if (outcome.prompt_tokens >= 0) {
    const int cached = std::clamp(outcome.cached_tokens, 0, outcome.prompt_tokens);
    history_.Add(num_replicas(), cached, outcome.prompt_tokens - cached, now);
  }
}

void ModelRouter::Fail(int replica, bool replica_down) {
  ReplicaLoad& load = loads_[replica];
  if (load.in_flight > 0) --load.in_flight;
  ++counters_[replica].failed;
  if (replica_down) SetHealthy(replica, false);
}

void ModelRouter::SetHealthy(int replica, bool healthy) {
  healthy_[replica] = healthy;
  loads_[replica].healthy = healthy && !draining_[replica];
}

void ModelRouter::SetDraining(int replica, bool draining) {
  if (draining_[replica] != draining) ++drain_changes_;
  draining_[replica] = draining;
  loads_[replica].healthy = healthy_[replica] && !draining;
}

void ModelRouter::UpdateScrape(int replica, const ScrapedMetrics& m,
                               std::vector<uint64_t>* released) {
  const ScrapedMetrics& last = scraped_[replica];
  const bool restarted =
      has_baseline_[replica] &&
      (m.prefix_cache_queries < last.prefix_cache_queries ||
       m.prefix_cache_hits < last.prefix_cache_hits ||
       m.external_prefix_cache_hits < last.external_prefix_cache_hits ||
       (m.external_prefix_cache_queries >= 0) != (last.external_prefix_cache_queries >= 0));
  if (restarted) {
    // What reservations kept room for there is gone; what its counters said is kept, and they
    // count again from zero.
    if (released) admission_.GiveUpReservations(replica, released);
    before_restarts_[replica] = PrefixCountsOf(replica);
    scrape_baseline_[replica] = ScrapedMetrics{};
    scrape_baseline_[replica].external_prefix_cache_queries = m.external_prefix_cache_queries;
  } else if (!has_baseline_[replica]) {
    scrape_baseline_[replica] = m;
    has_baseline_[replica] = true;
  }
  scraped_[replica] = m;
  if (!m.asleep.value_or(false)) woken_at_[replica] = -std::numeric_limits<double>::infinity();
  ReplicaLoad& load = loads_[replica];
  load.running = m.running;
  load.waiting = m.waiting;
  load.kv_cache_usage = m.kv_cache_usage;
  SetCapacityBlocks(replica);
  if (m.kv_cache_tokens() > 0) admission_.SetCapacity(replica, m.kv_cache_tokens(), released);
  ++scrape_epoch_;
}

void ModelRouter::SetCapacityBlocks(int replica) {
  const double blocks = static_cast<double>(scraped_[replica].kv_cache_tokens()) / chunk_tokens_;
  loads_[replica].kv_capacity_blocks =
      static_cast<int>(std::min<double>(blocks, std::numeric_limits<int>::max()));
}

void ModelRouter::LearnChunkTokens(int prompt_tokens, size_t chunks) {
  constexpr double kWeight = 0.1;  // of each new observation
  if (prompt_tokens <= 0 || chunks < 4) return;
  // The prompt's last partial chunk is not hashed: count it as half a chunk. One odd answer (a
  // short prompt whose template outweighs its text) moves the mean by a tenth at most, so that the
  // index it sizes is not cut to a fraction at once.
  const double per_chunk = std::clamp(prompt_tokens / (static_cast<double>(chunks) + 0.5),
                                      0.5 * chunk_tokens_, 2 * chunk_tokens_);
  chunk_tokens_ = std::clamp(chunk_tokens_ + kWeight * (per_chunk - chunk_tokens_), 1.0, 1024.0);
  for (int i = 0; i < num_replicas(); ++i) SetCapacityBlocks(i);
}

ModelRouter::PrefixCounts ModelRouter::PrefixCountsOf(int replica) const {
  const ScrapedMetrics& now = scraped_[replica];
  const ScrapedMetrics& from = scrape_baseline_[replica];
  const PrefixCounts& before = before_restarts_[replica];
  return {before.queries + now.prefix_cache_queries - from.prefix_cache_queries,
          before.hits + now.prefix_cache_hits - from.prefix_cache_hits,
          before.external_hits + now.external_prefix_cache_hits - from.external_prefix_cache_hits};
}

double ModelRouter::prefix_hit_rate(int replica) const {
  if (!has_baseline_[replica]) return -1;
  const PrefixCounts counts = PrefixCountsOf(replica);
  // (Counters that do not add up, more hits than queries, give no rate above 1.)
  return counts.queries > 0 ? std::clamp(counts.hits / counts.queries, 0.0, 1.0) : -1;
}

double ModelRouter::external_prefix_hit_rate(int replica) const {
  if (!has_baseline_[replica] || scraped_[replica].external_prefix_cache_queries < 0) return -1;
  const PrefixCounts counts = PrefixCountsOf(replica);
  return counts.queries > 0 ? std::clamp(counts.external_hits / counts.queries, 0.0, 1.0) : -1;
}

void ModelRouter::SetOverflowLimit(int limit, bool is_auto) {
  assert(limit >= 1);
  options_.settings.overflow_limit = limit;
  options_.overflow_limit_auto = is_auto;
}

void DropImplausibleUsage(RequestOutcome* outcome, int64_t max_model_len, int sequences) {
  const int64_t limit =
      (max_model_len > 0 ? max_model_len : kMaxBelievedTokens) * std::max(1, sequences);
  const int64_t prompt = std::max(0, outcome->prompt_tokens);
  const int64_t output = std::max(0, outcome->output_tokens);
  if (prompt + output > limit) {
    outcome->prompt_tokens = outcome->cached_tokens = outcome->output_tokens = -1;
    return;
  }
  if (outcome->prompt_tokens >= 0 && outcome->cached_tokens > outcome->prompt_tokens)
    outcome->cached_tokens = outcome->prompt_tokens;
}

}  // namespace warden
