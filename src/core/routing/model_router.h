// One model's routing state: its replicas' loads and counters, its conversations, its policy and
// settings. The gateway keeps one per model (behind a lock); the lab drives the same class with
// simulated time. Not thread-safe; time is passed in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/routing/admission_queue.h"
#include "core/routing/policy.h"
#include "core/routing/session_table.h"
#include "core/routing/token_history.h"
#include "util/histogram.h"

namespace warden {

// What the engine's /metrics said at the last scrape.
struct ScrapedMetrics {
  int running = 0;
  int waiting = 0;
  double kv_cache_usage = 0;
  double prefix_cache_queries = 0;  // counters, cumulative since the engine started
  double prefix_cache_hits = 0;
  // With a KV connector (vLLM's CPU offloading): the tokens looked up past the GPU's hit, and of
  // them those read back (vllm:external_prefix_cache_*); queries < 0 when not published.
  double external_prefix_cache_queries = -1;
  double external_prefix_cache_hits = 0;
  int block_size = 0;      // from vllm:cache_config_info; 0 when not published
  int num_gpu_blocks = 0;  // as published: vLLM keeps one of them aside (its null block)
  // vllm:cache_config_info's kv_cache_size_tokens (vLLM since 2026): the capacity in tokens, which
  // for hybrid models (several KV cache groups) block_size × num_gpu_blocks overstates; 0 when
  // not published.
  int64_t kv_size_tokens = 0;
  // GiB of host memory the replica keeps prompts' KV blocks in (vLLM's --kv-offloading-size, a
  // label of vllm:cache_config_info, per engine); 0 without offloading or when not published.
  double kv_offloading_gib = 0;
  // vllm:cache_config_info's enable_prefix_caching: off, no routing makes a turn read its
  // history from the cache. Empty when not published.
  std::optional<bool> prefix_caching = std::nullopt;
  // vllm:engine_sleep_state{sleep_state="awake"} 0 (vLLM's sleep mode, POST /sleep): the engine
  // holds neither weights nor cache until POST /wake_up. Empty when not published.
  std::optional<bool> asleep = std::nullopt;
  // Work its engine has done: vllm:prompt_tokens_total + generation_tokens_total +
  // iteration_tokens_total's count (steps), those published; -1 when none is. It moves while the
  // engine steps (StallWatch).
  double engine_work = -1;

