// `warden serve`: the gateway. Session-affine, load-aware routing of OpenAI- and Anthropic-style
// requests to a model's replicas, with streaming pass-through, health and metrics scraping, a JSON
// admin API and its own Prometheus metrics.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/object.hpp>
#include <chrono>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "core/routing/session_key.h"
#include "gateway/adapter_update.h"
#include "gateway/api_errors.h"
#include "gateway/client_table.h"
#include "gateway/config.h"
#include "gateway/model_state.h"
#include "gateway/replica_loss_watch.h"
#include "gateway/trace_export.h"
#include "gateway/traffic_log.h"
#include "net/api_keys.h"
#include "net/host_allowlist.h"
#include "net/http_server.h"
#include "net/upstream_get.h"
#include "util/status_counts.h"

namespace warden {

class HangupWatch;
class HangupWatchArmer;
class OffThreadPool;
struct DecodedBody;
class PeerSync;
class PrometheusWriter;
class RelayParser;
class ResponseObserver;
struct ModelSettingsChange;
struct ServedModelsWatch;

// Whether `path` is vLLM's POST /reset_prefix_cache, /reset_mm_cache or /reset_encoder_cache
// (Gateway::ResetCaches).
bool IsCacheReset(std::string_view path);
// Whether the request is vLLM's POST /sleep, POST /wake_up or GET /is_sleeping
// (Gateway::ControlSleep).
bool IsSleepControl(std::string_view path, boost::beast::http::verb method);
// Whether the request changes every server (a cache reset, a sleep or a wake): with an admin token
// configured it needs that token, not a client's key.
bool ChangesEveryServer(std::string_view path, boost::beast::http::verb method);
// Whether `path` (normalised) is one of vLLM's routes that control its engine rather than serve
// the model (/collective_rpc, /pause, /start_profile, /scale_elastic_ep, /server_info, ...; a
// server run with VLLM_SERVER_DEV_MODE, as sleeping needs, has several): passed on to a replica,
// but with an admin token configured only with that token, not a client's key.
bool ControlsTheEngine(std::string_view path);
struct EveryServerCall;

class Gateway {
 public:
  // REQUIRES: ValidateGatewayConfig(config) is empty; !shards.empty(). Each shard is an
  // io_context run by one thread (like an nginx worker): it accepts its share of the connections
  // (SO_REUSEPORT) and keeps its own upstream connections. The shards must outlive the gateway.
  Gateway(std::vector<asio::io_context*> shards, GatewayConfig config);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Binds the listener and starts scraping. Returns the bound port. Throws when it cannot bind.
  // With `passed_listeners` (listening sockets' descriptors, from socket activation or a
  // hand-over), the shards accept on those instead (each on at least one, each socket on at least
  // one shard), and the gateway owns them. The port returned is the first's.
  uint16_t Start(const std::vector<int>& passed_listeners = {});
  // Saves the state file, then stops accepting connections (both on a thread of their own, so
  // draining() turns true a little later); the requests on their way go on (see
  // HttpServer::Drain). Call Stop when draining() and open_connections() is
  // 0, or the drain time is up.
  // Requests admission still holds when `deadline` (the drain's end, when connections are cut)
  // is near are answered 503 with Retry-After: never sent to a replica, they are safe to send
  // again, to the gateway that takes over. Called again while draining, only a nearer deadline is
  // taken.
  void Drain(std::chrono::steady_clock::time_point deadline =
                 std::chrono::steady_clock::time_point::max());
  // Writes the state file (if any) on a thread of its own, then runs `saved` on the first shard
  // (at once when there is nothing to write); periodic saves go on. For a new gateway that is to
  // start from it (a hand-over): the shard goes on serving meanwhile.
  void SaveStateNow(std::function<void()> saved) { SaveState(SaveWhen::kNow, std::move(saved)); }
  // Writes the conversations to `path` for the gateway a hand-over starts (which restores them
  // whatever its config says of a state file: HandedOverStateFrom), on a thread of its own, then
  // runs `saved` on the first shard, told whether the file was written.
  void SaveStateForHandOver(std::string path, std::function<void(bool)> saved);
  // In a gateway a hand-over started, before Start: its conversations come from `path`
  // (HandOverStatePath's), not from its state file, and `path` is then removed with its folder.
  void HandedOverStateFrom(std::string path) { handed_over_state_ = std::move(path); }
  // Waits for a state (or hand-over) file being written. Call once the shards have stopped.
  void WaitForStateWriter();
  // Finishes the body being decoded, drops those waiting to be: the requests waiting for them are
  // then queued on their shards (to be destroyed with the shards' queued work, while the gateway
  // exists). Call once the shards have stopped running, before their queued work is destroyed.
  void StopDecoding();
  // Every shard's listening sockets, to pass to a new gateway (all of them: one closed at the
  // drain would reset the connections queued on it). Call on the first shard's thread, before
  // Drain (the shards only close theirs at the drain).
  std::vector<int> listening_fds() const;
  // Says that the gateway will stop (the drain's delay, before Drain): GET /ready answers 503 from
  // now on, and responses say Connection: close, so that clients reconnect through the load
  // balancer; new connections are still served. Safe from any thread.
  void AnnounceStop();
  // Whether every shard has stopped accepting (Drain runs on each shard's thread).
  bool draining() const;
  int open_connections() const;
  // A hand-over to a new gateway is under way (from SIGUSR2 on, unless it fails): admin changes
  // (PATCH) are refused with 503, as the new gateway starts from what was written before them.
  void SetHandingOver(bool on) { handing_over_.store(on, std::memory_order_relaxed); }
  // Whether the state file is being written (the drain waits for it).
  bool saving_state() const { return state_writes_pending_ > 0; }
  // Whether the last save of the state file failed, and when the last one that did not was
  // written (Unix time; 0: none).
  bool state_save_failed() const { return state_write_failed_; }
  double state_saved_at() const { return state_saved_at_; }
  // Closes the connections still open under their requests (the drain's time is up); their
  // access-log lines say so. Safe from any thread.
  void CutShort();
  // A hand-over (gateway/predecessor_load.h): this gateway's requests in flight as a line for its
  // successor; and in the successor, reads the lines of the gateway it took over from on `fd`
  // (a pipe, taken) until it ends, counting them as a peer's, then runs `gone` on the first
  // shard. Safe from any thread.
  std::string InFlightLine() const;
  void FollowPredecessor(int fd, std::function<void()> gone);
  void Stop();
  // After Stop: whether the peers have had the gateway's last message and the collector its last
  // spans (or they were given up).
  bool PeersTold() const;
  // Takes new client keys (the operator's SIGHUP): requests read after it need one of them;
  // those on their way keep the key they came with. A client whose name stays keeps its
  // counters and its requests in flight. Refused, with the reason, when the keys are bad or
  // none: a gateway that asked for keys does not open up on a reload. `taken` runs (on some
  // shard's thread) once every shard has the new keys. Safe from any thread.
  std::string ReloadClientKeys(const std::vector<ClientKey>& keys,
                               std::function<void()> taken = nullptr);
  // Reads the listener's certificate and key again (tls_cert_file, tls_key_file: a renewed
  // certificate) for the connections accepted once `taken` has run; those open keep theirs.
  // Refused, with the reason, when the files cannot be used. Safe from any thread.
  std::string ReloadTls(std::function<void()> taken = nullptr);
  // Sets a model's settings read again from the config file (SIGHUP), as the admin API's PATCH
  // does. False when no model has that name. Safe from any thread.
  bool ApplyModelSettings(const ModelSettingsChange& change);
  // The access log on or off (SIGHUP), for the requests answered from then on; `taken` is called
  // once every thread has it. Safe from any thread.
  void SetAccessLog(bool on, std::function<void()> taken = nullptr);
  // With traffic_log: appends from now on to the file now at its path (SIGHUP, after a log
  // rotation moved the old one away). Says what it did in the log.
  void ReopenTrafficLog();

