// The routing policy interface: given the replicas' loads and the request's conversation, pick a
// replica. One implementation per file (seed_policy.h, ...), chosen by name (policy_factory.h).
// Policies are pure: no I/O, time passed in. The same objects run in the gateway and in the lab.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "core/routing/session_table.h"

namespace warden {

// What a policy knows about one replica.
struct ReplicaLoad {
  bool healthy = true;           // in service: it passes its health checks and is not being drained
  int in_flight = 0;             // requests the router sent there and that have not ended: exact
  int peer_in_flight = 0;        // the same, of the peer gateways, as of their last messages
  int running = 0;               // scraped from the engine's /metrics (lags by the scrape interval)
  int waiting = 0;               // scraped
  double kv_cache_usage = 0;     // scraped, 0..1
  int active_conversations = 0;  // conversations homed there and not idle
  // The KV cache's size (scraped from vllm:cache_config_info; 0: not published) in the blocks of
  // RouteRequest::prefix_hashes: 16 tokens each, whatever the engine's block size, unless the
  // router has learned that they hold another number (ModelRouter::LearnChunkTokens).
  int kv_capacity_blocks = 0;
};

// The largest body a side request under a conversation's key has (RouteRequest::asked_model):
// Claude Code's own system prompt and tools alone take about 80 KB of every turn.
inline constexpr uint32_t kMostSideRequestBytes = 32 * 1024;

// Whether a request's JSON body may offer tools: a quoted "tools" or "functions" anywhere in it,
// a key or not (so that a turn is never taken for a side request for want of them).
// (memmem: std::string_view::find stops at every quote of the JSON text, 20 times slower.)
inline bool OffersTools(std::string_view body) {
  const auto has = [&](std::string_view word) {
    return ::memmem(body.data(), body.size(), word.data(), word.size()) != nullptr;
  };
  return has("\"tools\"") || has("\"functions\"");
}

enum class RouteKind : uint8_t {
  kNew,       // a new conversation, placed and homed
  kSticky,    // to the conversation's home
  kOverflow,  // away from a home that is over the overflow limit; the home does not change
  kRehome,    // the home was unhealthy: a new home
  kBalanced,  // no conversation to follow (no key, auxiliary request, or affinity off)
};
// The kind as x-warden-route, the access log and the metrics' route label say it.
std::string_view RouteKindName(RouteKind kind);

// What an operator sets per model (config, PATCH, SIGHUP) that every policy reads.
struct RoutingSettings {
  bool affinity = true;
  int overflow_limit = 8;  // a home with this many requests in flight sends the next one elsewhere
};

// What a request makes of replicas whose engines sleep, with the model's idle_sleep on (vLLM's
// --sleep-idle-ttl: an idle server sleeps, at level 1, which discards its KV cache, and wakes at
// its next request, which takes seconds). Without idle_sleep a sleeping replica is out of service.
enum class SleepingReplicas : uint8_t {
  kLikeAnyOther,
  // A generation request: sleeping replicas, its conversation's home included (what that cached
  // went with the sleep), are passed over while an awake one in service has room for it (fewer
  // requests in flight than the overflow limit, and, where the KV cache's size is published, its
  // active conversations' context and this prompt within it). Else one is woken.
  kWakeOnlyWhenNeeded,
  // Not worth a wake (a count_tokens): sleeping replicas, waking ones too, are passed over while
  // another is in service, however loaded.
  kPassOver,
};

// What a policy knows of the request it places.
struct RouteRequest {
  bool sticky = false;  // has an affinity key and is not an auxiliary request
  // The conversation's entry when it is known (nullptr for a new or keyless request).
  const SessionTable::Entry* session = nullptr;
  // Chained hashes of the prompt's full blocks, for prefix-aware policies; may be empty.
  std::span<const uint64_t> prefix_hashes = {};
  int prompt_tokens = 0;  // 0 when unknown
  uint64_t key_hash = 0;  // a hash of the affinity key, for hashing policies
  // The conversation's first turn, keyed by its opening: placed as a new conversation even when
  // the key is known (identical openings are separate conversations until one of them continues;
  // the key's home becomes wherever this one goes).
  bool opens_conversation = false;
  // Placed as a new conversation even when the key is known: the retry of a new conversation
  // whose replica failed before it started.
  bool place_as_new = false;
  // Only the conversation's home can serve it (a request about a response stored there, on the
  // Responses API): it goes there while the home is healthy, draining or past the overflow limit.
  bool needs_home = false;
  // The replica that stored the response the request is about, when known: it goes there (as
  // with needs_home) whatever the conversation's home is now.
  int stored_on = -1;
  // A turn continuing that response (not a read or delete of it): its conversation's cache is
  // where it goes, which becomes its home (unless draining there).
  bool follows_stored = false;
  // Replicas not to send it to (the server that dropped this request once, those without the
  // adapter it names): passed over as if unhealthy; if its home is among them, the conversation's
  // home stays (ModelRouter::Route).
  std::span<const int> avoid = {};
  // Those of `avoid` that dropped this request (took it and closed unanswered): out of service
  // for it, so that a draining replica may take it when no other is left (RouteDecision::
  // to_draining), where a replica avoided for want of an adapter leaves the drain as it is.
  std::span<const int> dropped_by = {};
  // How replicas whose engines sleep (vLLM's sleep mode, scraped) are taken.
  SleepingReplicas sleeping = SleepingReplicas::kLikeAnyOther;
  // The caller counts the request among the replica's requests (and as sticky, new, ...) with
  // ModelRouter::Taken once the replica has taken it, or not at all if it goes elsewhere first
  // (Unsent, NotTaken): a gateway whose counters must only go up. Otherwise it is counted as it
  // is routed.
  bool count_when_taken = false;
  // A hash of the model name the client asked for (0: unknown) and the body's size: a request
  // under a conversation's key asking for another model than its latest turn with much less of a
  // body is a side request, not a turn of it (ModelRouter::Route, RouteDecision::side_request).
  uint32_t asked_model = 0;
  uint32_t body_bytes = 0;
  // The body's JSON text (empty: not known), looked through only for a request that may be a
  // side request (OffersTools): Claude Code's since 2.1.3xx come on the conversation's own model,
  // but never with its tools, which every turn of it sends. Only under Claude Code's keys (its
  // session header, metadata.user_id): another client's new chat under the same key is no side
  // request.
  std::string_view body = {};
  bool claude_code_key = false;
  // For a policy that follows each request to its end (RoutingPolicy::tracks_requests): the number
  // ModelRouter::Route gave it (RouteDecision::request_id), kept when it is routed again; 0 for a
  // request routed the first time.
  uint64_t request_id = 0;
};

// A policy's answer: where the request goes, and what that does to its conversation's home.
struct RouteDecision {
  int replica = -1;  // -1: no healthy replica
  RouteKind kind = RouteKind::kBalanced;
  int new_home = -1;  // >= 0: the conversation's home becomes this replica
  // Set by ModelRouter::Route for a later turn of a known conversation: the replica that served
  // its previous turn (-1: none, or not a follow-up turn). Counted by ModelRouter::CountServedTurn.
  int previous_replica = -1;
  // Set by ModelRouter::Route when a conversation opened under the key of one handed over to its
  // later turns: that entry was left alone, and the request's end (Finish, CountServedTurn) must
  // not touch it either.
  bool key_left_alone = false;
  // Set by ModelRouter::Route: no replica was in service, so the request went to a draining one.
  bool to_draining = false;
  // Set by ModelRouter::Route: the request came under a conversation's key but is no turn of it (a
  // title or a quota probe on a small model): placed as the conversation's turns are, it touched
  // none of the conversation's records, nor must its end (RouteRequest::sticky is to be cleared).
  bool side_request = false;
  // Set by ModelRouter::Route when its policy follows requests: the request's number, for
  // ModelRouter::FirstToken and ModelRouter::Ended, and for its next routing (RouteRequest::
  // request_id). 0 otherwise.
  uint64_t request_id = 0;
};

// What each replica's prefix cache holds, asked of the engine itself: the lab's engines answer
// it (vLLM's KV events would tell a gateway the same, with a tokenizer to hash its prompts).
class CacheView {
 public:
  virtual ~CacheView() = default;
  // Leading blocks of `hashes` cached on `replica` now.
  virtual int CachedBlocks(int replica, std::span<const uint64_t> hashes) const = 0;
};

// What a policy sees when it places a request: the replicas' loads, the settings, the time.
struct RoutingView {
  std::span<const ReplicaLoad> replicas;
  const RoutingSettings& settings;
  double now;
  uint64_t scrape_epoch = 0;  // changes whenever scraped loads were updated
  // Tokens each of RouteRequest::prefix_hashes stands for: 16 (a KV block), or what the router
  // learned the gateway's chunks of prompt text hold (ModelRouter::LearnChunkTokens).
  double tokens_per_block = 16;
  const CacheView* cache = nullptr;  // the engines' own caches, where known (the lab)
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  // The policy's name, as configs and reports spell it.
  virtual std::string_view name() const = 0;
  // Picks a replica. Called with the loads as they are before this request is counted.
  virtual RouteDecision Route(const RouteRequest& request, const RoutingView& view) = 0;
  // Whether the policy follows each request from its routing to its end (Dynamo's count of the
  // blocks and prefill in flight on each replica): each request then has a
  // RouteRequest::request_id, and its first token and its end are told.
  virtual bool tracks_requests() const { return false; }
  // The router placed the request itself, without asking the policy: only `replica` can answer it
  // (it stored the response the request is about).
  virtual void OnPlacedByRouter(const RouteRequest& request, int replica, const RoutingView& view) {
  }
  // The request's first token came (its prefill is done).
  virtual void OnFirstToken(uint64_t request_id, double now) {}
  // The request ended (answered, failed or given up), wherever it was last routed. An unknown
  // number is ignored.
  virtual void OnRequestDone(uint64_t request_id, double now) {}
  // Whether the policy reads RouteRequest::prefix_hashes (the gateway hashes prompts only then).
  virtual bool uses_prefix() const { return false; }
  // How often the policy wants the replicas' scraped loads refreshed (0: the driver's default).
  virtual double refresh_interval_s() const { return 0; }
  // Whether the policy stands for a balancer inside the serving engine (vLLM's own), which picks
  // when a request reaches the engine's API server, not when the client sends it: a driver that
  // models the network's delay (the lab) routes such a request on its arrival.
  virtual bool routes_on_arrival() const { return false; }
  // Several gateways in front of the same replicas: this one's share of them (`count` from
  // `first`), preferred among equally loaded replicas, so that gateways placing at the same
  // moment choose apart (default: nothing, for policies without such a choice).
  virtual void SetGatewayShare(int first, int count) {}
};

}  // namespace warden