  // The blocks requests can hold: vLLM's block 0 is a placeholder no request gets (its KV-cache
  // use is counted out of the rest too).
  int usable_blocks() const { return std::max(0, num_gpu_blocks - 1); }
  // Tokens of KV cache requests can hold (0 when not published).
  int64_t kv_cache_tokens() const {
    return kv_size_tokens > 0 ? kv_size_tokens : int64_t{block_size} * usable_blocks();
  }
};

// Counters of one replica since the router started.
struct ReplicaCounters {
  int64_t requests = 0;
  int64_t sticky = 0;
  int64_t overflow = 0;
  int64_t new_conversations = 0;
  int64_t rehomed = 0;
  int64_t balanced = 0;
  int64_t failed = 0;  // of the requests, those that got no response from the replica
  // Answers with a server error (5xx) or 429 (too many requests): of the requests when relayed;
  // when sent on to another replica (503 and 429: it did not take them), not among the requests.
  int64_t error_answers = 0;
  // Of the requests, those the replica answered with a client error (4xx but 429): a prompt past
  // its context, a path it does not serve. Relayed as they are.
  int64_t client_error_answers = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t computed_prompt_tokens = 0;
  int64_t usage_unknown = 0;  // finished requests whose usage was not reported
  // Generation requests cut short (their client left, their replica broke off) before any usage
  // came: their prompt tokens are counted nowhere (neither cached nor computed).
  int64_t cut_without_usage = 0;
  // Finished requests whose prompt tokens were reported with how many came from the cache, and
  // without it (counted as computed). vLLM leaves the cached count out when it is 0, and always
  // without --enable-prompt-tokens-details (and on an older vLLM's /v1/messages).
  int64_t cache_reported = 0;
  int64_t cache_unreported = 0;
  // Whether the replica has reported a cached count in each API's usage: from then on, one left
  // out of that API's usage is 0. Apart, as an older vLLM reports them in OpenAI's usage only.
  bool openai_reports_cache = false;
  bool anthropic_reports_cache = false;
  // Turns that came back to the replica their conversation's previous turn ended on, with a
  // longer prompt: the previous prompt's tokens (full KV blocks of them) they could have read from
  // that replica's prefix cache, and how many they did. Far apart while the cache has room, the
  // prompt's head changes from turn to turn, which no routing mends (README: Claude Code against
  // vLLM).
  int64_t returning_turns = 0;
  int64_t history_tokens = 0;
  int64_t history_cached_tokens = 0;
  Histogram ttft{kTtftBuckets};
  // Generation requests answered whole (2xx): from their arrival to their response's end, and
  // the tokens they generated as their usage reported them.
  Histogram duration{kRequestDurationBuckets};
  int64_t output_tokens = 0;
};

// How a request routed to a replica ended.
struct RequestOutcome {
  int prompt_tokens = -1;        // -1: usage not reported
  int cached_tokens = -1;        // -1: not reported (the prompt then counts as computed)
  double ttft_s = -1;            // -1: unknown (no token arrived)
  int output_tokens = -1;        // -1: not reported
  int sequences = 1;             // asked for ("n"): the output is theirs summed
  bool completed = false;        // the response ended whole, with a 2xx status
  bool anthropic_usage = false;  // the usage is Anthropic's (/v1/messages), not OpenAI's
  bool broke_off = false;  // the replica's response ended before its framing said (counted failed)
  bool error_answer = false;  // the replica answered 5xx or 429 (ReplicaCounters::error_answers)
  bool client_error_answer = false;  // 4xx but 429 (ReplicaCounters::client_error_answers)
  // Whether the response should have carried usage (a generation request's whole 2xx answer):
  // only then does missing usage count as usage_unknown. Not for a request that got no answer.
  bool usage_expected = false;
  // A generation's 2xx answer cut short before its usage (ReplicaCounters::cut_without_usage).
  bool cut_without_usage = false;
  double duration_s = -1;  // arrival to the response's end; -1: not a generation answered whole

  // The conversation's context after this turn, as reported: its prompt and one sequence's
  // output (the client goes on with one of n).
  int64_t ContextAfter() const {
    return int64_t{std::max(0, prompt_tokens)} +
           std::max(0, output_tokens) / std::max(1, sequences);
  }
  // With usage unknown (an OpenAI stream that did not ask for it): the prompt's size guessed from
  // the request's (about 4 bytes a token), for the conversation's place in the working set only.
  int prompt_tokens_guess = -1;
};

// What an engine could have reported for one request: prompt and output within its context
// length (`max_model_len`, 0 when not known: then kMaxBelievedTokens), the cached share within
// the prompt; with `sequences` asked for (n > 1) the output is their sum, so within as many
// lengths. Counts past that (a broken or hostile replica's) are taken as not reported, so that
// they skew no counter, working set or admission estimate; a cached count past the prompt is
// cut to it.
inline constexpr int kMaxBelievedTokens = 1 << 24;
void DropImplausibleUsage(RequestOutcome* outcome, int64_t max_model_len, int sequences = 1);

// Admission's first estimates, before usage is reported: tokens per block of the prompt hashes (the
// gateway's 64-byte chunks, the engine's 16-token blocks: both about 16 tokens), and the reply's
// length (an agent's max_tokens, 32,000 for Claude Code, says little about it).
inline constexpr double kAdmissionBlockTokens = 16;
inline constexpr double kAdmissionReplyTokens = 512;

struct ModelRouterOptions {
  RoutingSettings settings;
  bool overflow_limit_auto = true;
  size_t max_sessions = 100000;
  double session_idle_timeout_s = 600;
  AdmissionOptions admission;
};

class ModelRouter {
 public:
  // REQUIRES: num_replicas >= 1, policy != nullptr.
  ModelRouter(int num_replicas, std::unique_ptr<RoutingPolicy> policy, ModelRouterOptions options);
  ModelRouter(const ModelRouter&) = delete;
  ModelRouter& operator=(const ModelRouter&) = delete;

