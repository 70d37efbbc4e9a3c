// The gateway's configuration: a YAML file (see README), validated once at start.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/routing/session_key.h"

namespace warden {

// The largest body_limit_mb (1 TiB).
inline constexpr double kMaxBodyLimitMb = 1 << 20;
// The largest overflow_limit and max_num_seqs.
inline constexpr int kMaxOverflowLimit = 1 << 20;
// An overflow limit as the config, a flag or a saved setting writes it: "auto" (0) or a whole
// number from 1 to kMaxOverflowLimit. Nothing when it is neither.
std::optional<int> ParseOverflowLimit(std::string_view text);

struct ModelConfig {
  std::string name;                  // the served model name clients ask for
  std::vector<std::string> aliases;  // other names or glob patterns ('*', '?') mapped to it
  // Layout (a): one URL and data_parallel_size ranks behind it (pinned with X-data-parallel-rank).
  // Layout (b): several URLs, one replica each.
  std::vector<std::string> urls;
  int data_parallel_size = 1;
  int max_num_seqs = 256;  // vLLM's --max-num-seqs on each replica
  int overflow_limit = 0;  // 0: auto
  bool affinity = true;
  // With affinity off in the data-parallel layout: leave the rank to vLLM's own balancer (engine,
  // the default: what "no gateway affinity" means for a vLLM DP server) or balance by load here
  // (gateway). Independent servers (layout b) have no balancer of their own: the gateway balances.
  bool engine_balances_when_off = true;
  std::string policy = "warden-seed";
  // Admission at the gateway (core/routing/admission_queue.h): off, fifo, recent:K or
  // reserve:N[:SECONDS].
  std::string admission = "off";
  double scrape_interval_s = 1.0;
  // Anthropic requests' system messages inside "messages" are passed on with the role "user"
  // (core/protocol/inline_system.h): for a chat template that refuses a system message after the
  // first, vLLM would otherwise merge them into the system prompt and read nothing from the cache.
  bool inline_system_as_user = false;
  // The replicas run with vLLM's --sleep-idle-ttl: a server whose engines sleep wakes at its next
  // request, so it stays in service (without this, a sleeping server is out of service until
  // someone wakes it).
  bool idle_sleep = false;
  // Replicas at https:// URLs: their certificates are checked against the system's authorities,
  // or those in tls_ca_file (PEM); tls_verify false checks nothing.
  bool tls_verify = true;
  std::string tls_ca_file;
  // The key the replicas ask for (vLLM's --api-key): sent as "Authorization: Bearer <key>" on
  // every request to them, in place of the client's own credentials. Empty: the client's go on.
  std::string replica_api_key;
  double session_idle_timeout_s = 600;
  size_t max_sessions = 100000;
  // What simulates the replicas (the demo's, e.g. "warden sim, profile a4000-qwen3-4b, time x50"),
  // shown in the panel and admin API; empty for real replicas. Not read from a config file.
  std::string simulated;

