// Gateway's routing of a request: where it goes, again where a replica fails it, and what is
// counted when it ends.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <random>
#include <span>

#include "core/protocol/inline_data.h"
#include "core/protocol/response_observer.h"
#include "core/protocol/trace_context.h"
#include "core/routing/keyless_route.h"
#include "core/routing/prompt_hasher.h"
#include "gateway/api_errors.h"
#include "gateway/broken_stream.h"
#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"
#include "gateway/peer_sync.h"
#include "net/hangup_watch.h"
#include "net/relay_parser.h"
#include "os/system_time.h"

namespace warden {

namespace {

// Says that `replica`'s stream, not begun, was cut for its replica being out of service (lost and
// silent for stall_timeout_s, held stalled, or out of service for its /health), and the request
// sent elsewhere.
void WarnOfUnbegunStreamCut(const ModelState& model, int replica, bool lost_and_silent) {
  spdlog::warn(
      "model {}: replica {} ({}) is {} with a stream it had not begun: sent to another server if "
      "one is in service",
      model.name(), replica, model.ReplicaUrl(replica),
      lost_and_silent          ? "out of service and silent for stall_timeout_s"
      : model.stalled(replica) ? "held stalled (stall_timeout_s)"
                               : "out of service");
}

// Attempts of one request whose connection broke before an answer: the second is its last (a
// request that breaks every replica it reaches is not sent to them all).
constexpr int kMaxDrops = 2;

// Servers a request is sent on to after one answered that it did not take it (SaysNotTaken): past
// that, the client gets the last one's answer.
constexpr int kMaxNotTaken = 2;

// Times a request admission held is routed again because its replica was drained meanwhile, on
// top of its attempts (an operator draining replicas in turn moves it each time).
constexpr int kMaxDrainMoves = 64;

// Requests a replica answers without ever giving a cached share before the log says how to turn
// it on (vLLM leaves out a share of 0: a few cold requests prove nothing).
constexpr int64_t kCacheUnreportedWarning = 50;

// The model's healthy replicas that are draining.
int HealthyDraining(ModelState& model) {
  return model.WithRouter([](ModelRouter& r) {
    int n = 0;
    for (int i = 0; i < r.num_replicas(); ++i) n += r.healthy(i) && r.draining(i);
    return n;
  });
}

// The model's replicas out of service because their engines sleep (vLLM's sleep mode).
int Asleep(ModelState& model) {
  return model.WithRouter([](ModelRouter& r) {
    int n = 0;
    for (int i = 0; i < r.num_replicas(); ++i)
      n += !r.healthy(i) && r.scraped(i).asleep.value_or(false);
    return n;
  });
}

// Why a model has no replica to take a request: none healthy (some asleep, maybe), or the healthy
// ones drained.
std::string NoReplicaMessage(ModelState& model, int healthy_draining) {
  if (healthy_draining == 0) {
    const int asleep = Asleep(model);
    if (asleep == 0) return fmt::format("no healthy replica for model '{}'", model.name());
    // Put to sleep through the gateway: by hand, so idle_sleep is no fix.
    bool by_hand = false;
    for (size_t s = 0; s < model.pools().size(); ++s) by_hand = by_hand || model.slept_by_hand(s);
    return fmt::format(
        "no replica in service for model '{}': {} asleep (vLLM's sleep mode: POST /wake_up to "
        "the gateway wakes every server, to a server's own URL that one{})",
        model.name(), asleep,
        model.idle_sleep() || by_hand
            ? ""
            : "; if vLLM sleeps when idle, --sleep-idle-ttl, set idle_sleep: on");
  }
  const std::string_view model_name = model.name();
  return fmt::format("no replica in service for model '{}': {} healthy one(s) draining", model_name,
                     healthy_draining);
}

// The latest turns back on their replica (enough of them to judge) read under half of their
// history from the cache, though the replica's conversations fit its KV cache and nothing waits
// there (so nothing had to be evicted): returns the share read, else 0. A turn that ends while
// they do not fit starts the window again, so that evictions under load are never taken for
// a prompt whose head changes.
double HistoryMissed(ModelRouter& r, int replica) {
  constexpr int64_t kTurnsToJudge = 20;
  const ScrapedMetrics& s = r.scraped(replica);
  const int64_t kv_tokens = s.kv_cache_tokens();
  const bool fits =
      s.waiting == 0 && (kv_tokens > 0 ? r.sessions().active_context_on(replica) <= 0.8 * kv_tokens
                                       : s.kv_cache_usage <= 0.8);
  if (!fits) {
    r.TakeHistoryWindow(replica, 0);
    return 0;
  }
  const ModelRouter::HistoryWindow w = r.TakeHistoryWindow(replica, kTurnsToJudge);
  if (w.turns == 0 || w.tokens == 0) return 0;
  const double read = double(w.cached_tokens) / double(w.tokens);
  return read < 0.5 ? std::max(read, 1e-9) : 0;
}

// Where a routed request went, for its access-log line.
void NoteRoute(const RouteDecision& decision, bool generation, std::string* note) {
  if (decision.replica >= 0) {
    fmt::format_to(std::back_inserter(*note), " replica={} route={}", decision.replica,
                   RouteKindName(ShownKind(decision, generation)));
    if (decision.side_request) note->append(" side");  // under a conversation's key, not its turn
  } else {
    note->append(" route=engine");
  }
}

// A replica's answer that says it did not take the request, so that another may: 503 (unavailable:
// vLLM whose engine died, or a proxy in front with no engine behind) and 429 (too many
// requests: a limiter in front). vLLM answers neither for a request it ran.
bool SaysNotTaken(unsigned status) {
  return status == 503 || status == 429;
}

// Adds every replica of `replica`'s server (all its ranks, in the data-parallel layout) to
// `avoided`.
bool EveryReplicaDraining(ModelState& model) {
  return model.WithRouter([](ModelRouter& r) {
    for (int i = 0; i < r.num_replicas(); ++i) {
      if (!r.draining(i)) return false;
    }
    return true;
  });
}

void AvoidServerOf(const ModelState& model, int replica, std::vector<int>* avoided) {
  for (int i = 0; i < model.num_replicas(); ++i) {
    if (model.target(i).pool == model.target(replica).pool) avoided->push_back(i);
  }
}

// Whether a replica in service is left for a request that `avoided` (and the server of `replica`)
// are passed over for.
bool AnotherInService(ModelState& model, int replica, const std::vector<int>& avoided) {
  return model.WithRouter([&](ModelRouter& r) {
    for (int i = 0; i < r.num_replicas(); ++i) {
      if (model.target(i).pool == model.target(replica).pool) continue;
      if (std::find(avoided.begin(), avoided.end(), i) != avoided.end()) continue;
      if (r.load(i).healthy) return true;
    }
    return false;
  });
}

// A replica of a server other than `replica`'s and those in `avoided` that is healthy but drained
// (out of service, and still holding what was stored there); -1 when none is.
int DrainedLeft(ModelState& model, int replica, const std::vector<int>& avoided) {
  return model.WithRouter([&](ModelRouter& r) {
    for (int i = 0; i < r.num_replicas(); ++i) {
      if (model.target(i).pool == model.target(replica).pool) continue;
      if (std::find(avoided.begin(), avoided.end(), i) != avoided.end()) continue;
      if (r.healthy(i) && r.draining(i)) return i;
    }
    return -1;
  });
}

// Where a request about a stored response that `replica`'s server did not have (or did not answer)
// goes next: placed by the policy among the servers in service not asked yet (a known
// conversation's home stays, as for an overflow; a new one is placed anew), and when none is
// left, to a drained one, which keeps what it stored.
void SeekNext(ModelState& model, int replica, const std::vector<int>& avoided,
              RouteRequest* route_request) {
  route_request->needs_home = false;
  route_request->stored_on =
      AnotherInService(model, replica, avoided) ? -1 : DrainedLeft(model, replica, avoided);
}

// The replicas of the servers of `model` that do not serve `name` when others do (a LoRA
// adapter loaded on some servers only): the others would answer 404.
std::vector<int> ReplicasWithout(const ModelState& model, std::string_view name) {
  std::vector<int> replicas;
  if (name.empty() || name == model.name()) return replicas;
  for (size_t server : model.served_names().ServersWithout(name)) {
    for (int r : model.ReplicasOf(server)) replicas.push_back(r);
  }
  return replicas;
}

}  // namespace

RouteRequest Gateway::RouteRequestFor(ModelState& model, const SessionKey& key,
                                      const BodyFacts& facts, std::string_view body,
                                      bool generation, bool needs_home, int stored_on) {
  RouteRequest route_request;
  // Requests about a stored response follow its conversation too, though they generate nothing.
  route_request.sticky = (generation || key.source == KeySource::kPreviousResponse) && key.sticky();
  route_request.opens_conversation = key.source == KeySource::kOpening && !facts.opening_continued;
  route_request.needs_home = needs_home;
  route_request.stored_on = stored_on;
  route_request.follows_stored = generation && needs_home && stored_on >= 0;
  route_request.sleeping = !model.idle_sleep() ? SleepingReplicas::kLikeAnyOther
                           : generation        ? SleepingReplicas::kWakeOnlyWhenNeeded
                                               : SleepingReplicas::kPassOver;
  // A keyless conversation past its first turn stays on its first turn's place on a hashing
  // policy's ring, and in admission's reservations.
  if (!key.opening_key.empty())
    route_request.key_hash = XXH3_64bits(key.opening_key.data(), key.opening_key.size());
  route_request.prefix_hashes = facts.prompt_hashes;
  if (!facts.model.empty())
    route_request.asked_model =
        static_cast<uint32_t>(XXH3_64bits(facts.model.data(), facts.model.size())) | 1;
  route_request.body_bytes =
      static_cast<uint32_t>(std::min<size_t>(body.size(), std::numeric_limits<uint32_t>::max()));
  route_request.body = body;
  route_request.claude_code_key =
      key.source == KeySource::kClaudeCodeHeader || key.source == KeySource::kMetadataUserId;
  // Counted once the replica answers or fails it (Forward), so that the counters only go up: a
  // request admission holds and routes again, or that a replica refuses, is not counted where it
  // does not run.
  route_request.count_when_taken = true;
  // The prompt's text when it was hashed, else the whole body's, with images as vision models
  // read them (idle_sleep's room check: the body is looked through only then).
  const long tokens = facts.prompt_bytes > 0
                          ? static_cast<long>(facts.prompt_bytes / kPromptBytesPerToken)
                      : route_request.sleeping == SleepingReplicas::kWakeOnlyWhenNeeded
                          ? EstimateTokensWithInlineData(body)
                          : static_cast<long>(body.size() / kPromptBytesPerToken);
  route_request.prompt_tokens =
      static_cast<int>(std::min<long>(tokens, std::numeric_limits<int>::max()));
  return route_request;
}

// Where Forward's tries of one request stand: what the next one is routed with, and what those
// before it came to.
struct Gateway::ForwardTries {
  RouteRequest route_request;
  // A keyless conversation past its first turn goes on under its first turn's key when the one
  // with its reply is not known (the reply was not seen here, or the client changed it).
  std::string_view conversation_key;
  std::string_view stands_for;
  // The replicas of the servers without the LoRA adapter the request names (when some have it),
  // and of the servers that did not take it, dropped it or stalled.
  std::vector<int> avoided;
  std::vector<int> dropped_by;  // of those, the replicas of the servers that dropped it
  // The replicas of servers lost while the request was held there: passed over while out of
  // service (the scrape marks a lost server down only after its round's other reads, and the
  // router would send the request straight back meanwhile), not once back (found by review: a
  // drain of the next one answered 503 with the first back in service).
  std::vector<int> lost_while_held;
  std::vector<int> avoid_now;  // `avoided`, and those of lost_while_held still out of service
  // A try was routed as a turn of the conversation under `conversation_key`: one that ends here
  // with no answer no longer counts as going on.
  bool keyed = false;
  // The last try placed the request as the opening of its conversation: one that ends here with
  // no answer hands that entry over, as RecordEnded does, so that the same opening sent again is
  // a conversation of its own rather than kept waiting on this one's.
  bool opened = false;
  bool left_alone = false;    // a try had RouteDecision::key_left_alone
  bool last_dropped = false;  // the last replica tried took the request and gave no answer
  int drops = 0;
  int not_taken = 0;  // answers of replicas that did not take it (SaysNotTaken), sent elsewhere
  int drain_moves = 0;