  // Routes a request and counts it in flight on the chosen replica. `key` is the affinity key
  // (empty: none; ignored unless request.sticky); `request.session` is filled in here. When the
  // replicas left in service are down and healthy ones are draining, it
  // goes to one of those rather than nowhere (RouteDecision::to_draining: a drain plus a crash is
  // not meant as an outage); with every replica drained it goes nowhere. Returns replica -1 when
  // none can take it. A side request under a conversation's key (RouteDecision::side_request) is
  // placed as its turns are and recorded as none.
  RouteDecision Route(std::string_view key, RouteRequest request, double now);

  // A request routed to `replica` as `kind` with RouteRequest::count_when_taken was taken there
  // (answered with a response head, or failed): it counts among the replica's requests, and as
  // sticky, new, ... (counters that only go up).
  void Taken(int replica, RouteKind kind);
  // The request routed to `replica` (with RouteRequest::count_when_taken, not Taken) was refused
  // there before it ran (a 503 or 429) and goes elsewhere: it ends there, counted as the
  // replica's error answer and not as one of its requests (nor sticky, new, ...), which the
  // attempt that serves it counts. For
  // kRefusalCooldownS from `now`, requests whose home it is not (new conversations, overflow,
  // re-homes, all with affinity off) are placed elsewhere while another replica is in service: a
  // replica that refuses everything looks the least loaded, and would cost each a round trip.
  void NotTaken(int replica, double now);
  // A request routed to `replica` (with RouteRequest::count_when_taken, not Taken) that went
  // elsewhere without running there (admission held it, then it was routed again; or the server
  // lacked the stored response it is about): it ends there, and is not counted as one of the
  // replica's requests.
  void Unsent(int replica, double now);
  static constexpr double kRefusalCooldownS = 5;
  // A replica whose last kErrorStreak answers were all server errors (5xx, or 429), for more
  // than one conversation (a client's retries of one request that always fails are no sign of
  // the replica's), while its /health says it is fine, is failing: for kRefusalCooldownS after
  // each such answer, every request goes elsewhere while another replica is in service, its own
  // conversations' turns too (as overflow: their home stays). Left in place, it looks the least
  // loaded (it finishes everything at once), draws new conversations, and fails each of their
  // turns. Only a whole successful generation answer (RequestOutcome::usage_expected) ends a
  // streak: a stream's 200 head comes before the engine has done anything.
  static constexpr int kErrorStreak = 3;
  // Whether `replica` is failing so at `now`.
  bool failing(int replica, double now) const {
    return now - failing_at_[replica] < kRefusalCooldownS;
  }