  bool data_parallel() const { return urls.size() == 1 && data_parallel_size > 1; }
  int num_replicas() const {
    return data_parallel() ? data_parallel_size : static_cast<int>(urls.size());
  }
  // auto = a quarter of max_num_seqs, at least 1.
  int effective_overflow_limit() const {
    return overflow_limit > 0 ? overflow_limit : std::max(1, max_num_seqs / 4);
  }
  bool operator==(const ModelConfig&) const = default;
};

// A key clients may present, and the name their requests are counted under (empty: "key-<n>",
// its place in the list from 1).
struct ClientKey {
  std::string name;
  std::string key;
  // Requests of this key on their way to the replicas at once, at most (0: no limit): past it, a
  // request is answered 429 with Retry-After, so that one client's runaway agents cannot take
  // every replica's slots from the others.
  int max_in_flight = 0;
  // Engine work its requests may cause per minute, in tokens computed (prompt tokens not read
  // from the cache, and output tokens); 0: no limit. Past it, 429 with Retry-After
  // (gateway/token_budget.h).
  int tokens_per_minute = 0;
  // Where it was given, for errors: "keys.txt line 3" (empty: the config's api_keys). Not part of
  // the key: a key moved to another line is the same key.
  std::string origin = {};
  bool operator==(const ClientKey& o) const {
    return name == o.name && key == o.key && max_in_flight == o.max_in_flight &&
           tokens_per_minute == o.tokens_per_minute;
  }
};

struct GatewayConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  size_t body_limit = 32u << 20;
  bool route_headers = true;  // x-warden-replica and x-warden-route on every proxied response
  // Every request gets an id (net/request_id.h): sent to the replica as X-Request-Id, back
  // to the client in x-request-id, and in the access log.
  bool request_ids = true;
  // A log line per request: method, target, status, time, and for a routed one its model,
  // replica, route, key source, tokens (prompt, cached, output) and time to first token.
  bool access_log = false;
  // A trace of the generation requests replicas answered (gateway/traffic_log.h), appended to this
  // file for `warden lab --trace`; empty: none. traffic_log_block: tokens per block id.
  std::string traffic_log;
  int traffic_log_block = 512;
  // An OpenTelemetry collector's OTLP/HTTP traces endpoint (gateway/trace_export.h): a span per
  // request relayed to a replica, in the client's trace; empty: none.
  std::string otlp_traces_endpoint;
  double connect_timeout_s = 3;
  int threads = 0;  // 0: one per core
  // Client connections the gateway keeps open at most, over all its threads (HttpServerOptions::
  // max_connections); 0: half of what the open-file limit leaves after 256 (each request in
  // progress holds a replica's connection too).
  int max_connections = 0;
  std::string admin_token;  // when set, /warden/ endpoints need "Authorization: Bearer <token>"
  // Host names the panel, admin API and /metrics answer to beside localhost and IP addresses
  // (wildcards; "*": any). Empty: any, unless listening on loopback (HostAllowlist).
  std::vector<std::string> allowed_hosts;
  // When both are set, clients reach the gateway over TLS (https) with this certificate chain and
  // its private key (PEM files, as certbot and `openssl req` write them). SIGHUP reads them again.
  std::string tls_cert_file;
  std::string tls_key_file;
  // When not empty, requests to the model API (/v1/... and paths passed on to a replica) need one
  // of these keys, as "Authorization: Bearer <key>" or Anthropic's "x-api-key: <key>".
  std::vector<ClientKey> api_keys;
  // How many of api_keys the config's own `api_keys` gave (they come first; the rest came from
  // `api_keys_file`, which --api-keys-file replaces).
  size_t inline_api_keys = 0;
  // Other gateways in front of the same replicas (base URLs): each sends them the homes of the
  // conversations it routes, every peer_sync_interval_s, so a conversation keeps its replica
  // whichever gateway its next turn reaches. Peers serve the same models with the same replicas.
  std::vector<std::string> peers;
  double peer_sync_interval_s = 0.2;
  // Where the conversations' homes are saved (every state_save_interval_s and at shutdown) and
  // restored from at start, so that a restart keeps them on their replicas (state_file.h).
  // Empty: nothing saved.
  std::string state_file;
  double state_save_interval_s = 30;
  // On SIGTERM/SIGINT: how long the gateway goes on serving as usual, with GET /ready saying 503,
  // before it stops accepting connections and drains: time for a load balancer's readiness
  // checks to take it out of rotation, so that clients are not refused meanwhile. 0: at once.
  double drain_delay_s = 0;
  // On SIGTERM/SIGINT: how long the requests in progress get to finish before the gateway stops.
  double drain_timeout_s = 30;
  // After a hand-over (SIGUSR2): how long the old gateway's requests in progress get to finish.
  // Longer than a stop's: the new gateway serves meanwhile, and a Claude Code turn may stream for
  // minutes.
  double hand_over_drain_timeout_s = 600;
  // A client that reads nothing of its response for this long is cut off, and its request ended
  // upstream (else it would hold a replica's slot for as long as it likes).
  double send_timeout_s = 60;
  // A replica that sends nothing for this long (no response head, or no byte of its body) has
  // its connection closed: 504 before the head, a cut response after. 0: no limit (clients'
  // own timeouts end such requests, and their leaving closes the replica's connection).
  double read_timeout_s = 0;
  // A generation stream whose replica has sent its head but no event this long after the request
  // came (queued, or reading a long prompt) gets its head and a keepalive, and another every 15 s
  // (or this often, if less) until the first event: clients time out waiting for a head (Claude
  // Code after about 300 s) and send the request again. Before it, a replica that fails leaves the
  // request free to go elsewhere; after, the stream ends with an error event. 0: never.
  double stream_keepalive_s = 120;
  // Admission (a model's `admission`) holds no request longer than this: past it, the request goes
  // to its replica whatever room there is, which queues it and sends the head (keepalives follow),
  // as a held request has no head yet and its client would give up on one (Claude Code after about
  // 300 s) and send it again, to the back of the queue. 0: no bound.
  double admission_max_hold_s = 240;
  // A replica that holds requests this long with no response head and no work counted in its
  // metrics (a hung engine whose /health still answers) is held out of service, and what waits
  // there routed again (StallWatch). 0: never.
  double stall_timeout_s = 60;
  // A client connection that takes longer than this to send a request's head, counted from when
  // the gateway starts waiting for it (so an idle kept-alive connection too), is closed: nginx's
  // client_header_timeout and keepalive_timeout in one.
  double header_timeout_s = 60;
  SessionKeyConfig session;
  std::vector<ModelConfig> models;
  // What a model defined by command-line flags starts from: the file's session settings.
  ModelConfig model_defaults;
  // The file gives session.idle_timeout_s (whatever its value: 600 is the default's too).
  bool session_idle_timeout_given = false;
  // Under --demo: its model's idle timeout when the file gives none (scaled to the simulated
  // replicas' time); 0 otherwise.
  double demo_idle_timeout_s = 0;
  bool operator==(const GatewayConfig&) const = default;
};