  const GatewayConfig& config() const { return config_; }
  // The model a request naming `requested` goes to: by its name, a name its replicas serve (a LoRA
  // adapter), or an alias, in that order; nullptr if none. `as_served`, if given, says whether the
  // replicas know that name (else an alias: the body must name the model instead).
  ModelState* ResolveModel(std::string_view requested, bool* as_served = nullptr) const;
  ModelState* FindModel(std::string_view name) const;
  // Why a LoRA adapter cannot be named `name` (a model's name, a name its replicas serve it
  // under, or one of its aliases, not a pattern's match); empty if it can.
  std::string NameTakenByAModel(std::string_view name) const;
  // For `serve --check-replicas`: asks one server of `model` (its pool `pool_index`) once what the
  // scrapes ask at start (/health, /v1/models, /metrics), logs what it finds with the same
  // warnings, and returns whether it is as configured. Needs no Start.
  asio::awaitable<bool> CheckServer(ModelState& model, size_t pool_index,
                                    std::chrono::milliseconds timeout);

 private:
  uint16_t AdoptListeners(const std::vector<int>& fds);
  struct Upstream;

  // A request from a client, through the steps below in turn; each either answers it or lets it
  // on, and the last forwards it.
  asio::awaitable<void> Handle(HttpExchange& ex, int shard);
  // What Handle's steps learn of a request as it goes through them. Not copied: `api_path` may
  // point into `normalised`.
  struct RequestScope {
    RequestScope() = default;
    RequestScope(const RequestScope&) = delete;
    RequestScope& operator=(const RequestScope&) = delete;
    std::string_view path;      // the target's path
    std::string_view api_path;  // the path as the replica's server reads it (escapes decoded)
    std::string normalised;     // api_path's text when it is not the target's
    ErrorShape shape = ErrorShape::kOpenAi;  // of the path's API, for the gateway's own errors
    AdapterPath adapter_path = AdapterPath::kNone;
    bool admin_decides = false;  // the admin token, not a client's key, admits it (AdminDecides)
    // The shard's table of client keys when there is one, held while the request lasts (a reload
    // may replace the shard's), and the client whose key the request came with.
    std::shared_ptr<const ClientTable> clients;
    const ClientTable::Client* client = nullptr;
  };
  // The first steps, before the body is read: the path spelt as the replica's server reads it,
  // the host, the admin token for adapter and engine routes, the client's key, the body limit,
  // the gateway's own pages (LocalResponse). The answer, or nothing to let the request on.
  std::optional<HttpResponse> CheckEntry(HttpExchange& ex, int shard, RequestScope* scope);
  // Whether the request resets the replicas' caches or puts them to sleep or wakes them, which
  // ControlEngine does for every server of the model.
  bool ControlsEngine(const HttpRequest& request, std::string_view api_path) const;
  asio::awaitable<void> ControlEngine(HttpExchange& ex, int shard, std::string_view api_path);
  // The answer to a request no model takes (404, or 400 for an adapter update that names none
  // while several are served); a request without a model that asks no generation goes to the
  // first (`*model` is set then).
  std::optional<HttpResponse> RefuseWithoutModel(const HttpRequest& request,
                                                 const RequestScope& scope, const BodyFacts& facts,
                                                 ModelState** model) const;
  // The last steps before Forward: the access log's note, the body's model name for an alias,
  // a system prompt inlined for a model that wants it, a preflight's body dropped, the client's
  // key for what its head let through unkeyed, the client's limit of requests in progress. The
  // answer, or nothing to forward it (the client's slot then taken).
  std::optional<HttpResponse> PrepareForward(HttpExchange& ex, const RequestScope& scope,
                                             ModelState& model, bool served_name,
                                             const BodyFacts& facts, const SessionKey& key);
  // A POST that loads or unloads a LoRA adapter on every server of a model.
  static bool AdapterUpdate(const HttpRequest& request, const RequestScope& scope);
  // A POST to a path that generates (a preflight, or a GET the replica refuses, does not).
  static bool Generation(const HttpRequest& request, const RequestScope& scope);
  // Counts a decoded body in decoded_bytes_held_ for as long as its request lasts.
  class DecodedBodyHold {
   public:
    DecodedBodyHold() = default;
    DecodedBodyHold(const DecodedBodyHold&) = delete;
    DecodedBodyHold& operator=(const DecodedBodyHold&) = delete;
    ~DecodedBodyHold() {
      if (held_) held_->fetch_sub(bytes_, std::memory_order_relaxed);
    }
    void Hold(std::atomic<int64_t>* held, int64_t bytes) {
      held_ = held;
      bytes_ = bytes;
    }