  // The request routed to `replica` has ended with a response. `key` (the conversation's affinity
  // key, empty if none) records the conversation's context size for the working-set estimate, and
  // counts as a sighting of it (its idle time starts over; the peers are told of its context).
  // `ends_opening`: the request opened its conversation under `key` (RouteRequest::
  // opens_conversation), whose opening is then no longer in flight.
  void Finish(int replica, const RequestOutcome& outcome, double now, std::string_view key = {},
              bool ends_opening = false);
  // A whole answer's usage says its prompt, hashed into `chunks` blocks (RouteRequest::
  // prefix_hashes), held `prompt_tokens`: the gateway cuts the prompt's text, not its tokens, so
  // it learns how many a block holds (a running mean, each answer taken as at most twice or half
  // of it), and counts the replicas' KV caches (ReplicaLoad::kv_capacity_blocks) in such blocks.
  // Prompts of fewer than 4 blocks teach nothing. The lab, which hashes the engine's own 16-token
  // blocks, does not call it.
  void LearnChunkTokens(int prompt_tokens, size_t chunks);
  // The engines' caches as they are (RoutingView::cache; null: not known). Must outlive the router.
  void SetCacheView(const CacheView* cache) { cache_ = cache; }
  double chunk_tokens() const { return chunk_tokens_; }
  // A conversation opened under `first_turn_key` got no reply to be named by (an error, a client
  // that left): the key is handed over all the same, so that the next request opening the same
  // way opens a conversation of its own instead of following this one's replica.
  void AbandonOpening(std::string_view first_turn_key, double now);
  // For a policy that follows requests (RoutingPolicy::tracks_requests): the request numbered
  // `request_id` (RouteDecision::request_id; 0: none, ignored) had its first token, or ended
  // (answered or not, wherever it was last routed). Call Ended once per request, at its very end.
  void FirstToken(uint64_t request_id, double now);
  void Ended(uint64_t request_id, double now);
  // A turn of the conversation keyed `key` ended with no response (its last try failed, it was
  // never sent, or its client left first): it no longer counts as going on
  // (SessionTable::Entry::turn_in_flight). Unlike Finish, it is no sighting of the conversation.
  void EndUnanswered(std::string_view key);
  // A conversation keyed by its opening (`first_turn_key`) had its first turn answered on
  // `replica`, with `context_tokens` of prompt and reply: its later turns, keyed `key` (the opening
  // and the reply: ContinuedOpeningKey), are homed there. The first turn's entry is handed over
  // (retired: no longer active, still homed) unless an identical opening has been placed
  // elsewhere since.
  // `reply_hash`: the one `key` was made with (ContinuedOpeningKey), if known (else 0): a later
  // turn that comes under the first turn's key instead (its client changed the reply) then leaves
  // `key`, which no turn of it will come under, out of the active conversations.
  // `opened_key`: the request that ended opened `first_turn_key` (its RouteDecision did not leave
  // the key alone), so the entry is its conversation's; one that left it alone is another's.
  void ContinueAs(std::string_view first_turn_key, std::string_view key, int replica,
                  int64_t context_tokens, double now, uint64_t reply_hash = 0,
                  bool opened_key = true);
  // The request routed to `replica` got no response (it could not connect, or the connection
  // failed before a byte came back, or what came back was not HTTP): it is counted as failed
  // there (its routing stays counted: counters only go up, a retry counts again where it goes)
  // and, if `replica_down`, the replica is marked unhealthy.
  void Fail(int replica, bool replica_down = true);
  // A replica answered the turn `d` routed (`key`: the conversation's, as routed): counts it as a
  // follow-up turn if it is one, and whether it stayed on the replica of the previous turn. Only
  // answered turns count (a success, whole or stopped by its client): an attempt retried
  // elsewhere does not, nor a turn nothing served, nor one the replica refused or broke off.
  void CountServedTurn(const RouteDecision& d, std::string_view key);

  // Requests the router let the engines' own balancer place (a vLLM data-parallel server with
  // affinity off): in flight from StartDelegated, counted for the model (not for a replica) from
  // TakenDelegated, once the server answers or fails it (as Taken).
  void StartDelegated();
  void TakenDelegated();
  // `key`: the conversation's, if any: which replica served this turn is not known, so its next
  // turn counts as neither staying nor returning (it may have run anywhere).
  void FinishDelegated(const RequestOutcome& outcome, double now, std::string_view key = {});
  // A delegated request got no response: counted as failed.
  void FailDelegated();
  const ReplicaCounters& delegated() const { return delegated_; }
  int delegated_in_flight() const { return delegated_in_flight_; }