// Parses YAML text into `config` (starting from its current values, so defaults and flags set
// before stay unless the file overrides them). Returns false with an error naming the field, the
// value and the reason.
bool ParseGatewayConfig(std::string_view yaml, GatewayConfig* config, std::string* error);
// The files a config names that the command line replaces: neither read nor checked.
struct ReplacedFiles {
  bool api_keys_file = false;
  bool replica_api_key_file = false;  // every model's
  bool tls_ca_file = false;           // every model's
  bool state_file = false;
};
// ParseGatewayConfig without the checks of ValidateGatewayConfig, for a config that flags complete
// (a file with the session settings only, and the model from --url), from text or from a file.
bool ReadGatewayConfig(std::string_view yaml, GatewayConfig* config, std::string* error,
                       const ReplacedFiles& replaced = {});
bool LoadGatewayConfig(const std::string& path, GatewayConfig* config, std::string* error,
                       const ReplacedFiles& replaced = {});

// Reads API keys from a file, one per line (blank lines skipped; a '#' at a line's start or after a
// blank starts a comment): the lines, trimmed, and with `line_numbers` where each was (from 1).
// Returns false with a reason when the file cannot be read or (unless `may_be_empty`) holds no key.
bool ReadKeyFile(const std::string& path, std::vector<std::string>* lines, std::string* error,
                 std::vector<size_t>* line_numbers = nullptr, bool may_be_empty = false);
// Reads clients' keys from a file whose lines are "key" or "name key". It may hold none when the
// config's api_keys (`inline_keys` of them) give some: emptied, it revokes its keys; alone and
// empty, it is refused (the gateway would be open to anyone).
bool ReadClientKeyFile(const std::string& path, std::vector<ClientKey>* keys, std::string* error,
                       size_t inline_keys = 0);
// The name a client key's requests are counted under: its own, or "key-<n>" (n from 1).
std::string ClientKeyName(const std::vector<ClientKey>& keys, size_t index);
// Checks clients' keys: each usable in a header, none given twice, names that a metric label and
// a log line can carry. Returns an error or empty.
std::string ValidateClientKeys(const std::vector<ClientKey>& keys);

// Checks a config built from flags or a file; returns an error or empty.
std::string ValidateGatewayConfig(const GatewayConfig& config);

// A warning for each replica server named by more than one model (by host, port and path): each
// model counts only its own requests in flight there and admits against the whole cache, so
// placement and admission see part of the load. (Not an error: one server may serve several
// names; aliases say so without splitting the counts.)
std::vector<std::string> SharedReplicaWarnings(const GatewayConfig& config);

// Parses "host:port": an IPv4 address, an IPv6 one in brackets, or localhost (127.0.0.1).
// Returns false with a reason.
bool ParseListenAddress(std::string_view text, std::string* host, uint16_t* port,
                        std::string* error);
// The host as it goes in a URL (an IPv6 address in brackets).
std::string HostForUrl(std::string_view host);

// Case-sensitive glob match with '*' and '?', for model aliases.
bool GlobMatches(std::string_view pattern, std::string_view name);

}  // namespace warden