   private:
    std::atomic<int64_t>* held_ = nullptr;
    int64_t bytes_ = 0;
  };
  // Decodes a body sent with a Content-Encoding (`codings`: ContentCodings, not empty;
  // net/content_coding.h) on decode_pool_, takes the field off and counts the decoded body in
  // `hold`; an error to answer with when it cannot.
  asio::awaitable<std::optional<HttpResponse>> DecodeBody(HttpRequest& request, std::string codings,
                                                          ErrorShape shape, DecodedBodyHold* hold);
  // What DecodeBody's decoding came to, on the shard: the error to answer with, or the decoded
  // body counted in `hold` and its coding's fields taken off.
  std::optional<HttpResponse> Decoded(HttpRequest& request, ErrorShape shape,
                                      const DecodedBody& decoded, DecodedBodyHold* hold);
  // Reads what routing needs from the request's body into `facts` (without copying it); the
  // answer to a body that will not do (none, or not JSON, on a JSON API path; a model that is no
  // string), else nothing. `headers`: the request's (HeaderViews).
  std::optional<HttpResponse> ReadBody(const HttpRequest& request, std::string_view api_path,
                                       ErrorShape shape, const std::vector<HeaderView>& headers,
                                       BodyFacts* facts);
  // The model that stored the Responses API response `path` is about (GET or DELETE
  // /v1/responses/{id}), its conversation's key in `stored` and the replica in `stored_on`; null
  // for another path or a response not known.
  ModelState* StoredResponseModel(std::string_view path, SessionKey* stored, int* stored_on);
  // The request's session key for `model` (`stored`'s when it is about a stored response):
  // apart for an adapter (whose prompts' hashes in `facts` are set apart too: `served_name`, the
  // name in the body is one the replicas serve), or the key of the response it continues from
  // (then `stored_on` gets where that is stored).
  SessionKey KeyOf(ModelState& model, const std::vector<HeaderView>& headers, bool served_name,
                   SessionKey stored, BodyFacts* facts, int* stored_on);
  // `needs_home`: the request is about a response stored on its conversation's replica;
  // `stored_on`: that replica, where known (RouteRequest). `client`: the slot of the client key
  // it came with, whose counters its usage adds to.
  asio::awaitable<void> Forward(HttpExchange& ex, int shard, ModelState& model,
                                const SessionKey& key, const BodyFacts& facts, bool generation,
                                bool needs_home, int stored_on, ClientSlot& client);
  // What the router is told of a request to forward (Forward's arguments; `body_bytes`, the
  // body's size, stands for a prompt not hashed). Its `avoid` is left to the caller.
  RouteRequest RouteRequestFor(ModelState& model, const SessionKey& key, const BodyFacts& facts,
                               std::string_view body, bool generation, bool needs_home,
                               int stored_on);
  // The answer to a request whose sending failed in a way no other replica would mend (not valid
  // HTTP: 502; no response head in read_timeout_s: 504; the gateway short of resources: 503),
  // logged and counted, the request counted as failed at `replica` (-1: the engine's balancer);
  // or cut by the drain's end (a 503 to send it again, counted as ended). Nothing when the
  // failure is one to route again.
  std::optional<HttpResponse> AnswerNotRetried(const HttpRequest& request, ErrorShape shape,
                                               ModelState& model, int replica,
                                               const Upstream& upstream, const UpstreamUrl& url);
  // A replica a request could not reach: counted as failed and marked down (with its server's
  // other ranks when it `refused` the connection) until a health check says otherwise, with the
  // panel's change note. Returns whether any replica is still in service.
  // `*marked_down` (if given): whether this request took it out of service (the health checks
  // had it in).
  bool MarkUnreachable(ModelState& model, int replica, bool refused, bool* marked_down = nullptr);
  // The records of a request that ended (or whose last bytes are going out), `outcome` with the
  // replica's `status`: its end at its replica in the router, the turn it served, the key its
  // conversation goes on under (`reply_hash`: its reply's, when the conversation is named by it),
  // the response it stored; and the warnings the model's first such request earns (history not
  // read from the cache, cached tokens never reported). `generation`: the request asked for one
  // (only then is it a turn).
  void RecordEnded(ModelState& model, const RouteDecision& decision, std::string_view key,
                   bool generation, bool name_by_reply, uint64_t reply_hash,
                   const RequestOutcome& outcome, int status, const ResponseObserver& observer);
  // The answer when no replica is left to try: 502 if the last one dropped the request, else 503
  // (with a Retry-After of the health checks' interval, unless replicas are draining).
  HttpResponse NoReplicaLeft(const HttpRequest& request, ErrorShape shape, ModelState& model,
                             bool last_dropped);
  // Whether a vLLM data-parallel server's own balancer places the model's requests (affinity off).
  bool EngineBalances(ModelState& model);
  // POST /v1/load_lora_adapter (`load`) or /v1/unload_lora_adapter: sent to every server of
  // `model` that passes its health checks, whose names are read again after; one answer for all
  // (adapter_update.h).
  asio::awaitable<void> UpdateAdapters(HttpExchange& ex, int shard, ModelState& model, bool load);
  // POST /reset_prefix_cache, /reset_mm_cache or /reset_encoder_cache (`target`: the path and its
  // query): sent to every
  // server of every model that passes its health checks; 200 when each did it, else a 502 that
  // names the others (cache_reset.cc).
  asio::awaitable<void> ResetCaches(HttpExchange& ex, int shard, std::string target);
  // vLLM's sleep mode (`path` one of IsSleepControl's, `target` it with its query): sent to every
  // server of every model; answered once routing has scraped each server that did it, so that a
  // request after a wake finds them in service (sleep_control.cc). GET /is_sleeping: whether
  // every server sleeps, and each one's answer.
  asio::awaitable<void> ControlSleep(HttpExchange& ex, int shard, std::string target,
                                     std::string path);
  HttpResponse IsSleepingAnswer(const HttpRequest& request, const EveryServerCall& every);
  // The answer to a call to every server: 200 when each did it (with their answer when
  // `relay_common_body` and they all gave the same one, else empty); their client error when
  // they all gave the same (a 404 explained: vLLM's development mode); else a 502 naming the
  // servers that did not do it.
  HttpResponse EveryServerAnswer(const HttpRequest& request, const EveryServerCall& every,
                                 bool relay_common_body);
  // Asks each of `servers` (model, server index) for a scrape round now and waits until one begun
  // after the ask has ended on each (or a bound of two scrape timeouts has passed).
  asio::awaitable<void> ScrapeNow(const std::vector<std::pair<ModelState*, size_t>>& servers);
  // Reads every server's /v1/models again for the names they serve, unless that was done less
  // than a second ago; waits for such a read under way. For a request naming a model the gateway
  // does not know, which may be an adapter just loaded on a replica.
  asio::awaitable<void> RelearnServedNames(int shard);
  // For a request naming a LoRA adapter loaded through the gateway that no server lists now (they
  // restarted, and the gateway is loading it again): the model once some server lists it again,
  // waiting while a load runs, up to kAdapterReloadWaitS; nullptr when no model remembers such an
  // adapter, or it is still missing then (`*still_missing` set).
  asio::awaitable<ModelState*> AwaitAdapterReload(std::string_view name, bool* still_missing);
  // Unloads from server `server` of `model` the adapters unloaded through the gateway while it did
  // not answer that `listed` (what it serves now) still holds, loads the ones loaded through the
  // gateway that it lacks, then reads its names again; `*busy` is false again when it ends.
  // Sends server `server` of `model` an update it missed (LoadedAdapters::KeepForLater), unless a
  // newer update of the adapter replaced it meanwhile.
  asio::awaitable<void> SendKeptUpdate(ModelState& model, size_t server,
                                       LoadedAdapters::KeptUpdate update);
  asio::awaitable<void> ReconcileAdapters(ModelState& model, size_t server,
                                          std::vector<ServedName> listed,
                                          std::shared_ptr<bool> busy);
  std::atomic<double> served_names_relearnt_at_{-1e9};  // Now() of the last RelearnServedNames
  std::atomic<bool> relearning_{false};                 // a RelearnServedNames is reading
  // How a request admission held ends its wait.
  enum class AdmissionWait {
    kGo,          // let in (or no longer held): send it
    kClientGone,  // its client went away meanwhile
    kRouteAgain,  // its replica was lost meanwhile
    kDrained,     // its replica was drained meanwhile (routed again, as no failure)
    kStopping,    // the gateway's drain ends before it would be let in
  };
  // Where a held request may still go when `replica` is drained: nowhere else
  // (RouteRequest::needs_home), anywhere (routed again), or there while no replica but the
  // `avoided` ones is in service (routed to a draining one, RouteDecision::to_draining; taken
  // back meanwhile, it is in service itself).
  struct HeldFor {
    bool needs_home = false;
    bool to_draining = false;
    std::span<const int> avoided;
    double waited_s = 0;  // since the request came (its hold's bound counts from then)
  };
  // Waits while admission holds the routed request. `key`, `reserves` and `continues`: as
  // ModelState::Admit's.
  asio::awaitable<AdmissionWait> AwaitAdmission(ModelState& model, int replica, uint64_t id,
                                                std::span<const uint64_t> blocks,
                                                std::string_view key, bool reserves,
                                                HangupWatch& watch, HeldFor held_for,
                                                std::string_view continues = {});
  // Sends the request to the pool's server and reads the response's head into `parser`.
  // `replica` is the one whose health decides whether the head is still worth waiting for.
  // `resend_if_stale`: a pooled connection closed unanswered at once may be the server's
  // keep-alive race, and the request is sent once more on a new one; not for a request a replica
  // dropped already (it trips something: the quick close is that, again).
  // `request_id_line` (HttpExchange::request_id_line): the request's id, sent in place of the
  // client's X-Request-Id (none: the client's fields as they are), the replica's own left out of
  // the response's head.
  // `trace_line` (RequestTrace::line): the gateway's traceparent, sent in place of the client's
  // (none: the client's as it is); with `new_trace`, the client's tracestate is left out.
  asio::awaitable<Upstream> Send(const HttpRequest& request, std::string_view request_id_line,
                                 std::string_view trace_line, bool new_trace, int shard,
                                 ModelState& model, int replica, UpstreamPool& pool, int rank,
                                 std::optional<RelayParser>& parser, HangupWatch& watch,
                                 bool resend_if_stale);
  struct ForwardTries;
  // Routes Forward's try number `attempt` (from 0) of a request under `key`, with what the tries
  // before it came to; replica -1 when no replica will take it.
  RouteDecision RouteTry(ModelState& model, const SessionKey& key, int attempt, ForwardTries* fwd);
  // What Relay made of a response.
  struct Relayed {
    RequestOutcome outcome;  // the usage of a whole 2xx response (else unknown)
    // A generation's stream the replica broke off before its first event: nothing went to the
    // client (its head waits for that event), and the request may go to another replica.
    bool dropped_unanswered = false;
    // Of those, one the gateway cut because the scrape holds its replica out of service (for its
    // /health, or stalled: stall_timeout_s): not the replica's dropping it.
    bool stalled = false;
    bool lost_and_silent = false;  // (out of service and silent for stall_timeout_s)
    // The answer began (its head went out) and then broke off: the replica died or stalled, or
    // the gateway's drain ran out.
    bool broke_off = false;
    // Of a whole stream, the events that carried tokens: its reply's size where no usage came
    // (an OpenAI stream without stream_options.include_usage), for the traffic log.
    int token_events = 0;
    // A generation's stream its client left after tokens had come (Claude Code's Esc): what the
    // engine did for it, for the traffic log.
    struct ClientCut {
      bool cut = false;
      int prompt_tokens = -1;  // the replica's count (-1: none came)
      int prompt_guess = 0;    // from the request's size
      int output_tokens = 0;   // the tokens that came before it was cut
      double duration_s = 0;   // arrival to the cut
    } client_cut;
  };
  struct RelayRun;  // (gateway_relay.cc)
  // Streams the response to the client.
  // `name_by_reply`: the first turn of a conversation keyed by its opening (`key`), whose later
  // turns are keyed by its reply's text as well: the reply is read, and that key homed here.
  // The usage is counted for `client`, whose slot is given back, before the last bytes go out.
  // `generation`: the request asks for one (a POST to a generation path), so its whole successful
  // answer carries usage. `traffic` (the traffic log's turn, or null) is told then too, so that
  // the conversation's next turn, which may come at once, finds this one over.
  asio::awaitable<Relayed> Relay(HttpExchange& ex, int shard, Upstream upstream,
                                 RelayParser& parser, ModelState& model,
                                 const RouteDecision& decision, std::string_view key,
                                 bool generation, int sequences, bool name_by_reply, double started,
                                 HangupWatch& watch, ClientSlot& client, TrafficLog::Turn* traffic);
  // After Relay's whole answer to Forward's request: what it taught (admission's claim, how many
  // tokens a prompt's chunk holds), its traffic log line, a server's names read again after a
  // 404 for a name it was said to serve, the peers told it ended.
  void AfterRelayed(ModelState& model, int shard, const BodyFacts& facts, const Relayed& relayed,
                    int status, ModelState::AdmissionClaim& claim, TrafficLog::Turn* traffic,
                    double started);
  // `replica` could not be reached (refused, or no answer): marked so (MarkUnreachable), and said
  // by the request that took it out of service.
  void NoteUnreachable(ModelState& model, int replica, bool refused);
  // Checks the health of server `pool_index` of `model` and reads its metrics (and now and then
  // its models), every scrape interval until the gateway stops.
  asio::awaitable<void> ScrapeLoop(ModelState* model, size_t pool_index);
  struct ServerScrape;  // (gateway_metrics.cc)
  asio::awaitable<void> ReadPredecessorLoads(int fd, std::function<void()> gone);
  // Reads the server's /v1/models when `watch` says it is due: the names it serves (and the
  // adapters it lacks or keeps, reconciled apart), whether it is simulated, its context length.
  asio::awaitable<void> ReadServedModels(ModelState& model, size_t pool_index,
                                         ServedModelsWatch& watch,
                                         std::chrono::milliseconds timeout);
  // The pause between two scrapes of `model`'s server (its scrape interval, as it is now).
  asio::awaitable<void> WaitScrapeInterval(ModelState& model, size_t pool_index,
                                           asio::steady_timer& timer);