  // The request ends here unanswered.
  void EndUnanswered(ModelState& model, double now) const {
    if (!keyed) return;
    model.WithRouter([&](ModelRouter& r) {
      r.EndUnanswered(conversation_key);
      if (opened) r.AbandonOpening(conversation_key, now);
    });
  }

  // After the server of `decision.replica` did not take the request, did not have the stored
  // response it is about, or stalled: the next try goes to another server.
  void TryAnotherServer(ModelState& model, const RouteDecision& decision, bool seeks_stored) {
    AvoidServerOf(model, decision.replica, &avoided);
    route_request.avoid = avoided;
    if (decision.kind == RouteKind::kNew) route_request.place_as_new = true;
    if (seeks_stored) SeekNext(model, decision.replica, avoided, &route_request);
  }

  // Before a try: what it passes over, lost_while_held's replicas back in service left out.
  void AvoidForThisTry(ModelState& model) {
    if (lost_while_held.empty()) return;
    avoid_now = avoided;
    model.WithRouter([&](ModelRouter& r) {
      for (int i : lost_while_held)
        if (!r.healthy(i)) avoid_now.push_back(i);
    });
    route_request.avoid = avoid_now;
  }

  // After `decision.replica` took the request and closed without an answer: counts the failure
  // and sets the next try to another server, unless the request was dropped kMaxDrops times
  // (then false).
  bool TryAfterDrop(ModelState& model, const RouteDecision& decision, bool seeks_stored) {
    // Not taken for down: a replica that died fails the next connect, and is marked so then; one
    // that drops this request alone (it trips something in front of the engine) keeps serving
    // the others, and the request is not tried on every replica in turn.
    model.WithRouter([&](ModelRouter& r) { r.Fail(decision.replica, /*replica_down=*/false); });
    if (++drops == kMaxDrops) return false;
    spdlog::warn(
        "model {}: replica {} ({}) closed the connection without answering; sending the request "
        "again, to another server if one is in service",
        model.name(), decision.replica, model.ReplicaUrl(decision.replica));
    // It may have run the request: another server, once; the conversation's home stays.
    AvoidServerOf(model, decision.replica, &avoided);
    AvoidServerOf(model, decision.replica, &dropped_by);
    route_request.avoid = avoided;
    route_request.dropped_by = dropped_by;
    if (decision.kind == RouteKind::kNew) route_request.place_as_new = true;
    if (seeks_stored) SeekNext(model, decision.replica, avoided, &route_request);
    return true;
  }