  // What the replica's health checks say (and requests that found it down). Routing uses a
  // replica that is healthy and not draining (ReplicaLoad::healthy).
  void SetHealthy(int replica, bool healthy);
  // An operator takes a replica out of service, before restarting it, say: it gets no more
  // requests (no new conversations, and the ones homed there move at their next turn, a re-home)
  // while the requests it has in flight finish. Its health is still checked and shown. Undone by
  // SetDraining(replica, false).
  void SetDraining(int replica, bool draining);
  bool healthy(int replica) const { return healthy_[replica]; }
  bool draining(int replica) const { return draining_[replica]; }
  // Whether a replica is healthy and not draining, other than those in `besides`: while none is,
  // requests go to draining replicas (RouteDecision::to_draining).
  bool AnyInService(std::span<const int> besides) const;
  // How many times a replica was drained or taken back: what a saved state must keep up with.
  uint64_t drain_changes() const { return drain_changes_; }
  // Takes the replica's scraped metrics. A KV cache published larger than before, or an engine
  // that restarted (its counters went back: admission's reservations there are given up), lets
  // held requests into admission; their ids are appended to `released` (null only when admission
  // holds nothing).
  void UpdateScrape(int replica, const ScrapedMetrics& metrics,
                    std::vector<uint64_t>* released = nullptr);

  void SetAffinity(bool on) { options_.settings.affinity = on; }
  // Routes the requests that come from now on with `policy` (an operator's change at runtime):
  // the session table keeps the homes, which the seed's rule and warden follow (a policy that
  // places by hash, prefix or load goes its own way), and a policy's own memory (what it placed
  // where) starts empty. REQUIRES: policy != nullptr.
  void SetPolicy(std::unique_ptr<RoutingPolicy> policy);
  // REQUIRES: limit >= 1.
  void SetOverflowLimit(int limit, bool is_auto);
  // The session table's bounds (SessionTable::SetLimits). REQUIRES: as there.
  void SetSessionLimits(size_t max_sessions, double idle_timeout_s) {
    options_.max_sessions = max_sessions;
    options_.session_idle_timeout_s = idle_timeout_s;
    sessions_.SetLimits(max_sessions, idle_timeout_s);
  }