  // The state file (config.state_file): homes restored at start, saved every
  // state_save_interval_s when they changed, and at stop.
  void RestoreState();
  // Restores from `path`: the state file, or what a gateway handing over left (`handed_over`: not
  // set aside if damaged, and not this gateway's save). False if it could not be read.
  bool RestoreStateFrom(const std::string& path, bool handed_over);
  // Takes the state file at `path`'s modification time for its last save (state_saved_at).
  void NoteStateFileSavedAt(const std::string& path);
  // Saves when the homes changed since the last save (or it failed), on a writer thread.
  // kPeriodic skips a tick while the previous write is still going, and stops at the drain;
  // kDrain does not wait for the write; kFinal does, and is the last. No save is written over a
  // file a gateway started later has written (state_file.h, StateFileWriterStart).
  enum class SaveWhen { kPeriodic, kNow, kDrain, kFinal };
  // `then` runs on the first shard once the save is written, or at once when none is.
  void SaveState(SaveWhen when, std::function<void()> then = {});
  // Runs `write` on a new state_writer_ once the writer before it has ended, counted in
  // state_writes_pending_ until it has; on this thread if no thread can be had (then false).
  // REQUIRES: state_mu_ held.
  bool StartStateWriter(std::function<void()> write);
  void WriteState(const std::vector<ModelSnapshot>& snapshots, double unix_time);
  asio::awaitable<void> SaveStateLoop();
  // Writes the traffic log's lines once a second (config traffic_log).
  asio::awaitable<void> TrafficLogLoop();
  // Once a second on each shard: closes the shard's upstream connections idle for 2-3 s.
  asio::awaitable<void> PoolSweepLoop(int shard);