  // After admission held the request on `decision.replica` and did not let it in (`wait`, not
  // kGo): it is counted as ended there. True when it is routed again (its replica was lost, or
  // drained; a drain's move is not counted against the request's `tries`); false when it ends
  // here (its client left, or the gateway stops).
  bool RouteAgainAfterHold(ModelState& model, const RouteDecision& decision, AdmissionWait wait,
                           bool seeks_stored, double now, int* tries) {
    const bool moved = wait == AdmissionWait::kRouteAgain || wait == AdmissionWait::kDrained;
    model.WithRouter([&](ModelRouter& r) {
      // Routed again: counted where it goes, not also where it was held.
      moved ? r.Unsent(decision.replica, now) : r.Finish(decision.replica, {}, now);
    });
    // A new conversation is still new where it goes (its opening's entry is placed afresh).
    if (moved && decision.kind == RouteKind::kNew) route_request.place_as_new = true;
    if (wait == AdmissionWait::kRouteAgain) {
      // Lost (or down): another server. The scrape marks a lost server down only after its
      // round's other reads, and the router would send the request straight back meanwhile
      // (found by review). One only its replica can answer stays with it.
      if (seeks_stored) {
        TryAnotherServer(model, decision, seeks_stored);
      } else if (!route_request.needs_home) {
        AvoidServerOf(model, decision.replica, &lost_while_held);
        if (decision.kind == RouteKind::kNew) route_request.place_as_new = true;
      }
    } else if (wait == AdmissionWait::kDrained && ++drain_moves <= kMaxDrainMoves) {
      ++*tries;
    }
    return moved;
  }
};

RouteDecision Gateway::RouteTry(ModelState& model, const SessionKey& key, int attempt,
                                ForwardTries* fwd) {
  RouteRequest& route_request = fwd->route_request;
  RouteDecision decision = model.WithRouter([&](ModelRouter& r) {
    if (attempt == 0 && !key.shorter_keys.empty()) {
      const KeylessRoute keyless = RouteKeyless(r.sessions(), key);
      fwd->conversation_key = keyless.key;
      route_request.opens_conversation = keyless.opens;
      fwd->stands_for = keyless.stands_for;
      route_request.key_hash = XXH3_64bits(fwd->stands_for.data(), fwd->stands_for.size());
    }
    // A retry of a request kept off its key (another's opening under it is in flight) is placed
    // without it: placed as new, it would take the key.
    return r.Route(fwd->left_alone ? std::string_view() : fwd->conversation_key, route_request,
                   Now());
  });
  // (Its next try's routing replaces its place in the policy's counts.)
  if (decision.request_id != 0) route_request.request_id = decision.request_id;
  if (decision.replica < 0) return decision;
  if (decision.side_request) route_request.sticky = false;  // its end is none of its key's
  // Left alone once (another request's opening under the key was in flight), left alone on its
  // retries too, which place it as new and so take the key: the entry stays the other's.
  if (decision.key_left_alone) fwd->left_alone = true;
  decision.key_left_alone = fwd->left_alone;
  const bool keyed_now = route_request.sticky && !fwd->left_alone && !fwd->conversation_key.empty();
  fwd->keyed = fwd->keyed || keyed_now;
  fwd->opened = route_request.opens_conversation && keyed_now;
  if (model.BeginsDrainingSpell(decision.to_draining, Now())) {
    spdlog::warn(
        "model {}: no replica in service can take requests (down, or dropping them); sending "
        "them to draining replica {} rather than failing them (warden_routed_to_draining_total "
        "counts them)",
        model.name(), model.ReplicaUrl(decision.replica));
  }
  // Peers learn a new home at once: one placing a new conversation now must count it.
  if (decision.new_home >= 0) peer_sync_->Nudge(/*new_home=*/true);
  return decision;
}

// Forward's span of a request (config otlp_traces_endpoint): in the client's trace when its one
// traceparent is valid, else in a trace of its own (the client's tracestate then dropped, as the
// specification asks). What the tries learn is added as they go, and the span goes to the
// exporter as Forward ends, however it ends. A trace the client says it does not record (its
// sampled flag off) is passed on as such, and no span is sent.
struct Gateway::RequestTrace {
  RequestTrace(Gateway& gateway, HttpExchange& ex, std::string_view model, std::string_view path)
      : gateway(gateway), ex(ex), began(gateway.Now()) {
    std::mt19937_64& random = TraceRandom();
    const HttpRequest& request = ex.request();
    std::optional<TraceParent> parent;
    if (request.count("traceparent") == 1) parent = ParseTraceParent(request["traceparent"]);
    new_trace = !parent;
    span.trace_id = parent ? parent->trace_id : TraceIdHex(random(), random());
    span.parent_span_id = parent ? parent->span_id : "";
    span.span_id = SpanIdHex(random());
    sampled = !parent || parent->sampled;
    // (The wall clock's own reading: one taken at start and carried on by the steady clock would
    // drift from the engine's and the client's spans after a step of the clock.)
    span.start_unix_ns = SystemUnixNanos();
    const std::string_view method = request.method_string();
    // A path or a model name is the client's bytes: not valid UTF-8, it would make the whole
    // batch's JSON invalid, and the collector refuse every span in it.
    std::string shown_path = ValidUtf8OrEscaped(path);
    const std::string route = RouteOfPath(shown_path);
    span.name.reserve(method.size() + 1 + route.size());
    span.name.append(method).append(" ").append(route);
    span.strings = {{"http.request.method", std::string(method)},
                    {"url.path", std::move(shown_path)},
                    {"gen_ai.request.model", ValidUtf8OrEscaped(model)}};
    line.reserve(72);
    line.append("traceparent: ")
        .append(FormatTraceParent(span.trace_id, span.span_id, sampled))
        .append("\r\n");
  }
  RequestTrace(const RequestTrace&) = delete;
  RequestTrace& operator=(const RequestTrace&) = delete;