  int num_replicas() const { return static_cast<int>(loads_.size()); }
  const ReplicaLoad& load(int replica) const { return loads_[replica]; }
  const ReplicaCounters& counters(int replica) const { return counters_[replica]; }
  // The returning turns (ReplicaCounters::returning_turns) on `replica` since the last window
  // taken, once there are at least `min_turns` of them; else nothing (turns 0). Judged by
  // window, a past overload's evictions do not colour the present.
  struct HistoryWindow {
    int64_t turns = 0, tokens = 0, cached_tokens = 0;
  };
  HistoryWindow TakeHistoryWindow(int replica, int64_t min_turns);
  const ScrapedMetrics& scraped(int replica) const { return scraped_[replica]; }
  // The replica's sleep, as last scraped, is no longer known (its server is down, or its metrics
  // unreadable: it may come back awake).
  void ForgetSleep(int replica) {
    scraped_[replica].asleep.reset();
    woken_at_[replica] = -std::numeric_limits<double>::infinity();
  }
  // A wake's longest wait: a server a request was sent to while asleep counts as awake this long
  // unless a scrape says it woke (TakenAsleep). Past it, one put to sleep by hand (which requests
  // do not wake) is taken for asleep again.
  static constexpr double kWakeGraceS = 60;
  // Whether routing takes `replica` for asleep: its last scrape says so, no request was sent to
  // its server within kWakeGraceS and none is in flight there, this gateway's or a peer's (such a
  // request wakes it; until a scrape says so, the server counts as awake, so that a burst does
  // not wake every sleeping server, nor its next turns leave it).
  bool TakenAsleep(int replica, double now) const;
  // Which replicas share a server (`server_of[replica]`, the ranks of one data-parallel vLLM):
  // they sleep and wake together. Default: each its own. REQUIRES: one entry per replica.
  void SetServers(std::span<const int> server_of);
  // Prefix-cache hit rate from the engine's counters since the router first saw them, across
  // the engine's restarts (what it counted before one is kept); -1 if none.
  double prefix_hit_rate(int replica) const;
  // Of the same prompt tokens, the share read back from a KV connector's cache (vLLM's CPU
  // offloading) since the gateway first read it: -1 when the engine publishes no such counters.
  double external_prefix_hit_rate(int replica) const;
  const RoutingSettings& settings() const { return options_.settings; }
  bool overflow_limit_auto() const { return options_.overflow_limit_auto; }
  const RoutingPolicy& policy() const { return *policy_; }
  // Admission at the gateway; its capacities follow the replicas' published KV-cache sizes.
  AdmissionQueue& admission() { return admission_; }
  const AdmissionQueue& admission() const { return admission_; }
  // When the conversation last ended a request on `replica` (-1: never, or unknown key).
  double LastActive(std::string_view key, int replica) const;
  const SessionTable& sessions() const { return sessions_; }
  // Several gateways in front of the same replicas: the homes of the conversations this one
  // routed after `since` (for its peers; at most `limit`, see SessionTable::ChangedSince), and the
  // homes its peers routed (homes outside this model's replicas are ignored). Returns how many
  // were taken. `to` and `from` number the peers (SessionTable::Learn): what peer `from` sent is
  // not sent back to it.
  std::vector<SessionTable::SharedHome> HomesRoutedSince(double since, size_t limit,
                                                         double* through,
                                                         int to = SessionTable::kHere) const {
    return sessions_.ChangedSince(since, limit, through, to);
  }
  std::vector<SessionTable::SharedHome> AllHomes() const { return sessions_.AllHomes(); }
  int LearnHomes(std::span<const SessionTable::SharedHome> homes, double now,
                 int from = SessionTable::kHere);
  // Hands over the first-turn entries of the keyless conversations among `homes` that are past
  // their first turn (as ContinueAs did where the reply was seen). LearnHomes does it for the homes
  // it is given; a caller learning homes in slices calls it again over all of them, since the
  // later key may come in another slice than the first.
  void HandOverFirstTurns(std::span<const SessionTable::SharedHome> homes, double now);
  // Conversations saved before a restart (SessionTable::Restore); returns how many were taken.
  size_t RestoreSessions(std::span<const SessionTable::SavedConversation> saved, double now);
  // The requests the peer gateways have in flight, per replica (summed over the peers).
  void SetPeerInFlight(std::span<const int> per_replica);
  // This gateway is the `rank`-th of `gateways` in front of the replicas: its policy prefers its
  // share of them (the rank-th of `gateways` equal parts) among equally loaded replicas.
  void SetGatewayRank(int rank, int gateways);
  // Prompt tokens per replica, cached and computed, over the last hour; one more slot, after the
  // replicas', for the requests the engine's own balancer placed (their replica is unknown).
  const TokenHistory& history() const { return history_; }
  // Prompt tokens counted before a restart (the state file's), at `at` on this router's clock, in
  // history slot `slot` (a replica, or num_replicas() for the engine's balancer's).
  void RestoreHistory(int slot, int64_t cached, int64_t computed, double at) {
    history_.Add(slot, cached, computed, at);
  }
  // Turns after a conversation's first, and how many of them went to the same replica as the
  // conversation's previous turn.
  int64_t follow_up_turns() const { return follow_up_turns_; }
  int64_t stayed_turns() const { return stayed_turns_; }
  // Requests sent to a draining replica because none was in service (Route).
  int64_t routed_to_draining() const { return routed_to_draining_; }

  // Conversations idle past the timeout stop counting as active. Route does this itself; a caller
  // that shows the counts between requests calls it first.
  void ExpireIdle(double now) { RefreshActive(now); }