  // Answers that need no upstream (admin API, metrics, probes); nullopt when the path is not one.
  std::optional<HttpResponse> LocalResponse(const HttpRequest& request, std::string_view path);
  // GET /ready[?model=NAME], for a load balancer in front of several gateways: 200 while this
  // one does not drain and some model (or the one named) can serve a request, 503 otherwise; the
  // body names the models that cannot.
  HttpResponse ReadyResponse(const HttpRequest& request);
  HttpResponse AdminResponse(const HttpRequest& request, std::string_view path);
  // The admin API's answer once the request is let in (admin_api.cc).
  HttpResponse AdminAnswer(const HttpRequest& request, std::string_view path);
  // The refusal of an admin request (from its head alone): without the admin token, or a change
  // a page of another origin sent through a browser; nullopt if let in.
  std::optional<HttpResponse> RefuseAdminRequest(const HttpRequest& request);
  // 403, in the shape of the path's API, for a request under a host name the gateway does not
  // answer to (allowed_hosts).
  std::optional<HttpResponse> RefuseUnknownHost(const HttpRequest& request);
  boost::json::object ClientsJson() const;
  std::string MetricsText();
  // MetricsText's families of the gateway itself (state file, connections, timeouts, TLS, its own
  // error answers) and of the API keys' clients.
  void WriteGatewayFamilies(PrometheusWriter& w);
  void WriteClientFamilies(PrometheusWriter& w);
  // GET /v1/models: every name a request may give, paged as Anthropic's list is when `target`'s
  // query asks (after_id, before_id, limit).
  // Empty, with `*error` set, when the target's query asks for a page in a way it cannot be
  // given (a limit that is no positive integer).
  std::string ModelsListBody(std::string_view target, std::string* error) const;
  // For an unknown model's 404: the models served and their aliases (names and patterns).
  std::string ServedHere() const;
  std::string ModelEntry(std::string_view id, const ModelState& model) const;
  HttpResponse ModelResponse(const HttpRequest& request, std::string_view path);
  HttpResponse Error(const HttpRequest& request, ErrorShape shape, int status,
                     std::string_view message, ErrorCode code = ErrorCode::kByStatus) const;