  ~RequestTrace() {
    if (!sampled) return;
    span.end_unix_ns = SystemUnixNanos();
    const int status = ex.status();
    if (status > 0) span.ints.emplace_back("http.response.status_code", status);
    // An answer begun and then broken off (the replica died or stalled, the gateway stopped) went
    // out with a 200: its span is an error all the same.
    span.error = status >= 500 || broke_off;
    if (broke_off) span.strings.emplace_back("warden.outcome", "broke off");
    if (status == 0) span.strings.emplace_back("warden.outcome", "client left");
    if (tries > 0) {
      span.ints.emplace_back("warden.tries", tries);
      span.strings.emplace_back("warden.route", route);
      if (replica >= 0) span.ints.emplace_back("warden.replica", replica);
      span.doubles.emplace_back("warden.sent_after_s", sent_after_s);
    }
    const RequestOutcome& o = outcome;
    if (o.prompt_tokens >= 0) span.ints.emplace_back("gen_ai.usage.input_tokens", o.prompt_tokens);
    if (o.cached_tokens >= 0) span.ints.emplace_back("warden.cached_tokens", o.cached_tokens);
    if (o.output_tokens >= 0) span.ints.emplace_back("gen_ai.usage.output_tokens", o.output_tokens);
    if (o.ttft_s >= 0) span.doubles.emplace_back("warden.ttft_s", o.ttft_s);
    gateway.traces_->Add(std::move(span));
  }

  // A try routed as `decision` is sent (the span says the last one's).
  void Sending(const RouteDecision& decision, bool generation) {
    ++tries;
    replica = decision.replica;
    route = decision.replica < 0 ? "engine" : RouteKindName(ShownKind(decision, generation));
    sent_after_s = gateway.Now() - began;
    outcome = {};  // (a try before may have had some of an answer)
    broke_off = false;
  }

  // Ids random enough that no two gateways' draw the same: each thread's generator seeded with
  // 256 bits from the system.
  static std::mt19937_64& TraceRandom() {
    thread_local std::mt19937_64 random = [] {
      std::random_device device;
      std::seed_seq seed{device(), device(), device(), device(),
                         device(), device(), device(), device()};
      return std::mt19937_64(seed);
    }();
    return random;
  }