 private:
  static bool IsSideRequest(const SessionTable::Entry& entry, const RouteRequest& request);
  // The policy's decision among the healthy draining replicas not in request.avoid, when none is
  // in service for the request and not because every replica is drained; replica -1 otherwise.
  // Homes no conversation there.
  RouteDecision RouteToDraining(const RouteRequest& request, const RoutingView& view);
  // A later turn came under a keyless conversation's first-turn key, handed over (its client
  // changed the reply): the later turns' key the reply named, if no turn has come under it, is
  // no conversation going on.
  void LeaveUnusedLaterKey(std::string_view first_turn_key, const SessionTable::Entry& first);
  // A turn came under a keyless conversation's later key: its first-turn entry, active again
  // because a turn came under it meanwhile (the client changed the reply, then changed it back),
  // stops counting.
  void LeaveFirstTurnKey(std::string_view key);
  // Hands a keyless conversation's first-turn entry over to the later key made with `reply_hash`
  // (retired; remembered as that key's while no other conversation that opened alike is handed
  // it too). `another`: a conversation's first turn ended (ContinueAs), so a second hand-over,
  // even to the same key, is another conversation's; else news of one already handed over (a
  // peer's, a state file's), which may come again.
  void HandOver(std::string_view first_turn_key, SessionTable::Entry* first, uint64_t reply_hash,
                bool another);
  // The policy's decision with request.avoid and `cooling` passed over as if unhealthy.
  RouteDecision RouteAvoiding(const RouteRequest& request, const RoutingView& view,
                              std::span<const int> cooling);
  // The replicas in service, not in request.avoid, to pass over: those but `home` that refused a
  // request within kRefusalCooldownS (NotTaken), and the sleeping ones as request.sleeping says;
  // none unless another replica stays in service.
  std::vector<int> PassedOver(const RouteRequest& request, int home, double now) const;
  // Whether an awake `replica` has room for `request` (SleepingReplicas::kWakeOnlyWhenNeeded).
  bool HasRoomFor(int replica, const RouteRequest& request) const;
  // A request went to `replica` while it was taken for asleep: its server wakes.
  void NoteWaking(int replica, double now);
  void RefreshActive(double now);

  std::unique_ptr<RoutingPolicy> policy_;
  // SetGatewayRank's share, for a policy set later (count -1: none given).
  int share_first_ = 0;
  int share_count_ = -1;
  uint64_t last_request_id_ = 0;
  ModelRouterOptions options_;
  SessionTable sessions_;
  std::vector<ReplicaLoad> loads_;
  std::vector<bool> healthy_;       // per replica: its health checks'
  std::vector<bool> draining_;      // per replica: taken out of service by an operator
  std::vector<double> refused_at_;  // per replica: when NotTaken last said it refused a request
  // Per replica: the server errors it answered since its last whole successful answer.
  struct ErrorStreak {
    int errors = 0;
    int sources = 0;        // changes of conversation among them (a keyless one counts anew)
    uint64_t last_key = 0;  // the last one's key's hash (0: none)
  };
  void CountErrorStreak(int replica, const RequestOutcome& outcome, std::string_view key,
                        double now);
  std::vector<ErrorStreak> error_streaks_;
  std::vector<double> failing_at_;  // per replica: its last error answer with a streak of them
  std::vector<double> woken_at_;    // per replica: when a request last woke its server (NoteWaking)
  std::vector<int> server_of_;      // per replica: its server (SetServers)
  std::vector<ReplicaCounters> counters_;
  std::vector<HistoryWindow> history_windows_;  // per replica
  std::vector<ScrapedMetrics> scraped_;
  double chunk_tokens_ = 16;  // LearnChunkTokens
  const CacheView* cache_ = nullptr;
  // loads_[replica].kv_capacity_blocks from its scraped KV cache and chunk_tokens_.
  void SetCapacityBlocks(int replica);
  AdmissionQueue admission_;
  // The engine's prefix-cache counters the hit rates count from: the first scrape seen, zero after
  // the engine restarted (its counters start again).
  std::vector<ScrapedMetrics> scrape_baseline_;
  std::vector<bool> has_baseline_;
  // What the engine counted since the baseline before each of its restarts.
  struct PrefixCounts {
    double queries = 0, hits = 0, external_hits = 0;
  };
  std::vector<PrefixCounts> before_restarts_;
  // The counts since the router first saw the engine's counters.
  PrefixCounts PrefixCountsOf(int replica) const;
  TokenHistory history_;
  ReplicaCounters delegated_;
  int delegated_in_flight_ = 0;
  uint64_t scrape_epoch_ = 0;
  int64_t follow_up_turns_ = 0;
  int64_t stayed_turns_ = 0;
  int64_t routed_to_draining_ = 0;
  uint64_t drain_changes_ = 0;
};

}  // namespace warden