  double Now() const;
  // Unix time of a Now() value.
  double UnixTime(double now) const;

  std::chrono::system_clock::time_point unix_start_;  // with start_: Now() to Unix time
  std::vector<asio::io_context*> shards_;
  GatewayConfig config_;
  std::vector<std::unique_ptr<ModelState>> models_;
  std::vector<std::unique_ptr<HttpServer>> http_;                 // one per shard
  std::vector<std::unique_ptr<HangupWatchArmer>> hangup_armers_;  // one per shard
  std::vector<std::unique_ptr<ReplicaLossWatch>> loss_watches_;   // one per shard
  std::unique_ptr<PeerSync> peer_sync_;
  std::chrono::steady_clock::time_point start_;
  // The admin API's token as a key.
  ApiKeys admin_keys_;
  // The names the gateway's own pages (panel, admin API, /metrics) answer to.
  HostAllowlist allowed_hosts_;
  std::atomic<int64_t> unauthorized_{0};  // requests refused for want of a key (for /metrics)
  // Errors the gateway answered itself on the model API (not a replica's), by status.
  mutable StatusCounts own_error_answers_;
  // For /metrics: requests answered 503 because the gateway could not open a connection (its
  // own descriptors, memory or ports), and replicas silent for read_timeout_s (before the head,
  // in the body).
  std::atomic<int64_t> local_failures_{0}, head_timeouts_{0}, body_timeouts_{0};
  // Requests sent again on a new connection after a kept-alive one closed at once, unanswered.
  std::atomic<int64_t> resent_{0};
  // Streams whose head went out with a keepalive before their first event (stream_keepalive_s).
  std::atomic<int64_t> streams_kept_alive_{0};
  // Bytes of decoded (once compressed) request bodies that requests in progress hold, over all
  // shards: a few compressed bytes can become a body as large as the limit, so their sum is
  // bounded too (kDecodedBodyLimits body limits).
  std::atomic<int64_t> decoded_bytes_held_{0};
  // Compressed bodies given to decode_pool_ and not yet back from it (kDecodesPerThread).
  std::atomic<int64_t> decodes_pending_{0};
  // Compressed bodies answered 503 for want of room in the decoding queue, and in memory.
  std::atomic<int64_t> decode_refusals_queue_{0}, decode_refusals_memory_{0};
  // The keys clients must present (config.api_keys, then ReloadClientKeys): the latest table, for
  // /metrics and the admin API, and each shard's own pointer to it, which only its thread touches
  // (a request holds its shard's table while it runs).
  mutable std::mutex clients_mu_;
  std::shared_ptr<const ClientTable> clients_;
  std::vector<std::shared_ptr<const ClientTable>> shard_clients_;
  std::shared_ptr<const ClientTable> Clients() const;
  static std::vector<std::shared_ptr<const ClientTable>> ShardCopies(const ClientTable& table,
                                                                     size_t shards);
  static void CountClientUsage(ClientTable::Counts* client, const RequestOutcome& outcome);
  // A 401 in the API's shape, counted.
  HttpResponse Unauthorized(const HttpRequest& request, ErrorShape shape);
  // A request to an adapter path (adapter_update.h) refused from its head: SageMaker's, always;
  // vLLM's without the admin token, when the gateway has one.
  std::optional<HttpResponse> RefuseAdapterRequest(const HttpRequest& request,
                                                   AdapterPath adapter_path);
  // The answer to a request's head that needs a key and carries none of `shard`'s table.
  std::optional<HttpResponse> RefuseKeylessHead(const HttpRequest& head, int shard);
  // The Via of a call the gateway makes to servers for `request`: the request's own entries,
  // then this gateway's, so that a loop through several gateways is seen too (CameBack).
  std::string ViaAfter(const HttpRequest& request) const;
  // GET /is_sleeping with the admin token (`path` normalised): the admin reads what its sleeps
  // and wakes did without a client key.
  bool AdminsRead(const HttpRequest& request, std::string_view path) const;
  // The refusal of a request that changes every server (ChangesEveryServer) or controls the
  // engine (ControlsTheEngine; `path` normalised): from a page of another site, or without the
  // admin token when there is one.
  std::optional<HttpResponse> RefuseFleetRequest(const HttpRequest& request, std::string_view path);
  // Whether, with an admin token configured, that token rather than a client's key admits the
  // request (`path` normalised): an adapter update, or a request that changes every server or
  // controls the engine. (The token itself is checked with the head.)
  bool AdminDecides(AdapterPath adapter_path, std::string_view path,
                    boost::beast::http::verb method) const;
  // config.read_timeout_s (zero: no limit).
  std::chrono::steady_clock::duration ReadTimeout() const;
  // config.connect_timeout_s, for the calls the gateway makes to servers.
  std::chrono::milliseconds ConnectTimeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(config_.connect_timeout_s * 1000));
  }
  // Logs, at most once a minute, that a request came back to this gateway (CameBack): a loop.
  void WarnOfLoop(const HttpRequest& request);
  std::atomic<int64_t> loop_warned_{-1};  // the minute of Now() last warned in
  // Logs, at most once a second, that the gateway cannot open connections (open files, say).
  void WarnShortOfResources(const std::string& what);
  std::atomic<int64_t> short_of_resources_warned_{-1};  // the second of Now() last warned in
  std::atomic<bool> stopped_ = false;                   // read by every shard's loops
  // Has prompts hashed from now on if `model`'s policy reads their prefixes.
  void NoteIfPolicyReadsPrefixes(ModelState& model);
  // A generation request a replica answered whole, in the traffic log (config traffic_log).
  // `token_events`: Relayed's, the reply's size where its usage did not say.
  void RecordTraffic(TrafficLog::Turn& turn, double started, const RequestOutcome& outcome,
                     int token_events, const BodyFacts& facts, std::string_view model);
  // One its client stopped after tokens had come (Claude Code's Esc): the engine read its prompt
  // and made those tokens, so a replay does the same.
  void RecordCutTraffic(TrafficLog::Turn& turn, double started, const Relayed::ClientCut& cut,
                        const BodyFacts& facts, std::string_view model);
  // Some model's policy or admission reads prompt prefixes (set for good once one does).
  std::atomic<bool> hash_prompts_{false};
  std::atomic<bool> access_log_{false};  // config access_log, and SIGHUP's
  // This gateway in the Via header of what it sends upstream: a request that comes back with it
  // went round a loop (a replica URL that is the gateway itself).
  std::string via_;
  bool CameBack(std::span<const HeaderView> headers) const;
  std::atomic<uint64_t> next_admission_id_{1};
  std::unique_ptr<TrafficLog> traffic_log_;  // config traffic_log
  std::unique_ptr<TraceExporter> traces_;    // config otlp_traces_endpoint
  struct RequestTrace;                       // (gateway_forward.cc)
  // Now() as nanoseconds since the Unix epoch, for spans.
  int64_t UnixNanos(double now) const;
  RequestIdSource request_ids_;  // the shards' servers make requests' ids (request_ids)
  // From this steady-clock time (in its ticks) held requests are answered 503 (see Drain).
  std::atomic<int64_t> give_up_held_at_{std::numeric_limits<int64_t>::max()};
  std::mutex state_mu_;                   // one save at a time
  std::vector<uint64_t> saved_versions_;  // each model's session table as last saved
  // Writes the latest save, after joining the writer before it (StartStateWriter): a save asked
  // for while one is under way waits on this thread, not on a shard's.
  std::thread state_writer_;
  std::thread drainer_;                       // Drain: the save, then the listeners' close
  std::atomic<bool> drain_begun_{false};      // AnnounceStop or Drain: /ready says so at once
  std::atomic<bool> handing_over_{false};     // SetHandingOver
  std::atomic<int> state_writes_pending_{0};  // saves taken and not written yet
  std::atomic<bool> state_write_failed_{false};
  bool state_draining_ = false, state_saved_final_ = false;
  // For /metrics: saves written and failed, the Unix time of the latest written, and the
  // conversations restored at start.
  std::atomic<int64_t> state_saves_{0}, state_save_failures_{0}, state_save_refusals_{0};
  std::atomic<double> state_saved_at_{0};
  size_t state_restored_ = 0;
  std::string handed_over_state_;  // HandedOverStateFrom
  // Where compressed request bodies are decoded, off the shards' threads (DecodeThreads). Last,
  // so that it is joined first: its work writes into requests the shards hold.
  std::unique_ptr<OffThreadPool> decode_pool_;
};

}  // namespace warden