  static int64_t SystemUnixNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  Gateway& gateway;
  HttpExchange& ex;
  const double began;  // Now() as the span began
  GatewaySpan span;
  bool sampled = true;
  bool new_trace = false;  // not the client's: its tracestate is not passed on
  std::string line;  // "traceparent: ...\r\n", the replica's (the gateway's span as its parent)
  int tries = 0;     // sent to a replica (or to vLLM's balancer)
  int replica = -1;
  std::string route;
  double sent_after_s = -1;  // from the span's start to the last try's sending (admission's hold)
  RequestOutcome outcome;    // of the last try's answer
  bool broke_off = false;    // the last try's answer broke off after it began
};

asio::awaitable<void> Gateway::Forward(HttpExchange& ex, int shard, ModelState& model,
                                       const SessionKey& key, const BodyFacts& facts,
                                       bool generation, bool needs_home, int stored_on,
                                       ClientSlot& client) {
  const double started = Now();
  const HttpRequest& request = ex.request();
  const std::string_view path = TargetPath(request.target());
  const ErrorShape shape = ErrorShapeFor(path);
  std::optional<RelayParser> parser;
  ForwardTries fwd;
  fwd.route_request =
      RouteRequestFor(model, key, facts, request.body(), generation, needs_home, stored_on);
  // A policy that follows requests (dynamo) counts this one in flight until Forward ends, however
  // it ends.
  struct TellEnded {
    Gateway* gateway;
    ModelState& model;
    const RouteRequest& request;
    ~TellEnded() {
      if (request.request_id == 0) return;
      model.WithRouter([&](ModelRouter& r) { r.Ended(request.request_id, gateway->Now()); });
    }
  } tell_ended{this, model, fwd.route_request};
  fwd.conversation_key = key.key;
  fwd.stands_for = key.opening_key.empty() ? key.key : key.opening_key;
  std::optional<RequestTrace> trace;
  if (traces_) trace.emplace(*this, ex, facts.model.empty() ? model.name() : facts.model, path);
  // In the traffic log, its conversation's delay is decided as it comes.
  std::optional<TrafficLog::Turn> traffic_turn;
  if (traffic_log_ && generation) {
    traffic_turn.emplace(traffic_log_->Begin(
        fwd.route_request.sticky ? fwd.stands_for : std::string_view(), started));
  }
  HangupWatch watch(ex.socket(), *hangup_armers_[shard]);
  watch.Start();
  // A vLLM data-parallel server's own balancer places the request with affinity off, and always
  // on the Responses API, where vLLM does not read the rank header.
  const bool delegate = (model.config().data_parallel() && path.starts_with("/v1/responses")) ||
                        EngineBalances(model);
  // vLLM's balancer knows nothing of a drain: with every rank drained, none is in service.
  if (delegate && !needs_home && stored_on < 0 && EveryReplicaDraining(model)) {
    watch.Stop();
    HttpResponse response = NoReplicaLeft(request, shape, model, /*last_dropped=*/false);
    client.Release();
    co_await ex.Respond(std::move(response));
    co_return;
  }
  // (Not for a request about a stored response: only its replica can answer, vLLM's 404 if it lacks
  // the adapter.)
  if (!needs_home && stored_on < 0) fwd.avoided = ReplicasWithout(model, facts.model);
  fwd.route_request.avoid = fwd.avoided;
  const size_t note_before_route = ex.note().size();
  const bool seeks_stored =
      !delegate && stored_on < 0 &&
      (!facts.previous_response_id.empty() || !StoredResponseId(path).empty());
  for (int attempt = 0, tries = model.num_replicas() + kMaxDrops + kMaxNotTaken + 1;
       attempt < tries; ++attempt) {
    RouteDecision decision;  // replica -1: the engine's balancer
    if (delegate) {
      model.WithRouter([](ModelRouter& r) { r.StartDelegated(); });
    } else {
      fwd.AvoidForThisTry(model);
      decision = RouteTry(model, key, attempt, &fwd);
      if (decision.replica < 0) break;
      if (traffic_turn && decision.side_request) traffic_turn->MarkSide();
    }
    if (access_log_.load(std::memory_order_relaxed)) {  // the last attempt's place (or the
                                                        // engine's), however it ends
      ex.note().resize(note_before_route);
      NoteRoute(decision, generation, &ex.note());
    }
    const bool admit = !delegate && generation && model.admission_enabled();
    const uint64_t admission_id =
        admit ? next_admission_id_.fetch_add(1, std::memory_order_relaxed) : 0;
    AdmissionWait wait = AdmissionWait::kGo;
    if (admit) {
      // An overflowed turn keeps no room where it went (the next one goes home), and gives up
      // what its conversation kept at home.
      const std::string_view conversation = fwd.route_request.sticky ? fwd.stands_for : "";
      const bool reserves = decision.kind != RouteKind::kOverflow;
      wait = co_await AwaitAdmission(
          model, decision.replica, admission_id, facts.prompt_hashes, conversation, reserves, watch,
          {fwd.route_request.needs_home, decision.to_draining, fwd.avoided, Now() - started},
          facts.previous_response_id);
    }
    if (wait != AdmissionWait::kGo) {  // not sent
      if (fwd.RouteAgainAfterHold(model, decision, wait, seeks_stored, Now(), &tries)) continue;
      fwd.EndUnanswered(model, Now());
      if (wait != AdmissionWait::kStopping) {  // its client left
        ex.Abandon();
        co_return;
      }
      HttpResponse response =
          Error(ex.request(), shape, 503,
                "the gateway is stopping before this request's turn came: it was not sent to a "
                "replica; send it again",
                ErrorCode::kGatewayStopping);
      response.set(http::field::retry_after, "1");
      client.Release();
      co_await ex.Respond(std::move(response));
      co_return;
    }
    ModelState::AdmissionClaim claim(model, admission_id);
    if (watch.hung_up()) {  // gone while held, or just now: do not start the request
      claim.Done();
      model.WithRouter([&](ModelRouter& r) {
        delegate ? r.FinishDelegated({}, Now()) : r.Finish(decision.replica, {}, Now());
      });
      fwd.EndUnanswered(model, Now());
      ex.Abandon();
      co_return;
    }
    UpstreamPool& pool = delegate ? *model.pools()[0] : *model.target(decision.replica).pool;
    const int rank = delegate ? -1 : model.target(decision.replica).rank;
    // The engine's balancer's requests wait on the server's health (its ranks share it).
    const int health_of = delegate ? 0 : decision.replica;
    if (trace) trace->Sending(decision, generation);
    Upstream upstream = co_await Send(
        request, ex.request_id_line(), trace ? std::string_view(trace->line) : std::string_view(),
        trace && trace->new_trace, shard, model, health_of, pool, rank, parser, watch,
        /*resend_if_stale=*/fwd.drops == 0);
    // The engine answered (StallWatch): a whole 2xx answer. Not a stream's head, which vLLM sends
    // as it queues the request, nor an error its API server gives alone; a stream's first bytes
    // count when they come (Relay).
    if (upstream.connection && parser->status() / 100 == 2 && !parser->event_stream())
      model.NoteAnswered(health_of);
    const bool refused = upstream.connection && !delegate && SaysNotTaken(parser->status()) &&
                         (!fwd.route_request.needs_home || seeks_stored) && stored_on < 0 &&
                         fwd.not_taken < kMaxNotTaken;
    // A response stored where the gateway does not know (made before it restarted without a
    // state file, or sent to a replica directly): each server is asked in turn until one has it.
    const bool not_stored_here = upstream.connection && seeks_stored && parser->status() == 404;
    const bool another =
        (refused || not_stored_here) && AnotherInService(model, decision.replica, fwd.avoided);
    const bool seeking_on = seeks_stored && (refused || not_stored_here);
    if (another || (seeking_on && DrainedLeft(model, decision.replica, fwd.avoided) >= 0)) {
      // Refused before it ran (unavailable, or too many requests), or not found: another server,
      // whose answer the client gets; the conversation's home stays. This one's answer is not read
      // (nor its connection kept).
      refused ? ++fwd.not_taken : ++tries;
      watch.SetUpstream(nullptr);  // before its socket goes
      upstream.connection.reset();
      claim.Done();
      model.WithRouter([&](ModelRouter& r) {
        refused ? r.NotTaken(decision.replica, Now()) : r.Unsent(decision.replica, Now());
      });
      fwd.TryAnotherServer(model, decision, seeks_stored);
      continue;
    }
    model.WithRouter([&](ModelRouter& r) {
      // (Not a sticky turn for a stored response read: found by review.)
      delegate ? r.TakenDelegated() : r.Taken(decision.replica, ShownKind(decision, generation));
    });
    if (upstream.connection || upstream.client_gone) client.Ran();  // (its budget pays for it)
    if (upstream.connection) {
      const std::string_view conversation = fwd.route_request.sticky ? fwd.conversation_key : "";
      const bool name_by_reply =
          generation && fwd.route_request.opens_conversation && !delegate && !conversation.empty();
      const Relayed relayed =
          co_await Relay(ex, shard, std::move(upstream), *parser, model, decision, conversation,
                         generation, facts.sequences, name_by_reply, started, watch, client,
                         traffic_turn ? &*traffic_turn : nullptr);
      if (trace) {
        trace->outcome = relayed.outcome;
        trace->broke_off = relayed.broke_off;
      }
      if (relayed.stalled) {  // out of service now: routed again, as if it could not be reached
        claim.Done();
        model.WithRouter([&](ModelRouter& r) { r.Fail(decision.replica, /*replica_down=*/false); });
        WarnOfUnbegunStreamCut(model, decision.replica, relayed.lost_and_silent);
        fwd.TryAnotherServer(model, decision, seeks_stored);
        continue;
      }
      if (relayed.dropped_unanswered) {
        claim.Done();
        fwd.last_dropped = true;
        if (!fwd.TryAfterDrop(model, decision, seeks_stored)) break;
        continue;
      }
      AfterRelayed(model, shard, facts, relayed, parser->status(), claim,
                   traffic_turn ? &*traffic_turn : nullptr, started);
      co_return;
    }
    claim.Done();
    if (upstream.client_gone) {
      model.WithRouter([&](ModelRouter& r) {
        delegate ? r.FinishDelegated({}, Now()) : r.Finish(decision.replica, {}, Now());
      });
      fwd.EndUnanswered(model, Now());
      ex.Abandon();
      co_return;
    }
    if (std::optional<HttpResponse> answer = AnswerNotRetried(
            request, shape, model, delegate ? -1 : decision.replica, upstream, pool.url())) {
      fwd.EndUnanswered(model, Now());
      watch.Stop();
      client.Release();
      co_await ex.Respond(std::move(*answer));
      co_return;
    }
    fwd.last_dropped = upstream.dropped;
    if (delegate) {
      spdlog::warn("model {}: {} did not answer", model.name(), pool.url().ToString());
      model.WithRouter([](ModelRouter& r) { r.FailDelegated(); });
      break;
    }
    if (upstream.dropped) {
      if (!fwd.TryAfterDrop(model, decision, seeks_stored)) break;
      continue;
    }
    NoteUnreachable(model, decision.replica, upstream.refused);
    // A new conversation whose replica failed is still new: placed afresh, not re-homed.
    if (decision.kind == RouteKind::kNew) fwd.route_request.place_as_new = true;
  }
  watch.Stop();
  fwd.EndUnanswered(model, Now());
  HttpResponse response = NoReplicaLeft(request, shape, model, fwd.last_dropped);
  // Dropped by two servers, it would trip the next as well; by one (the only one, or vLLM's
  // balancer's pick), the client's own retry may well go through (found by review).
  if (fwd.last_dropped && fwd.drops < kMaxDrops) response.erase(kShouldRetry);
  client.Release();
  co_await ex.Respond(std::move(response));
}

void Gateway::AfterRelayed(ModelState& model, int shard, const BodyFacts& facts,
                           const Relayed& relayed, int status, ModelState::AdmissionClaim& claim,
                           TrafficLog::Turn* traffic, double started) {
  const RequestOutcome& outcome = relayed.outcome;
  // A turn on a stored response sent only its new part, and its usage counts the whole
  // conversation: no measure of the tokens its chunks hold (found by review: admission then
  // claimed ten times too much for every request).
  const bool sent_whole = facts.previous_response_id.empty();
  claim.Done(sent_whole ? outcome.prompt_tokens : -1, outcome.output_tokens, outcome.completed);
  // How many tokens the prompt's chunks hold, for the replicas' caches counted in chunks (a
  // prefix-aware policy's index: only such policies hash the prompt, as admission does).
  if (sent_whole && outcome.usage_expected && outcome.prompt_tokens > 0 &&
      facts.prompt_hashes.size() >= 4) {
    model.WithRouter([&](ModelRouter& r) {
      r.LearnChunkTokens(outcome.prompt_tokens, facts.prompt_hashes.size());
    });
  }
  if (traffic && outcome.usage_expected) {
    RecordTraffic(*traffic, started, outcome, relayed.token_events, facts, model.name());
  } else if (traffic && relayed.client_cut.cut) {
    RecordCutTraffic(*traffic, started, relayed.client_cut, facts, model.name());
  }
  // A server that does not know the name the replicas were said to serve has unloaded it (or
  // restarted): its names are read again now rather than within 30 s.
  if (status == 404 && !facts.model.empty() && facts.model != model.name() &&
      model.served_names().Contains(facts.model))
    asio::co_spawn(*shards_[shard], RelearnServedNames(shard), asio::detached);
  // Peers count this request in flight until they hear it ended: the conversation's next turn,
  // through another gateway, must not find its home busy with it (with a low overflow limit it
  // went elsewhere).
  peer_sync_->Nudge();
}

void Gateway::NoteUnreachable(ModelState& model, int replica, bool refused) {
  bool marked_down = false;
  const bool others = MarkUnreachable(model, replica, refused, &marked_down);
  // Said by the request that took it out of service, not by each one caught with it.
  spdlog::log(marked_down ? spdlog::level::warn : spdlog::level::debug,
              "model {}: replica {} ({}) did not answer; {}", model.name(), replica,
              model.ReplicaUrl(replica), others ? "trying another" : "no other healthy replica");
}

// The prompt's size from its JSON's, where no count of its tokens came.
static int GuessedPromptTokens(const BodyFacts& facts) {
  return static_cast<int>(
      std::min<size_t>(facts.prompt_bytes / kPromptBytesPerToken, std::numeric_limits<int>::max()));
}

// A request's line in the traffic log: its prompt's size as the replica counted it (`counted` > 0),
// else `guessed`.
static TrafficLog::Entry TrafficEntry(double ended_s, const BodyFacts& facts,
                                      std::string_view model, int counted, int guessed,
                                      int output) {
  TrafficLog::Entry entry;
  entry.ended_s = ended_s;
  entry.model = model;
  entry.chunks = facts.prompt_hashes;
  entry.prompt_bytes = facts.prompt_bytes;
  entry.continues_stored = !facts.previous_response_id.empty();
  entry.input_counted = counted > 0;
  entry.input_tokens = counted > 0 ? counted : guessed;
  entry.output_tokens = output;
  return entry;
}

void Gateway::RecordTraffic(TrafficLog::Turn& turn, double started, const RequestOutcome& outcome,
                            int token_events, const BodyFacts& facts, std::string_view model) {
  const int guessed =
      outcome.prompt_tokens_guess > 0 ? outcome.prompt_tokens_guess : GuessedPromptTokens(facts);
  // A stream without usage came whole: each token event a token at least (found by review: such
  // streams, the OpenAI SDK's default, were logged with no reply at all).
  const int output = outcome.output_tokens >= 0 ? outcome.output_tokens : token_events;
  traffic_log_->Record(turn, TrafficEntry(started + std::max(0.0, outcome.duration_s), facts, model,
                                          outcome.prompt_tokens, guessed, output));
}

void Gateway::RecordCutTraffic(TrafficLog::Turn& turn, double started,
                               const Relayed::ClientCut& cut, const BodyFacts& facts,
                               std::string_view model) {
  const TrafficLog::Entry entry =
      TrafficEntry(started + std::max(0.0, cut.duration_s), facts, model, cut.prompt_tokens,
                   cut.prompt_guess, cut.output_tokens);
  // A turn on a stored response carries only its new part: a size guessed from it would be far
  // short of the conversation the replica read, so such a turn is left out (found by review).
  if (!entry.input_counted && entry.continues_stored) return;
  traffic_log_->Record(turn, entry);
}

void Gateway::RecordEnded(ModelState& model, const RouteDecision& decision, std::string_view key,
                          bool generation, bool name_by_reply, uint64_t reply_hash,
                          const RequestOutcome& outcome, int status,
                          const ResponseObserver& observer) {
  const bool delegated = decision.replica < 0;
  std::string continued;      // the key of the later turns, homed here: the peers learn it at once
  double history_missed = 0;  // the share read, when low enough to say so
  const bool never_cached = model.WithRouter([&](ModelRouter& r) {
    if (delegated) {
      r.FinishDelegated(outcome, Now(), key);
    } else {
      const std::string_view turn_of = decision.key_left_alone ? std::string_view() : key;
      r.Finish(decision.replica, outcome, Now(), turn_of, /*ends_opening=*/name_by_reply);
      // A request the replica refused (Claude Code's first try with too large a max_tokens,
      // sent again at once; or an error event in a 200 stream) or broke off (the client sends
      // it again) is no turn of its own.
      // Nor is a request that generates nothing (a stored response read or deleted).
      if (generation && status / 100 == 2 && !outcome.broke_off && !observer.error_event())
        r.CountServedTurn(decision, turn_of);
      // A reply the client cut short counts too: it keeps, and sends back, what it got of it.
      // One the replica broke off does not: its client sends the request again.
      if (reply_hash != 0 && status / 100 == 2 && !observer.error_event() && !outcome.broke_off) {
        const int64_t context = outcome.ContextAfter();
        continued = ContinuedOpeningKey(key, reply_hash);
        r.ContinueAs(key, continued, decision.replica, context, Now(), reply_hash,
                     /*opened_key=*/!decision.key_left_alone);
      } else if (name_by_reply && !decision.key_left_alone) {
        r.AbandonOpening(key, Now());
      }
    }
    const ReplicaCounters& c = delegated ? r.delegated() : r.counters(decision.replica);
    if (!delegated) history_missed = HistoryMissed(r, decision.replica);
    return c.cache_reported == 0 && c.cache_unreported >= kCacheUnreportedWarning;
  });
  if (history_missed && model.FirstHistoryMissed()) {
    spdlog::warn(
        "model {}: turns sent back to the replica that served their conversation's previous "
        "turn read only {:.0f} % of that turn's prompt from its prefix cache, with room in the "
        "cache: the prompt's head changes from turn to turn, which no routing mends (with Claude "
        "Code: an attribution header on a vLLM before March 2026, or system messages vLLM "
        "merges into the system prompt, which inline_system_as_user mends; see the README's "
        "quick start with real vLLM)",
        model.name(), 100 * history_missed);
  }
  if (!continued.empty()) peer_sync_->Nudge();
  // A Responses API request continuing this response follows its conversation.
  if (!key.empty() && !observer.response_id().empty())
    model.RememberResponse(
        observer.response_id(), continued.empty() ? key : continued, decision.replica,
        [this] { return Now(); }, /*news=*/true, outcome.ContextAfter());
  if (never_cached && model.FirstCacheUnreported()) {
    spdlog::warn(
        "model {}: {} has answered {} requests without saying how many prompt tokens it read "
        "from its prefix cache (all counted as computed): start vLLM with "
        "--enable-prompt-tokens-details; on /v1/messages, older vLLM versions report no cache "
        "reads at all",
        model.name(), delegated ? model.ReplicaUrl(0) : model.ReplicaUrl(decision.replica),
        kCacheUnreportedWarning);
  }
}

std::optional<HttpResponse> Gateway::AnswerNotRetried(const HttpRequest& request, ErrorShape shape,
                                                      ModelState& model, int replica,
                                                      const Upstream& upstream,
                                                      const UpstreamUrl& url) {
  if (upstream.stopped) {
    model.WithRouter([&](ModelRouter& r) {
      replica < 0 ? r.FinishDelegated({}, Now()) : r.Finish(replica, {}, Now());
    });
    HttpResponse response = Error(request, shape, 503,
                                  "the gateway stopped (its drain's time ran out) before the "
                                  "replica answered this request; send it again",
                                  ErrorCode::kGatewayStopping);
    response.set(http::field::retry_after, "1");
    return response;
  }
  std::optional<HttpResponse> response;
  if (!upstream.malformed.empty()) {
    spdlog::warn("model {}: {} answered with no valid HTTP response: {}", model.name(),
                 url.ToString(), upstream.malformed);
    response =
        Error(request, shape, 502,
              fmt::format("the replica's response was not valid HTTP ({})", upstream.malformed));
  } else if (upstream.timed_out) {
    head_timeouts_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("model {}: {} sent no response head in {} s (read_timeout_s)", model.name(),
                 url.ToString(), config_.read_timeout_s);
    response = Error(request, shape, 504,
                     fmt::format("the replica sent no response in {} s (the gateway's "
                                 "read_timeout_s)",
                                 config_.read_timeout_s));
  } else if (upstream.local_failure) {
    // The replica keeps its health and its conversations: the gateway itself is short.
    local_failures_.fetch_add(1, std::memory_order_relaxed);
    WarnShortOfResources(upstream.local_failure.message());
    response = Error(request, shape, 503,
                     fmt::format("the gateway cannot open a connection to a replica now ({})",
                                 upstream.local_failure.message()),
                     ErrorCode::kGatewayResources);
    response->set(http::field::retry_after, "1");
  }
  if (response) {
    model.WithRouter([&](ModelRouter& r) {
      replica < 0 ? r.FailDelegated() : r.Fail(replica, /*replica_down=*/false);
    });
    // The replica has the request (or answered it with something broken): the official OpenAI
    // and Anthropic clients send it again on a 5xx unless told not to (found by review: a hung
    // replica got one request three times).
    if (!upstream.local_failure) response->set(kShouldRetry, "false");
  }
  return response;
}

bool Gateway::MarkUnreachable(ModelState& model, int replica, bool refused, bool* marked_down_out) {
  // Marked unhealthy until its next health check says otherwise, with the other ranks of its
  // server (data-parallel layout) when it refused the connection: a server that is down has
  // none to give (one that is slow to accept may have).
  bool marked_down = false;  // by this request (the health checks had it in service)
  const bool others = model.WithRouter([&](ModelRouter& r) {
    marked_down = r.healthy(replica);
    r.Fail(replica);
    for (int i = 0; refused && i < r.num_replicas(); ++i) {
      if (i != replica && model.target(i).pool == model.target(replica).pool)
        r.SetHealthy(i, false);
    }
    for (int i = 0; i < r.num_replicas(); ++i) {
      if (r.load(i).healthy) return true;
    }
    return false;
  });
  if (marked_down_out) *marked_down_out = marked_down;
  if (!marked_down) return others;
  if (refused && !model.HealthProblemOf(replica)) {
    model.SetHealthProblem(
        model.ServerOf(replica),
        ModelState::HealthProblem{SystemUnixTime(), "refused a request's connection"});
  }
  model.changes().Note(SystemUnixTime(),
                       fmt::format("{} down: {}",
                                   refused ? model.ReplicasOfServer(model.ServerOf(replica))
                                           : fmt::format("replica {}", replica),
                                   refused ? "refused a connection" : "a connection failed"),
                       "a request");
  return others;
}

HttpResponse Gateway::NoReplicaLeft(const HttpRequest& request, ErrorShape shape, ModelState& model,
                                    bool last_dropped) {
  // A replica that took the request and closed without answering is a bad gateway (as nginx
  // says); with none left to try, or none healthy to begin with, the model is unavailable.
  const int draining = HealthyDraining(model);
  HttpResponse response =
      last_dropped
          ? Error(request, shape, 502,
                  fmt::format("a replica of model '{}' closed the connection without answering, "
                              "and so did the one it was sent to again, or none was left{}",
                              model.name(),
                              draining > 0 ? fmt::format(" ({} healthy one(s) draining)", draining)
                                           : std::string()))
          : Error(request, shape, 503, NoReplicaMessage(model, draining));
  // A replica comes back at a health check, the next within the interval; from a drain, when an
  // operator says so: no time to give.
  if (!last_dropped && draining == 0) {
    const int seconds = std::max(1, static_cast<int>(std::ceil(model.scrape_interval_s())));
    response.set(http::field::retry_after, std::to_string(seconds));
  }
  // Not sent on to every replica in turn by the gateway, nor by the client's own retries.
  if (last_dropped) response.set(kShouldRetry, "false");
  return response;
}

// Holds the request while admission keeps it out. The 1 s ticks look for what the admission queue
// cannot see: a client that went away (a held request has no upstream for the hang-up watch to
// close), a replica the scrape lost, affinity switched off.
asio::awaitable<Gateway::AdmissionWait> Gateway::AwaitAdmission(
    ModelState& model, int replica, uint64_t id, std::span<const uint64_t> blocks,
    std::string_view key, bool reserves, HangupWatch& watch, HeldFor held_for,
    std::string_view continues) {
  const auto executor = co_await asio::this_coro::executor;
  const std::shared_ptr<AdmissionWaiter> waiter =
      model.Admit(replica, id, blocks, key, reserves, executor, continues, held_for.waited_s);
  if (!waiter) co_return AdmissionWait::kGo;
  // Routed again when drained; one sent to a draining replica in an outage, when another replica
  // is back in service while that one still drains.
  const auto drained = [&] {
    if (held_for.needs_home) return false;
    return model.WithRouter([&](ModelRouter& r) {
      return r.draining(replica) && (!held_for.to_draining || r.AnyInService(held_for.avoided));
    });
  };
  while (!waiter->released) {
    waiter->timer.expires_after(std::chrono::seconds(1));
    co_await waiter->timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (waiter->released) continue;
    // A replica drained meanwhile takes no held request either: it is routed again.
    const bool gone = watch.hung_up(), lost = model.lost(replica), moved = drained();
    const bool stopping =
        std::chrono::steady_clock::now().time_since_epoch().count() >= give_up_held_at_;
    if (gone || lost || moved || stopping) {
      if (!model.CancelHeld(id)) model.AdmissionDone(id);  // let in just now: give the room back
      if (gone) co_return AdmissionWait::kClientGone;
      if (lost) co_return AdmissionWait::kRouteAgain;
      co_return moved ? AdmissionWait::kDrained : AdmissionWait::kStopping;
    }
    // Affinity was switched off, and vLLM's balancer takes the server's requests without holding
    // them: let go (to its replica still), not left behind the ones that came later.
    if (EngineBalances(model)) {
      model.CancelHeld(id);  // if let in just now, its room is given back when it ends
      co_return AdmissionWait::kGo;
    }
  }
  // Let in by the room a lost replica's failed requests freed (held ones follow one another
  // there, each failing at once), or a drained one's last requests: routed again, not sent there.
  if (!held_for.needs_home && (model.lost(replica) || !model.WithRouter([&](ModelRouter& r) {
        return r.healthy(replica);
      }))) {
    model.AdmissionDone(id);
    co_return AdmissionWait::kRouteAgain;
  }
  if (drained()) {
    model.AdmissionDone(id);
    co_return AdmissionWait::kDrained;
  }
  co_return AdmissionWait::kGo;
}

bool Gateway::EngineBalances(ModelState& model) {
  if (!model.config().data_parallel() || !model.engine_balances_when_off()) return false;
  return model.WithRouter([](ModelRouter& r) {
    if (r.settings().affinity) return false;
    // vLLM's balancer knows nothing of a drain: while a rank drains, the gateway places by load.
    for (int i = 0; i < r.num_replicas(); ++i) {
      if (r.draining(i)) return false;
    }
    return true;
  });
}

}  // namespace warden
