#include "gateway/gateway.h"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <set>
#include <span>

#include "core/protocol/anthropic_error.h"
#include "core/protocol/context_overflow.h"
#include "core/protocol/inline_data.h"
#include "core/protocol/inline_system.h"
#include "core/protocol/multipart_field.h"
#include "core/protocol/reply_content.h"
#include "core/protocol/response_observer.h"
#include "core/routing/keyless_route.h"
#include "core/routing/prompt_hasher.h"
#include "gateway/adapter_update.h"
#include "gateway/broken_stream.h"
#include "gateway/peer_sync.h"
#include "gateway/prompt_count.h"
#include "gateway/web_assets.h"
#include "net/content_coding.h"
#include "net/cross_origin.h"
#include "net/field_list.h"
#include "net/hangup_watch.h"
#include "net/http_read.h"
#include "net/off_thread.h"
#include "net/relay_parser.h"
#include "net/server_tls.h"
#include "net/transfer_at_once.h"
#include "net/upstream_io.h"
#include "net/write_now.h"
#include "util/append_number.h"
#include "util/ascii_case.h"
#include "util/json_escape.h"
#include "util/normalised_path.h"
#include "util/percent_decode.h"
#include "util/query_string.h"
#include "util/system_time.h"

namespace warden {

using namespace std::string_view_literals;  // literals appended without a strlen
namespace {

// Each thread's share of config `max_connections` (0: from the open-file limit as it is now, the
// serve command having raised it), at least 16.
size_t MaxConnectionsPerThread(int configured, size_t threads) {
  int64_t total = configured;
  if (total == 0) {
    rlimit files{};
    ::getrlimit(RLIMIT_NOFILE, &files);
    total = files.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20
                                            : (static_cast<int64_t>(files.rlim_cur) - 256) / 2;
  }
  return static_cast<size_t>(std::max<int64_t>(16, total / static_cast<int64_t>(threads)));
}

// When the drain's time is up, how long a stream being relayed has to send its error event (the
// replica's side is closed at once) before its client's connection is closed too. Within the
// serve loop's half second between the cut and the stop.
constexpr std::chrono::milliseconds kStreamEndGrace{200};

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);
// A client that hangs up is noticed at most this late; requests answered sooner cost no watch.
constexpr std::chrono::milliseconds kHangupWatchDelay{5};
// A reused connection that fails this soon after the request went out was closed by the server
// before it read the request, and the request is sent again on a new one.
constexpr std::chrono::milliseconds kStaleConnectionWindow{500};
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
// Interim (1xx) responses read before a replica's answer is taken for malformed.
constexpr int kMostInterimResponses = 16;
// Read by the official OpenAI and Anthropic clients: "false" keeps them from sending a request
// again on an error they would otherwise retry.
constexpr std::string_view kShouldRetry = "x-should-retry";

// How often a shard's replica-loss watch looks at its waiting requests: once a second, or often
// enough that a read_timeout_s under 4 s is kept to within a quarter of it.
std::chrono::milliseconds LossWatchPeriod(double read_timeout_s) {
  constexpr std::chrono::milliseconds kDefault{1000}, kShortest{5};
  if (read_timeout_s <= 0) return kDefault;
  const auto quarter = std::chrono::milliseconds(static_cast<int64_t>(read_timeout_s * 250));
  return std::clamp(quarter, kShortest, kDefault);
}

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

// A response Beast could not parse (not a broken connection): the replica's fault, and a proxy
// passes on no such response.
bool IsMalformedResponse(const boost::system::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_version).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message &&
         ec != http::error::need_more;
}

// The fields the request's Connection fields name, sorted without regard to case (so that a
// crafted header naming thousands costs n log n, not names × fields).
std::vector<std::string_view> ConnectionNames(const HttpRequest& request) {
  std::vector<std::string_view> names;
  const auto [first, last] = request.equal_range(http::field::connection);
  for (auto it = first; it != last; ++it)
    ForEachToken(it->value(), [&](std::string_view token) { names.push_back(token); });
  std::sort(names.begin(), names.end(), beast::iless());
  return names;
}

// A field's whole line, "Name: value\r\n", as Beast's field container keeps it (one piece, for one
// append instead of four); empty where it is not kept so. (Beast 1.81 writes each field so, into
// one allocation with its name: the checks find that layout before the CRLF past the value is
// read.)
std::string_view FieldLine(const HttpRequest::value_type& field) {
  const std::string_view name = field.name_string(), value = field.value();
  const char* const colon = name.data() + name.size();
  if (value.data() != colon + 2 || colon[0] != ':' || colon[1] != ' ') return {};
  const char* const end = value.data() + value.size();
  if (end[0] != '\r' || end[1] != '\n') return {};
  return {name.data(), static_cast<size_t>(end + 2 - name.data())};
}

// Appends the request's end-to-end fields to `head`, without those `named` (sorted by
// beast::iless); returns whether a Connection field names some.
// The client's credentials are left out (`no_credentials`) where the gateway sends the replicas'
// own key instead.
bool WriteEndToEndFields(const HttpRequest& request, std::span<const std::string_view> named,
                         bool no_credentials, std::string* head) {
  bool connection_names = false;
  for (const auto& f : request) {
    if (IsHopByHop(f.name()) || f.name() == http::field::host) {
      if (f.name() == http::field::connection && NamesFields(f.value())) connection_names = true;
      continue;
    }
    const std::string_view name = f.name_string();
    if (f.name() == http::field::unknown && IEquals(name, "x-data-parallel-rank")) continue;
    if (no_credentials && (f.name() == http::field::authorization ||
                           (f.name() == http::field::unknown && IEquals(name, "x-api-key"))))
      continue;
    if (std::binary_search(named.begin(), named.end(), name, beast::iless())) continue;
    if (const std::string_view line = FieldLine(f); !line.empty()) {
      head->append(line);
    } else {
      head->append(name).append(": "sv).append(std::string_view(f.value())).append("\r\n"sv);
    }
  }
  return connection_names;
}

// The request as a replica gets it, into `head`: the client's request line and end-to-end fields,
// the replica's Host and rank, and the body's length. With an `authorization` (the replicas' key
// as "Bearer <key>"), that goes in place of the client's credentials.
void WriteUpstreamHead(const HttpRequest& request, const UpstreamUrl& url, int rank,
                       std::string_view via, std::string_view authorization, std::string* head) {
  head->assign(std::string_view(request.method_string())).append(" "sv).append(url.base_path);
  const std::string_view target = OriginForm(request.target());
  if (target.starts_with('?')) head->push_back('/');
  head->append(target).append(" HTTP/1.1\r\nHost: "sv).append(url.host);
  if (!url.default_port()) {  // as clients write it: a proxy in front may match the name only
    head->append(":"sv);
    AppendNumber(head, url.port);
  }
  head->append("\r\n"sv);
  const size_t fields_start = head->size();
  // Rarely, a Connection field names other fields: written again without them.
  const bool own_key = !authorization.empty();
  if (WriteEndToEndFields(request, {}, own_key, head)) {
    head->resize(fields_start);
    const std::vector<std::string_view> named = ConnectionNames(request);
    WriteEndToEndFields(request, named, own_key, head);
  }
  if (own_key) head->append("Authorization: "sv).append(authorization).append("\r\n"sv);
  head->append("Via: "sv).append(via).append("\r\n"sv);
  if (rank >= 0) {
    head->append("X-data-parallel-rank: "sv);
    AppendNumber(head, rank);
    head->append("\r\n"sv);
  }
  const http::verb method = request.method();
  if (!request.body().empty() || method == http::verb::post || method == http::verb::put ||
      method == http::verb::options) {
    head->append("Content-Length: "sv);
    AppendNumber(head, static_cast<int64_t>(request.body().size()));
    head->append("\r\n"sv);
  }
  head->append("\r\n"sv);
}

// How many body limits' worth of decoded (once compressed) request bodies the gateway holds at
// most (Gateway::decoded_bytes_held_).
constexpr int64_t kDecodedBodyLimits = 8;

// Threads that decode compressed request bodies (Gateway::decode_pool_): one per four shards (one
// below eight), since few clients compress; each decodes one body at a time, so this bounds the
// memory bodies being decoded take too.
size_t DecodeThreads(size_t shards) {
  return std::max<size_t>(1, shards / 4);
}

// Bodies waiting for each decoding thread at most (or being decoded): past that a 503, so that
// clients sending bodies slow to decode hold up other compressed requests a few seconds at most.
constexpr int64_t kDecodesPerThread = 16;

// The largest error body read whole before it goes out.
constexpr uint64_t kLargestError = 64 * 1024;
// How long a context error waits for the replica to count the prompt (CountPromptTokens).
constexpr std::chrono::milliseconds kPromptCountTimeout{5000};

// Anthropic's API: /v1/messages and the paths under it (count_tokens, batches).
bool OnAnthropicsApi(std::string_view path) {
  return path.starts_with("/v1/messages") &&
         (path.size() == std::string_view("/v1/messages").size() || path[12] == '/');
}

// A replica's error on Anthropic's API, small, or of a length it did not say (chunked, or to the
// connection's end) but no event stream (whose events go out as they come): read before it goes
// out, so that it can be said in Anthropic's shape (core/protocol/anthropic_error.h), and a
// context error as Anthropic's API says it (core/protocol/context_overflow.h). vLLM's Anthropic
// endpoint answers a prompt longer than the context with a 400, or in later versions with a 500
// (any exception there is an internal error).
bool SaysErrorsInAnthropicsWords(const HttpRequest& request, int status,
                                 std::optional<uint64_t> length, bool event_stream) {
  return status >= 400 && status <= 599 && (!length || *length <= kLargestError) &&
         (length || !event_stream) && request.method() != http::verb::head &&
         OnAnthropicsApi(TargetPath(request.target()));
}

// The first line of field `name` (lower case, with its colon) in a relayed `head`: its start and
// the end of its value; npos if none.
std::pair<size_t, size_t> FindField(std::string_view head, std::string_view name) {
  for (size_t line = head.find("\r\n"); line != std::string_view::npos;) {
    const size_t start = line + 2;
    const size_t end = head.find("\r\n", start);
    if (end == std::string_view::npos) break;
    if (end - start >= name.size() && IEquals(head.substr(start, name.size()), name))
      return {start, end};
    line = end;
  }
  return {std::string_view::npos, std::string_view::npos};
}

// Whether a relayed `head` says its body is encoded (gzip, say: the client's Accept-Encoding
// went to the replica): such a body is passed on as it is, not read for its words.
bool BodyEncoded(std::string_view head) {
  constexpr std::string_view kName = "content-encoding:";
  const auto [start, end] = FindField(head, kName);
  if (start == std::string_view::npos) return false;
  std::string_view value = head.substr(start + kName.size(), end - start - kName.size());
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return !value.empty() && !IEquals(value, "identity");
}

// `head`'s Content-Type field (if any) replaced by application/json's.
void SayJson(std::string* head) {
  const auto [start, end] = FindField(*head, "content-type:");
  if (start != std::string::npos) head->erase(start, end + 2 - start);
  head->append("Content-Type: application/json\r\n");
}

// `head`'s status line replaced by "HTTP/1.1 400 Bad Request".
void SayBadRequest(std::string* head) {
  const size_t end = head->find("\r\n");
  if (end != std::string::npos) head->replace(0, end, "HTTP/1.1 400 Bad Request");
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

// How a request's route is shown (x-warden-route, the access log) and counted: what generates
// nothing (a stored response read, a probe) follows no conversation's turns, so it is balanced
// wherever it had to go.
RouteKind ShownKind(const RouteDecision& decision, bool generation) {
  return generation ? decision.kind : RouteKind::kBalanced;
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

// What the replica reported of a relayed request, for its access-log line. `whole`: the response
// came to its end (else an output count is a stream's opening figure, not its total);
// `client_left`: the client went away before it did.
void NoteOutcome(const RequestOutcome& outcome, bool whole, bool client_left, std::string* note) {
  if (outcome.broke_off) {
    note->append(" cut");  // its status went out before the break
  } else if (client_left && !whole) {
    note->append(" left");
  }
  if (outcome.prompt_tokens >= 0) {
    fmt::format_to(std::back_inserter(*note), " prompt={}", outcome.prompt_tokens);
    if (outcome.cached_tokens >= 0) {
      fmt::format_to(std::back_inserter(*note), " cached={}", outcome.cached_tokens);
    } else {
      note->append(" cached=?");  // unknown: not said (no --enable-prompt-tokens-details), or
                                  // dropped as implausible
    }
  }
  if (outcome.output_tokens >= 0 && whole)
    fmt::format_to(std::back_inserter(*note), " output={}", outcome.output_tokens);
  if (outcome.ttft_s >= 0)
    fmt::format_to(std::back_inserter(*note), " ttft={:.3f}s", outcome.ttft_s);
}

// Whether the request generates tokens (and so belongs to a conversation's turns).
bool IsGeneration(std::string_view path) {
  return path == "/v1/messages" || path == "/v1/chat/completions" || path == "/v1/completions" ||
         path == "/v1/responses";
}

// The endpoints whose body must be a JSON object (a malformed one gets a 400 from the gateway).
bool IsJsonApi(std::string_view path) {
  return IsGeneration(path) || path == "/v1/messages/count_tokens";
}

// What the gateway answers itself on the replicas' API (its errors, the models list) a page of
// any site may read, as it may read the replicas' own answers with vLLM's default CORS settings:
// without it a browser client sees a bare network failure where vLLM gives it a typed error.
// The gateway takes no ambient credentials (cookies), so this lets no page act as the user.
void AllowAnyOriginOnTheApi(const HttpRequest& request, HttpResponse& response) {
  if (TargetPath(request.target()).starts_with("/v1/")) AllowAnyOrigin(request, response);
}

// What a client is told of a response `replica` (-1: the engine's balancer's) broke off in the
// middle: it closed its connection, or sent nothing for `silent_s` seconds.
constexpr std::string_view kStoppedMidStream =
    "the gateway stopped (its drain's time ran out) in the middle of this response: what came "
    "before is not the whole answer; send the request again";

std::string BrokeOffMessage(int replica, double silent_s) {
  const std::string who = replica >= 0 ? fmt::format("replica {}", replica) : "the replica";
  const std::string what =
      silent_s > 0 ? fmt::format("sent nothing for {:g} s (the gateway's read_timeout_s)", silent_s)
                   : std::string("closed its connection");
  return fmt::format(
      "{} {} in the middle of this response: what came before is not the whole answer; send the "
      "request again",
      who, what);
}

// The answer to a path that repeats /v1 (/v1/v1/messages): the client's base URL ends in /v1, and
// its SDK adds /v1 too. Else the replica's bare 404, which Claude Code takes for a model problem.
std::string DoubledV1(std::string_view path) {
  return fmt::format(
      "no such path: {} repeats /v1; the client's base URL ends in /v1 and its SDK adds one too "
      "(Claude Code's ANTHROPIC_BASE_URL and Anthropic's SDKs take the gateway's address alone, "
      "http://host:port; OpenAI's SDKs take it with one /v1)",
      ValidUtf8OrEscaped(path.substr(0, 64)));
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

// A browser's CORS preflight (OPTIONS with Origin and Access-Control-Request-Method). Browsers
// never send credentials with one, so vLLM's --api-key lets OPTIONS through for its CORS settings
// to answer; the gateway passes preflights on to a replica the same way.
bool IsCorsPreflight(const HttpRequest& request) {
  return request.method() == http::verb::options &&
         request.find(http::field::origin) != request.end() &&
         request.find(http::field::access_control_request_method) != request.end();
}

// Whether the request's body is JSON by its Content-Type (media type "application/json", any
// parameters), as vLLM's routes want it.
bool IsJsonContentType(const HttpRequest& request) {
  std::string_view type = FirstFieldValue(request, http::field::content_type);
  type = type.substr(0, type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  return IEquals(type, "application/json");
}

// Whether the API keys guard a request: all but the admin API (which has its own token, and is
// always answered here), CORS preflights, and what the gateway answers itself to a GET or HEAD:
// the probes, health, metrics and the panel. Anything else could reach a replica (a POST /, a
// /panel/../v1/... that a proxy in front of the replica normalises), so it needs a key.
// `admin_decides`: the admin token guards the path instead (adapter updates, when there is one).
bool GuardedByApiKeys(const HttpRequest& request, std::string_view path, bool admin_decides) {
  if (IsAdminPath(path)) return false;
  if (admin_decides) return false;
  const http::verb method = request.method();
  if (method == http::verb::options && IsCorsPreflight(request)) return false;
  if (method != http::verb::get && method != http::verb::head) return true;
  return !(path == "/" || path == "/api/hello" || path == "/health" || path == "/ready" ||
           path == "/metrics" || path == "/panel" || path.starts_with("/panel/"));
}

// The stored response a path names (GET or DELETE /v1/responses/{id}[/...]); empty if none.
std::string_view StoredResponseId(std::string_view path) {
  constexpr std::string_view kPrefix = "/v1/responses/";
  if (!path.starts_with(kPrefix)) return {};
  path.remove_prefix(kPrefix.size());
  return path.substr(0, path.find('/'));
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

// The request headers as the session-key extractor reads them, without copying.
std::vector<HeaderView>& HeaderViews(const HttpRequest& request) {
  thread_local std::vector<HeaderView> views;
  views.clear();
  for (const auto& f : request) views.push_back({f.name_string(), f.value()});
  return views;
}

// /v1/models is both APIs': an error is said in Anthropic's shape to a client that names its API
// version.
ErrorShape ModelsErrorShape(const HttpRequest& request) {
  return request.find("anthropic-version") != request.end() ? ErrorShape::kAnthropic
                                                            : ErrorShape::kOpenAi;
}

}  // namespace

// The panel's page and assets (web/, embedded at build time).
HttpResponse PanelResponse(const HttpRequest& request, std::string_view path);
HttpResponse PanelFile(const HttpRequest& request, std::string_view path);

struct Gateway::Upstream {
  std::unique_ptr<UpstreamConnection> connection;
  bool client_gone = false;
  // The replica answered with something that is not an HTTP response (or not one a proxy may
  // pass on): a 502, with no retry, as it would answer the same again.
  std::string malformed;
  // The connection was made, and then broke (while the request went out, or before a whole
  // response head came back): the replica is up, and took or refused this request.
  bool dropped = false;
  // No connection could be opened for want of the gateway's own resources (IsLocalResourceError):
  // what went wrong. Not the replica's fault, and no other would do better. (A code, not its
  // message: an Upstream is moved a few times on every request.)
  boost::system::error_code local_failure;
  // The replica sent no response head within read_timeout_s: a 504, not retried (it has the
  // request, and may be running it).
  bool timed_out = false;
  // The replica answered before it had read the whole request (an error from a proxy in front of
  // it, say) and closed, resetting the connection under the write: its answer, already in the
  // socket's receive buffer, is relayed; the connection is not kept.
  bool request_cut = false;
  // No connection: the server refused it (nothing listens on its port: it is down, and so are
  // all its ranks), rather than one that timed out (it may be only busy).
  bool refused = false;
  // The gateway's drain ran out of time before a response head came (ReplicaLossWatch::
  // EndRelays): a 503 to send it again, not the replica's failure.
  bool stopped = false;
};

Gateway::Gateway(std::vector<asio::io_context*> shards, GatewayConfig config)
    : unix_start_(std::chrono::system_clock::now()),
      shards_(std::move(shards)),
      config_(std::move(config)),
      start_(std::chrono::steady_clock::now()),
      admin_keys_(config_.admin_token.empty() ? std::vector<std::string>{}
                                              : std::vector<std::string>{config_.admin_token}),
      allowed_hosts_(config_.host, config_.allowed_hosts),
      clients_(std::make_shared<const ClientTable>(config_.api_keys, nullptr)),
      shard_clients_(ShardCopies(*clients_, shards_.size())),
      decode_pool_(std::make_unique<OffThreadPool>(DecodeThreads(shards_.size()))) {
  std::vector<asio::any_io_executor> executors;
  for (asio::io_context* io : shards_) executors.push_back(io->get_executor());
  for (const ModelConfig& m : config_.models) {
    models_.push_back(std::make_unique<ModelState>(m, executors));
    models_.back()->set_hash_prompts_flag(&hash_prompts_);
    NoteIfPolicyReadsPrefixes(*models_.back());
  }
  HttpServerOptions options;
  options.body_limit = config_.body_limit;
  options.send_timeout =
      std::chrono::seconds(std::max<int64_t>(1, std::llround(config_.send_timeout_s)));
  options.header_timeout =
      std::chrono::seconds(std::max<int64_t>(1, std::llround(config_.header_timeout_s)));
  options.server_name = "warden";
  options.reuse_port = true;
  options.access_log = config_.access_log;
  access_log_ = config_.access_log;
  options.unlogged_paths = {std::string(kPeerHomesPath)};
  options.max_connections = MaxConnectionsPerThread(config_.max_connections, shards_.size());
  if (!config_.tls_cert_file.empty()) {
    std::string error;
    options.tls = MakeServerTlsContext(config_.tls_cert_file, config_.tls_key_file, &error);
    if (!options.tls) throw std::runtime_error("tls_cert_file, tls_key_file: " + error);
  }
  options.malformed_body = [this](std::string_view target, int status, std::string_view message) {
    const std::string_view path = TargetPath(target);
    if (IsAdminPath(path)) {  // the admin API's own shape
      return std::pair<std::string, std::string>(
          fmt::format(R"({{"error":{{"message":{}}}}})", JsonString(message)), "application/json");
    }
    own_error_answers_.Add(status);
    return std::pair<std::string, std::string>(ErrorBody(ErrorShapeFor(path), status, message),
                                               "application/json");
  };
  for (size_t i = 0; i < shards_.size(); ++i) {
    const int shard = static_cast<int>(i);
    // A client without a key is answered before its body (up to body_limit) is read.
    options.answer_head = [this, shard](const HttpRequest& head) {
      return RefuseKeylessHead(head, shard);
    };
    http_.push_back(std::make_unique<HttpServer>(
        executors[i], [this, shard](HttpExchange& ex) { return Handle(ex, shard); }, options));
    hangup_armers_.push_back(std::make_unique<HangupWatchArmer>(executors[i], kHangupWatchDelay));
    loss_watches_.push_back(
        std::make_unique<ReplicaLossWatch>(executors[i], LossWatchPeriod(config_.read_timeout_s)));
  }
  std::vector<ModelState*> models;
  for (auto& m : models_) models.push_back(m.get());
  peer_sync_ = std::make_unique<PeerSync>(config_, std::move(models), executors[0],
                                          [this] { return Now(); });
  via_ = "1.1 warden-" + peer_sync_->instance();
}

Gateway::~Gateway() {
  if (drainer_.joinable()) drainer_.join();
  if (state_writer_.joinable()) state_writer_.join();
}

// How long a starting gateway waits for its peers' homes before it listens.
constexpr std::chrono::milliseconds kPeerPullBudget{2000};

uint16_t Gateway::Start(const std::vector<int>& passed_listeners) {
  const bool passed = !passed_listeners.empty();
  // The shards share the port (SO_REUSEPORT) with no one else.
  if (!passed) CheckPortFree(config_.host, config_.port);
  RestoreState();
  // Peers' homes before the first request: none of their conversations is placed afresh here.
  if (peer_sync_->enabled()) peer_sync_->PullFromPeers(kPeerPullBudget);
  const uint16_t port =
      passed ? AdoptListeners(passed_listeners) : http_[0]->Listen(config_.host, config_.port);
  if (!passed) {
    for (size_t i = 1; i < http_.size(); ++i) http_[i]->Listen(config_.host, port);
  }
  for (auto& model : models_) {
    for (size_t p = 0; p < model->pools().size(); ++p) {
      asio::co_spawn(*shards_[0], ScrapeLoop(model.get(), p), asio::detached);
    }
  }
  for (size_t i = 0; i < shards_.size(); ++i)
    asio::co_spawn(*shards_[i], PoolSweepLoop(static_cast<int>(i)), asio::detached);
  peer_sync_->Start();
  if (!config_.state_file.empty()) asio::co_spawn(*shards_[0], SaveStateLoop(), asio::detached);
  return port;
}

// Socket j goes to shard j mod (shards), so that every socket is accepted on; a shard left
// without one accepts on its own descriptor of socket (shard mod sockets). A socket shared by
// shards gives each connection to whichever accepts first. Returns the first socket's port.
uint16_t Gateway::AdoptListeners(const std::vector<int>& fds) {
  const size_t shards = http_.size();
  uint16_t port = 0;
  for (size_t j = 0; j < fds.size(); ++j) {
    try {
      const uint16_t p = http_[j % shards]->Adopt(fds[j]);
      if (j == 0) port = p;
    } catch (...) {
      for (size_t k = j + 1; k < fds.size(); ++k) ::close(fds[k]);
      throw;
    }
  }
  for (size_t i = fds.size(); i < shards; ++i) {
    const int copy = ::fcntl(fds[i % fds.size()], F_DUPFD_CLOEXEC, 0);
    if (copy < 0) throw boost::system::system_error(errno, boost::system::system_category(), "dup");
    http_[i]->Adopt(copy);
  }
  return port;
}

std::vector<int> Gateway::listening_fds() const {
  std::vector<int> fds;
  for (const auto& h : http_) {
    for (int fd : h->listening_fds()) fds.push_back(fd);
  }
  return fds;
}

// An upstream connection idle through this many sweeps (a second apart) is closed: after 2-3 s,
// inside vLLM's 5 s keep-alive timeout.
constexpr int kPoolIdleSweeps = 3;

asio::awaitable<void> Gateway::PoolSweepLoop(int shard) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!stopped_) {
    timer.expires_after(std::chrono::seconds(1));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    for (auto& model : models_) {
      for (auto& pool : model->pools()) pool->SweepIdle(shard, kPoolIdleSweeps);
    }
  }
}

void Gateway::Drain(std::chrono::steady_clock::time_point deadline) {
  // Held requests wake once a second to look: given up early enough for their answers to go out.
  constexpr auto kHeldGiveUpMargin = std::chrono::milliseconds(1500);
  if (deadline != std::chrono::steady_clock::time_point::max()) {
    const int64_t give_up = (deadline - kHeldGiveUpMargin).time_since_epoch().count();
    if (give_up < give_up_held_at_) give_up_held_at_ = give_up;
  }
  if (drainer_.joinable()) return;  // draining already: a nearer deadline is all that changes
  drain_begun_.store(true);
  for (auto& m : models_) m->StopReserving();
  // The save is written before the listeners close: a gateway taking over the port (and the state
  // file) can only start after that, and then reads this save rather than an older one. On a
  // thread of its own: a large table takes a while, and this shard's requests go on meanwhile.
  const auto save_then_close = [this] {
    SaveState(SaveWhen::kDrain);
    for (auto& h : http_) h->Drain();
  };
  try {
    drainer_ = std::thread(save_then_close);
  } catch (const std::system_error&) {  // no thread to be had
    save_then_close();
  }
}

void Gateway::AnnounceStop() {
  drain_begun_.store(true);
  for (auto& h : http_) h->CloseConnectionsAfterAnswers();
}

bool Gateway::draining() const {
  for (const auto& h : http_) {
    if (!h->draining()) return false;
  }
  return true;
}

int Gateway::open_connections() const {
  int n = 0;
  for (const auto& h : http_) n += h->open_connections();
  return n;
}

void Gateway::CutShort() {
  for (size_t i = 0; i < http_.size(); ++i) {
    http_[i]->CutShort(kStreamEndGrace);
    asio::dispatch(*shards_[i], [watch = loss_watches_[i].get()] { watch->EndRelays(); });
  }
}

void Gateway::StopDecoding() {
  decode_pool_.reset();
}

void Gateway::Stop() {
  if (drainer_.joinable()) drainer_.join();
  if (!stopped_) SaveState(SaveWhen::kFinal);
  stopped_ = true;
  peer_sync_->Stop();
  for (auto& h : http_) h->Close();
}

bool Gateway::PeersTold() const {
  return peer_sync_->Stopped();
}

double Gateway::UnixTime(double now) const {
  return std::chrono::duration<double>(unix_start_.time_since_epoch()).count() + now;
}

// Each shard's own copy of a table (sharing its clients' counters): the reference count a request
// takes is then its shard's alone, not a cache line all shards write.
std::vector<std::shared_ptr<const ClientTable>> Gateway::ShardCopies(const ClientTable& table,
                                                                     size_t shards) {
  std::vector<std::shared_ptr<const ClientTable>> copies;
  for (size_t i = 0; i < shards; ++i) copies.push_back(std::make_shared<const ClientTable>(table));
  return copies;
}

std::shared_ptr<const ClientTable> Gateway::Clients() const {
  std::lock_guard lock(clients_mu_);
  return clients_;
}

std::string Gateway::ReloadClientKeys(const std::vector<ClientKey>& keys,
                                      std::function<void()> taken) {
  if (std::string error = ValidateClientKeys(keys); !error.empty()) return error;
  std::lock_guard lock(clients_mu_);
  if (keys.empty() && !clients_->empty())
    return "no key given: a gateway whose model API needs keys keeps asking for them (restart it "
           "to open it)";
  auto table = std::make_shared<const ClientTable>(keys, clients_.get());
  clients_ = table;
  auto shards_left = std::make_shared<std::atomic<size_t>>(shards_.size());
  std::vector<std::shared_ptr<const ClientTable>> copies = ShardCopies(*table, shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i) {
    asio::post(*shards_[i], [this, i, copy = std::move(copies[i]), shards_left, taken] {
      shard_clients_[i] = copy;
      if (shards_left->fetch_sub(1) == 1 && taken) taken();
    });
  }
  return {};
}

void Gateway::SetAccessLog(bool on, std::function<void()> taken) {
  access_log_ = on;
  auto shards_left = std::make_shared<std::atomic<size_t>>(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i) {
    asio::post(*shards_[i], [this, i, on, shards_left, taken] {
      http_[i]->SetAccessLog(on);
      if (shards_left->fetch_sub(1) == 1 && taken) taken();
    });
  }
}

std::string Gateway::ReloadTls(std::function<void()> taken) {
  std::string error;
  std::shared_ptr<asio::ssl::context> context =
      MakeServerTlsContext(config_.tls_cert_file, config_.tls_key_file, &error);
  if (!context) return error;
  auto shards_left = std::make_shared<std::atomic<size_t>>(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i) {
    asio::post(*shards_[i], [this, i, context, shards_left, taken] {
      http_[i]->SetTls(context);
      if (shards_left->fetch_sub(1) == 1 && taken) taken();
    });
  }
  return {};
}

std::optional<HttpResponse> Gateway::RefuseKeylessHead(const HttpRequest& head, int shard) {
  if (std::optional<HttpResponse> refused = RefuseUnknownHost(head)) return refused;
  const std::string_view target_path = TargetPath(head.target());
  if (IsAdminPath(target_path)) {
    // The admin token, or a cross-site write, is refused from the head too: its body (up to
    // body_limit) is not read first.
    if (std::optional<HttpResponse> refused = RefuseAdminRequest(head)) return refused;
    return std::nullopt;
  }
  std::string storage;
  const std::string_view normalised = NormalisedPathView(target_path, &storage);
  const AdapterPath adapter_path = ClassifyNormalisedAdapterPath(normalised);
  if (std::optional<HttpResponse> refused = RefuseAdapterRequest(head, adapter_path))
    return refused;
  if (std::optional<HttpResponse> refused = RefuseFleetRequest(head, normalised)) return refused;
  const ClientTable& clients = *shard_clients_[shard];
  if (clients.empty()) return std::nullopt;
  const bool admin_decides = AdminDecides(adapter_path, normalised, head.method());
  if (!GuardedByApiKeys(head, target_path, admin_decides) || clients.Find(head) ||
      AdminsRead(head, normalised))
    return std::nullopt;
  return Unauthorized(head, ErrorShapeFor(target_path));
}

std::optional<HttpResponse> Gateway::RefuseAdapterRequest(const HttpRequest& request,
                                                          AdapterPath adapter_path) {
  if (adapter_path == AdapterPath::kNone) return std::nullopt;
  if (adapter_path == AdapterPath::kSageMaker) {
    return Error(request, ErrorShape::kOpenAi, 404,
                 "/adapters is not passed on: it would load or unload an adapter on one server "
                 "only; the gateway does it on every server of a model through POST "
                 "/v1/load_lora_adapter and /v1/unload_lora_adapter",
                 ErrorCode::kUnknownPath);
  }
  if (IsCorsPreflight(request)) return std::nullopt;
  // The gateway sends every server a JSON body: it takes only what vLLM's route takes, so that a
  // web page's text/plain POST cannot slip through; nor does a page of another site get in.
  if (request.method() == http::verb::post && CrossOrigin(request)) {
    return Error(request, ErrorShape::kOpenAi, 403,
                 "loading or unloading a LoRA adapter from a page of another site is refused");
  }
  if (request.method() == http::verb::post && !IsJsonContentType(request)) {
    return Error(request, ErrorShape::kOpenAi, 415,
                 "Unsupported Media Type: Only 'application/json' is allowed");
  }
  // (A browser's CORS preflight carries no credentials; the request after it does.)
  if (admin_keys_.empty() || admin_keys_.AcceptsBearer(request[http::field::authorization]))
    return std::nullopt;
  unauthorized_.fetch_add(1, std::memory_order_relaxed);
  HttpResponse response = Error(
      request, ErrorShape::kOpenAi, 401,
      "loading and unloading LoRA adapters needs the admin token: Authorization: Bearer <token>");
  response.set(http::field::www_authenticate, R"(Bearer realm="warden")");
  return response;
}

bool Gateway::AdminDecides(AdapterPath adapter_path, std::string_view path,
                           http::verb method) const {
  return !admin_keys_.empty() && (adapter_path != AdapterPath::kNone ||
                                  ChangesEveryServer(path, method) || ControlsTheEngine(path));
}

std::optional<HttpResponse> Gateway::RefuseFleetRequest(const HttpRequest& request,
                                                        std::string_view path) {
  const bool fleet = ChangesEveryServer(path, request.method());
  if (!fleet && !ControlsTheEngine(path)) return std::nullopt;
  if (CrossOrigin(request)) {  // a page of another site does not get to change every server
    return Error(request, ErrorShape::kOpenAi, 403,
                 fmt::format("{} from a page of another site is refused", path));
  }
  if (admin_keys_.empty() || admin_keys_.AcceptsBearer(request[http::field::authorization]))
    return std::nullopt;
  unauthorized_.fetch_add(1, std::memory_order_relaxed);
  HttpResponse response =
      Error(request, ErrorShape::kOpenAi, 401,
            fmt::format("{} {}: it needs the admin token: Authorization: Bearer <token>", path,
                        fleet ? "changes every server" : "controls the engine"));
  response.set(http::field::www_authenticate, R"(Bearer realm="warden")");
  return response;
}

HttpResponse Gateway::Unauthorized(const HttpRequest& request, ErrorShape shape) {
  unauthorized_.fetch_add(1, std::memory_order_relaxed);
  const bool some_key = request.find(http::field::authorization) != request.end() ||
                        request.find("x-api-key") != request.end();
  HttpResponse response =
      Error(request, shape, 401,
            some_key ? "invalid API key"
                     : "an API key is required: Authorization: Bearer <key>, or x-api-key: <key>");
  response.set(http::field::www_authenticate, R"(Bearer realm="warden")");
  return response;
}

void Gateway::CountClientUsage(ClientTable::Counts* client, const RequestOutcome& outcome) {
  if (!client) return;
  ClientTable::Counts& c = *client;
  if (outcome.prompt_tokens > 0) {
    // Each counter only grows: a scrape between two additions reads no computed share going back.
    const int cached = std::clamp(outcome.cached_tokens, 0, outcome.prompt_tokens);
    c.cached_tokens.fetch_add(cached, std::memory_order_relaxed);
    c.computed_tokens.fetch_add(outcome.prompt_tokens - cached, std::memory_order_relaxed);
  }
  if (outcome.output_tokens > 0)
    c.output_tokens.fetch_add(outcome.output_tokens, std::memory_order_relaxed);
}

bool Gateway::AdminsRead(const HttpRequest& request, std::string_view path) const {
  return path == "/is_sleeping" && request.method() == http::verb::get && !admin_keys_.empty() &&
         admin_keys_.AcceptsBearer(request[http::field::authorization]);
}

std::string Gateway::ViaAfter(const HttpRequest& request) const {
  std::string via;
  for (const auto& field : request) {
    if (field.name() == http::field::via) via.append(field.value()).append(", ");
  }
  return via + via_;
}

bool Gateway::CameBack(std::span<const HeaderView> headers) const {
  for (const HeaderView& h : headers) {
    if (h.name.size() == 3 && IEquals(h.name, "via") &&
        h.value.find(std::string_view(via_).substr(4)) != std::string_view::npos)  // "warden-<id>"
      return true;
  }
  return false;
}

std::chrono::steady_clock::duration Gateway::ReadTimeout() const {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(config_.read_timeout_s));
}

void Gateway::WarnShortOfResources(const std::string& what) {
  const int64_t second = static_cast<int64_t>(Now());
  if (short_of_resources_warned_.exchange(second, std::memory_order_relaxed) == second) return;
  spdlog::warn(
      "cannot open connections to replicas: {} (the gateway's own limit, not the replicas'; "
      "requests get 503 meanwhile)",
      what);
}

double Gateway::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Gateway::NoteIfPolicyReadsPrefixes(ModelState& model) {
  if (model.WithRouter([](ModelRouter& r) { return r.policy().uses_prefix(); }))
    hash_prompts_ = true;
}

ModelState* Gateway::FindModel(std::string_view name) const {
  for (const auto& m : models_) {
    if (m->name() == name) return m.get();
  }
  return nullptr;
}

// A name some replicas serve goes there as it is, before any alias: an alias would rewrite it to
// the model's name, and so run the base model in place of the LoRA adapter the client named.
ModelState* Gateway::ResolveModel(std::string_view requested, bool* as_served) const {
  if (as_served) *as_served = true;
  if (requested.empty()) return models_.size() == 1 ? models_[0].get() : nullptr;
  if (ModelState* m = FindModel(requested)) return m;
  for (const auto& m : models_) {
    if (m->served_names().Contains(requested)) return m.get();
  }
  for (const auto& m : models_) {
    if (!m->AliasMatches(requested)) continue;
    if (as_served) *as_served = false;
    return m.get();
  }
  return nullptr;
}

HttpResponse Gateway::Error(const HttpRequest& request, ErrorShape shape, int status,
                            std::string_view message, ErrorCode code) const {
  if (!IsAdminPath(TargetPath(request.target()))) own_error_answers_.Add(status);
  HttpResponse response = MakeResponse(request, static_cast<http::status>(status),
                                       ErrorBody(shape, status, message, code));
  AllowAnyOriginOnTheApi(request, response);
  return response;
}

namespace {

// A request on one of the API's paths spelt another way (an escape, a doubled slash, a dot
// segment) goes on as the path it was read as, `api_path`: the replica then serves what the
// gateway routed and counted (vLLM's server decodes escapes but merges no slashes:
// `//v1/messages` would be a 404 counted as a turn). Other paths go on as they came.
void SpellPlainly(HttpRequest& request, std::string_view api_path) {
  const std::string_view target = OriginForm(request.target());
  std::string plain(api_path);
  plain.append(
      target.substr(target.find('?') == std::string_view::npos ? target.size() : target.find('?')));
  request.target(plain);
}

// Every Content-Encoding field's codings, as one list (RFC 9110 §5.3).
std::string ContentCodings(const HttpRequest& request) {
  std::string codings;
  for (const auto& field : request) {
    if (field.name() != http::field::content_encoding) continue;
    if (!codings.empty()) codings.append(", ");
    codings.append(field.value());
  }
  return codings;
}

}  // namespace

// GCC 12 destroys some temporaries of a co_await expression twice, so every response is built
// into a named local before it is awaited.
std::optional<HttpResponse> Gateway::CheckEntry(HttpExchange& ex, int shard, RequestScope* scope) {
  scope->path = TargetPath(ex.request().target());
  // The path as the replica's server reads it (it decodes escapes): what the request is.
  scope->api_path = NormalisedPathView(scope->path, &scope->normalised);
  if (scope->api_path != scope->path && IsJsonApi(scope->api_path)) {
    SpellPlainly(ex.mutable_request(), scope->api_path);
    scope->path = scope->api_path = TargetPath(ex.request().target());
  }
  const HttpRequest& request = ex.request();
  const std::string_view path = scope->path;
  const std::string_view api_path = scope->api_path;
  scope->shape = ErrorShapeFor(api_path);
  // A request with a body had its host checked from its head (RefuseKeylessHead).
  if (request.body().empty()) {
    if (std::optional<HttpResponse> refused = RefuseUnknownHost(request)) return refused;
  }
  scope->adapter_path = ClassifyNormalisedAdapterPath(api_path);
  if (std::optional<HttpResponse> refused = RefuseAdapterRequest(request, scope->adapter_path))
    return refused;
  // A route that controls the engine, checked again here: the head's check runs only for a
  // request with a body still to read (found by review: a bodyless POST /pause went on unkeyed).
  if (ControlsTheEngine(api_path)) {
    if (std::optional<HttpResponse> refused = RefuseFleetRequest(request, api_path)) return refused;
  }
  // (Its token was checked: RefuseAdapterRequest above, RefuseFleetRequest above or later.)
  scope->admin_decides = AdminDecides(scope->adapter_path, api_path, request.method());
  if (!shard_clients_[shard]->empty()) {
    // Held for the request: a reload may replace the shard's table meanwhile.
    scope->clients = shard_clients_[shard];
    // The admin reads what its sleeps and wakes did with its own token.
    const bool admins_read = AdminsRead(request, api_path);
    if (GuardedByApiKeys(request, path, scope->admin_decides) && !admins_read) {
      scope->client = scope->clients->Find(request);
      if (!scope->client) return Unauthorized(request, scope->shape);
      scope->client->counts->requests.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (ex.body_too_large()) {  // whatever the path: a cut body is not to be read
    const std::string message =
        fmt::format("request body is over the gateway's limit of {} bytes", config_.body_limit);
    return Error(request, IsAdminPath(api_path) ? ErrorShape::kAdmin : scope->shape, 413, message);
  }
  if (std::optional<HttpResponse> local = LocalResponse(request, path)) return local;
  if (api_path.starts_with("/v1/v1/")) {  // no server has it: a base URL with /v1 once too many
    // In the shape of the API the path meant: Claude Code reads Anthropic's.
    return Error(request, ErrorShapeFor(api_path.substr(3)), 404, DoubledV1(api_path),
                 ErrorCode::kUnknownPath);
  }
  return std::nullopt;
}

bool Gateway::ControlsEngine(const HttpRequest& request, std::string_view api_path) const {
  const bool cache_reset = IsCacheReset(api_path) && request.method() == http::verb::post;
  return (cache_reset || IsSleepControl(api_path, request.method())) && !models_.empty();
}

asio::awaitable<void> Gateway::ControlEngine(HttpExchange& ex, int shard,
                                             std::string_view api_path) {
  const HttpRequest& request = ex.request();
  if (std::optional<HttpResponse> refused = RefuseFleetRequest(request, api_path)) {
    HttpResponse response = std::move(*refused);
    co_await ex.Respond(std::move(response));
    co_return;
  }
  // (Built before the co_await: GCC 12 mishandles the temporaries of a co_await's expression;
  // see above Gateway::Handle.)
  const std::string_view raw = request.target();
  std::string target(api_path);
  if (const size_t query = raw.find('?'); query != std::string_view::npos)
    target.append(raw.substr(query));
  if (IsCacheReset(api_path)) {
    co_await ResetCaches(ex, shard, std::move(target));
  } else {
    co_await ControlSleep(ex, shard, std::move(target), std::string(api_path));
  }
}

std::optional<HttpResponse> Gateway::RefuseWithoutModel(const HttpRequest& request,
                                                        const RequestScope& scope,
                                                        const BodyFacts& facts,
                                                        ModelState** model) const {
  if (AdapterUpdate(request, scope) && !*model && facts.model.empty() && models_.size() > 1) {
    return Error(
        request, scope.shape, 400,
        "several models are served here: name the one whose servers are to load or unload the "
        "adapter, as \"model\" in the body");
  }
  if (!*model && facts.model.empty() && !models_.empty() && !Generation(request, scope))
    *model = models_[0].get();
  if (*model) return std::nullopt;
  return Error(request, scope.shape, 404,
               facts.model.empty()
                   ? std::string("the request names no model and several are served")
                   : fmt::format("model '{}' is not served here ({})", facts.model, ServedHere()));
}

std::optional<HttpResponse> Gateway::PrepareForward(HttpExchange& ex, const RequestScope& scope,
                                                    ModelState& model, bool served_name,
                                                    const BodyFacts& facts, const SessionKey& key) {
  const HttpRequest& request = ex.request();
  if (access_log_.load(std::memory_order_relaxed)) {
    ex.note().append("model=").append(model.name());
    ex.note().append(" key=").append(KeySourceName(key.source));
    if (scope.client) ex.note().append(" client=").append(scope.client->name);
  }
  if (!served_name && facts.model_length > 0) {
    // An alias: the replicas know the model by its served name only.
    ex.mutable_request().body().replace(
        facts.model_offset, facts.model_length,
        facts.model_in_form ? model.name() : JsonString(model.name()));
  }
  if (model.inline_system_as_user() &&
      (scope.path == "/v1/messages" || scope.path == "/v1/messages/count_tokens") &&
      InlineSystemAsUser(&ex.mutable_request().body()) > 0) {
    model.CountInlineSystemRewrite();
  }
  // Nothing reaches a replica unchecked but a CORS preflight (GuardedByApiKeys leaves out only
  // what is answered here, and preflights): and that without a body (a browser sends none; found
  // by review: anyone's bytes went on to the replica) nor the replicas' key (Send).
  const bool preflight = IsCorsPreflight(request);
  if (preflight) ex.mutable_request().body().clear();
  if (scope.clients && !scope.client && !preflight && !scope.admin_decides)
    return Unauthorized(request, scope.shape);
  if (scope.client && !ClientTable::TakeSlot(*scope.client)) {
    HttpResponse response =
        Error(request, scope.shape, 429,
              fmt::format("client '{}' is at its limit of requests in progress (max_in_flight: {})",
                          scope.client->name, scope.client->max_in_flight));
    response.set(http::field::retry_after, "1");
    return response;
  }
  return std::nullopt;
}

bool Gateway::AdapterUpdate(const HttpRequest& request, const RequestScope& scope) {
  return (scope.adapter_path == AdapterPath::kLoad || scope.adapter_path == AdapterPath::kUnload) &&
         request.method() == http::verb::post;
}

// Only a POST asks for a generation (a CORS preflight, or a GET the replica refuses, does not).
bool Gateway::Generation(const HttpRequest& request, const RequestScope& scope) {
  return IsGeneration(scope.api_path) && request.method() == http::verb::post;
}

asio::awaitable<void> Gateway::Handle(HttpExchange& ex, int shard) {
  RequestScope scope;
  if (std::optional<HttpResponse> refused = CheckEntry(ex, shard, &scope)) {
    HttpResponse response = std::move(*refused);
    co_await ex.Respond(std::move(response));
    co_return;
  }
  const HttpRequest& request = ex.request();
  const std::string_view path = scope.path;
  const std::string_view api_path = scope.api_path;
  const ErrorShape shape = scope.shape;
  const std::vector<HeaderView>& headers = HeaderViews(request);
  if (CameBack(headers)) {
    HttpResponse response =
        Error(request, shape, 508,
              "the request came back to this gateway: a replica URL points at the gateway itself");
    co_await ex.Respond(std::move(response));
    co_return;
  }
  if (ControlsEngine(request, api_path)) {
    co_await ControlEngine(ex, shard, api_path);
    co_return;
  }
  // A compressed body, which vLLM's server would not read either: decoded, and passed on plain.
  DecodedBodyHold decoded_hold;
  std::string codings;
  if (IsJsonApi(api_path) && request.method() == http::verb::post)
    codings = ContentCodings(request);
  if (!codings.empty()) {
    std::optional<HttpResponse> refused =
        co_await DecodeBody(ex.mutable_request(), std::move(codings), shape, &decoded_hold);
    // `headers` again: other requests on this thread refilled it meanwhile, and the decoding
    // took the coding's fields off.
    HeaderViews(request);
    if (refused) {
      HttpResponse response = std::move(*refused);
      co_await ex.Respond(std::move(response));
      co_return;
    }
  }
  // A byte-order mark before a JSON body, which vLLM's server reads past: taken off here, so that
  // what rewrites the body (aliases, inline system messages) reads it as JSON too.
  if (IsJsonApi(api_path) && request.body().starts_with("\xEF\xBB\xBF"))
    ex.mutable_request().body().erase(0, 3);
  BodyFacts facts;
  if (std::optional<HttpResponse> refused = ReadBody(request, api_path, shape, headers, &facts)) {
    HttpResponse response = std::move(*refused);
    co_await ex.Respond(std::move(response));
    co_return;
  }
  // A stored response lives where its conversation does: a request about it goes there.
  SessionKey stored;
  int stored_on = -1;  // the replica that stored the response the request is about, if known
  ModelState* model = StoredResponseModel(path, &stored, &stored_on);
  bool served_name = true;  // the replicas know the name the request gives: passed on unchanged
  if (!model) model = ResolveModel(facts.model, &served_name);
  if (!model && !facts.model.empty() && request.method() == http::verb::post) {
    // Perhaps an adapter loaded on a replica since the names were last read.
    co_await RelearnServedNames(shard);
    HeaderViews(request);  // `headers` again: other requests on this thread refilled it meanwhile
    model = ResolveModel(facts.model, &served_name);
  }
  if (std::optional<HttpResponse> refused = RefuseWithoutModel(request, scope, facts, &model)) {
    HttpResponse response = std::move(*refused);
    co_await ex.Respond(std::move(response));
    co_return;
  }
  if (AdapterUpdate(request, scope)) {
    co_await UpdateAdapters(ex, shard, *model, scope.adapter_path == AdapterPath::kLoad);
    co_return;
  }
  const SessionKey key = KeyOf(*model, headers, served_name, std::move(stored), &facts, &stored_on);
  if (std::optional<HttpResponse> refused =
          PrepareForward(ex, scope, *model, served_name, facts, key)) {
    HttpResponse response = std::move(*refused);
    co_await ex.Respond(std::move(response));
    co_return;
  }
  const bool generation = Generation(request, scope);
  if (generation) model->CountKeySource(key.source);  // of the requests let through
  ClientSlot slot(scope.client ? scope.client->counts.get() : nullptr);
  const bool continues_stored = key.source == KeySource::kPreviousResponse;
  co_await Forward(ex, shard, *model, key, facts, generation, continues_stored, stored_on, slot);
}

asio::awaitable<std::optional<HttpResponse>> Gateway::DecodeBody(HttpRequest& request,
                                                                 std::string codings,
                                                                 ErrorShape shape,
                                                                 DecodedBodyHold* hold) {
  std::string* body = &request.body();
  const size_t limit = config_.body_limit;
  if (!DecodesBody(codings)) {  // identity, or a refusal: at once, on the shard
    const DecodedBody at_once = DecodeContentCoding(codings, body, limit);
    co_return Decoded(request, shape, at_once, hold);
  }
  const int64_t most = kDecodesPerThread * static_cast<int64_t>(DecodeThreads(shards_.size()));
  if (decodes_pending_.fetch_add(1, std::memory_order_relaxed) >= most) {
    decodes_pending_.fetch_sub(1, std::memory_order_relaxed);
    decode_refusals_queue_.fetch_add(1, std::memory_order_relaxed);
    HttpResponse response =
        Error(request, shape, 503,
              fmt::format("the gateway has {} compressed request bodies to decode, its most: send "
                          "it again shortly, or uncompressed",
                          most),
              ErrorCode::kGatewayResources);
    response.set(http::field::retry_after, "1");
    co_return response;
  }
  struct Pending {  // until the decoding is back (or has failed), whichever way this frame ends
    std::atomic<int64_t>& count;
    ~Pending() { count.fetch_sub(1, std::memory_order_relaxed); }
  } pending{decodes_pending_};
  // Off the shard: a few kilobytes can take tens of milliseconds to decode, which the shard's
  // other connections would wait for. The request is this coroutine's, untouched meanwhile.
  auto decode = [&codings, body, limit] { return DecodeContentCoding(codings, body, limit); };
  const DecodedBody decoded = co_await decode_pool_->Run(decode);
  co_return Decoded(request, shape, decoded, hold);
}

std::optional<HttpResponse> Gateway::Decoded(HttpRequest& request, ErrorShape shape,
                                             const DecodedBody& decoded, DecodedBodyHold* hold) {
  if (decoded.status != 200)
    return Error(request, shape, decoded.status, ValidUtf8OrEscaped(decoded.error));
  if (!decoded.decoded) return std::nullopt;  // identity: the body is as it came
  const int64_t bytes = static_cast<int64_t>(request.body().size());
  const int64_t budget = kDecodedBodyLimits * static_cast<int64_t>(config_.body_limit);
  if (decoded_bytes_held_.fetch_add(bytes, std::memory_order_relaxed) + bytes > budget) {
    decoded_bytes_held_.fetch_sub(bytes, std::memory_order_relaxed);
    decode_refusals_memory_.fetch_add(1, std::memory_order_relaxed);
    HttpResponse response =
        Error(request, shape, 503,
              fmt::format("the gateway holds {} bytes of decoded request bodies, its most ({} "
                          "times the body limit): send it again shortly, or uncompressed",
                          budget, kDecodedBodyLimits),
              ErrorCode::kGatewayResources);
    response.set(http::field::retry_after, "1");
    return response;
  }
  hold->Hold(&decoded_bytes_held_, bytes);
  // Digests of the coded body no longer match.
  for (const std::string_view digest : {"Content-MD5", "Digest", "Content-Digest", "Repr-Digest"})
    request.erase(digest);
  request.erase(http::field::content_encoding);
  return std::nullopt;
}

std::optional<HttpResponse> Gateway::ReadBody(const HttpRequest& request, std::string_view api_path,
                                              ErrorShape shape,
                                              const std::vector<HeaderView>& headers,
                                              BodyFacts* facts) {
  const std::string& body = request.body();
  if (body.empty()) {
    if (IsJsonApi(api_path) && request.method() == http::verb::post)
      return Error(request, shape, 400, "the request has no body: expected one JSON object");
    return std::nullopt;
  }
  std::string error;
  BodyReadOptions read;
  read.hash_prompt = hash_prompts_.load(std::memory_order_relaxed);
  read.model_only = ClaudeCodeHeaderKeys(headers);
  read.hash_opening = config_.session.key_from_opening && IsGeneration(api_path) &&
                      !read.model_only && !HeadersCarryKey(headers, config_.session);
  if (!ReadBodyFacts(body, body.capacity(), config_.session, facts, &error, read)) {
    // Paths the gateway does not serve itself take any body (a multipart audio upload): passed
    // on as they are, to the single or first model.
    if (IsJsonApi(api_path)) return Error(request, shape, 400, error);
    *facts = BodyFacts{};
    // A transcription's upload names its model in a form field.
    if (const auto field = MultipartField(request[http::field::content_type], body, "model");
        field && IsPlainText(field->value)) {
      facts->model = field->value;
      facts->model_offset = field->offset;
      facts->model_length = field->value.size();
      facts->model_in_form = true;
    }
  }
  if (facts->model_not_string && IsJsonApi(api_path)) {
    return Error(request, shape, 400,
                 facts->model_not_text
                     ? "model: the string is not valid Unicode (an escaped lone surrogate?)"
                     : "model: expected a string, the name of a served model");
  }
  return std::nullopt;
}

ModelState* Gateway::StoredResponseModel(std::string_view path, SessionKey* stored,
                                         int* stored_on) {
  const std::string_view id = StoredResponseId(path);
  if (id.empty()) return nullptr;
  for (auto& m : models_) {
    stored->key = m->ConversationOfResponse(id);
    if (stored->key.empty()) continue;
    stored->source = KeySource::kPreviousResponse;
    *stored_on = m->ReplicaOfResponse(id);
    return m.get();
  }
  return nullptr;
}

SessionKey Gateway::KeyOf(ModelState& model, const std::vector<HeaderView>& headers,
                          bool served_name, SessionKey stored, BodyFacts* facts, int* stored_on) {
  // An adapter's prompts are cached apart from the model's: so are its conversations' keys and
  // its prompts' hashes.
  const bool adapter = served_name && !facts->model.empty() && facts->model != model.name() &&
                       model.served_names().IsAdapter(facts->model);
  if (adapter) SeparateAdapterPrompts(facts->model, facts);
  SessionKey key =
      stored.key.empty() ? ExtractSessionKey(headers, *facts, config_.session) : std::move(stored);
  // A session that turns to an adapter (Claude Code's /model) starts a conversation there: no
  // replica caches its history under the adapter, and it may be loaded on some servers only.
  if (adapter && !key.key.empty() && key.source != KeySource::kOpening &&
      key.source != KeySource::kPreviousResponse)
    key.key.append("@").append(facts->model);
  // A stateful Responses API request sends only its new input: the response it continues from
  // tells its conversation. However else it is keyed: it can only be served where that response
  // is stored.
  if (!facts->previous_response_id.empty()) {
    if (std::string known = model.ConversationOfResponse(facts->previous_response_id);
        !known.empty()) {
      key.key = std::move(known);
      key.source = KeySource::kPreviousResponse;
      *stored_on = model.ReplicaOfResponse(facts->previous_response_id);
    }
  }
  return key;
}

std::optional<HttpResponse> Gateway::LocalResponse(const HttpRequest& request,
                                                   std::string_view path) {
  if (IsAdminPath(path)) return AdminResponse(request, path);
  if (request.target() == "*") {
    // OPTIONS * asks about the server itself (RFC 9110 §9.3.7): the gateway is that server, and a
    // replica may not read the target (found by review: relayed, vLLM answered 404).
    HttpResponse allowed = MakeResponse(request, http::status::ok, "", "text/plain");
    allowed.set(http::field::allow, kAllowedMethods);
    return allowed;
  }
  const bool get = request.method() == http::verb::get || request.method() == http::verb::head;
  const bool own_page = path == "/metrics" || path == "/health" || path == "/ready" ||
                        path == "/panel" || path.starts_with("/panel/");
  if (!get && own_page && request.method() != http::verb::options) {
    // The gateway's own pages: no replica is asked what to do with a POST to them.
    HttpResponse refused = Error(request, ErrorShape::kOpenAi, 405,
                                 "the gateway answers this path itself, to GET or HEAD only");
    refused.set(http::field::allow, "GET, HEAD");
    return refused;
  }
  if (!get) return std::nullopt;
  if (path == "/metrics") {
    return MakeResponse(request, http::status::ok, MetricsText(),
                        "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/health") return MakeResponse(request, http::status::ok, "ok\n", "text/plain");
  if (path == "/ready") return ReadyResponse(request);
  if (path == "/panel" || path.starts_with("/panel/")) return PanelResponse(request, path);
  if (path == "/" && request[http::field::accept].find("text/html") != std::string_view::npos) {
    HttpResponse redirect = MakeResponse(request, http::status::found, "", "text/plain");
    redirect.set(http::field::location, "/panel");
    return redirect;  // a browser: the panel
  }
  if (path == "/" || path == "/api/hello") {
    return MakeResponse(request, http::status::ok, R"({"service":"lm-warden"})");
  }
  if (path == "/v1/models") {
    std::string error;
    std::string body = ModelsListBody(request.target(), &error);
    HttpResponse response = error.empty() ? MakeResponse(request, http::status::ok, std::move(body))
                                          : Error(request, ModelsErrorShape(request), 400, error);
    AllowAnyOrigin(request, response);
    return response;
  }
  if (path.starts_with("/v1/models/")) return ModelResponse(request, path);
  return std::nullopt;
}

namespace {

// Why `model` cannot serve a request now, as routing would place it (empty: it can): its servers
// not each checked once yet (nothing is known of them), or no replica in service, nor a healthy
// one that drains while one not drained is out of service (routing then uses it rather than fail).
std::string WhyNotServable(ModelState& model) {
  for (size_t server = 0; server < model.config().urls.size(); ++server)
    if (!model.scrape_schedule().DoneSince(server, 0)) return "its replicas not checked yet";
  const bool serves = model.WithRouter([](ModelRouter& r) {
    if (r.AnyInService({})) return true;
    bool draining_healthy = false, lost = false;
    for (int i = 0; i < r.num_replicas(); ++i) {
      draining_healthy = draining_healthy || (r.healthy(i) && r.draining(i));
      lost = lost || (!r.draining(i) && !r.load(i).healthy);
    }
    return draining_healthy && lost;
  });
  return serves ? std::string() : "no replica in service";
}

}  // namespace

HttpResponse Gateway::ReadyResponse(const HttpRequest& request) {
  const std::vector<std::string> named = QueryValues(request.target(), "model");
  std::vector<ModelState*> asked;
  for (const auto& model : models_) {
    if (named.empty() || named.front() == model->name()) asked.push_back(model.get());
  }
  if (asked.empty()) {
    return MakeResponse(request, http::status::not_found,
                        fmt::format("model {} is not served here\n", named.front()), "text/plain");
  }
  std::string unserved;
  bool any = false;
  for (ModelState* model : asked) {
    if (const std::string why = WhyNotServable(*model); why.empty()) {
      any = true;
    } else {
      unserved += fmt::format("model {}: {}\n", model->name(), why);
    }
  }
  if (drain_begun_.load()) {
    return MakeResponse(request, http::status::service_unavailable,
                        "stopping: send new requests elsewhere\n", "text/plain");
  }
  return MakeResponse(request, any ? http::status::ok : http::status::service_unavailable,
                      (any ? "ready\n" : "") + unserved, "text/plain");
}

constexpr std::string_view kPanelPolicy =
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The panel's buttons change the gateway: no other site may frame it (clickjacking), no browser
// takes its files for another type, and it runs no script but its own.
void ForbidFraming(HttpResponse* res) {
  res->set(http::field::x_frame_options, "DENY");
  res->set("Content-Security-Policy", kPanelPolicy);
  res->set("X-Content-Type-Options", "nosniff");
}

HttpResponse PanelResponse(const HttpRequest& request, std::string_view path) {
  HttpResponse res = PanelFile(request, path);
  ForbidFraming(&res);
  return res;
}

HttpResponse PanelFile(const HttpRequest& request, std::string_view path) {
  constexpr std::string_view kAssets = "/panel/assets/";
  if (path.starts_with(kAssets)) {
    const std::string_view name = path.substr(kAssets.size());
    const WebAsset* asset = FindWebAsset(name);
    if (!asset)
      return MakeResponse(request, http::status::not_found, "no such asset\n", "text/plain");
    const std::string_view type = name.ends_with(".js")    ? "text/javascript; charset=utf-8"
                                  : name.ends_with(".css") ? "text/css; charset=utf-8"
                                                           : "text/html; charset=utf-8";
    HttpResponse res = MakeResponse(request, http::status::ok, std::string(asset->content), type);
    res.set(http::field::cache_control, "no-cache");
    return res;
  }
  const WebAsset* page = FindWebAsset("panel.html");
  return MakeResponse(request, http::status::ok, std::string(page->content),
                      "text/html; charset=utf-8");
}

// One entry of the models list, in a shape both APIs' clients read: OpenAI's (object, created,
// owned_by; vLLM's root and parent: for a LoRA adapter, as vLLM lists one, the path it was loaded
// from and the model; for the model's other names, aliases included, the model and null) and
// Anthropic's (type, display_name, created_at).
std::string Gateway::ModelEntry(std::string_view id, const ModelState& model) const {
  const auto started = std::chrono::floor<std::chrono::seconds>(unix_start_);
  const std::string_view served = model.name();
  const int64_t max_model_len = model.max_model_len();  // vLLM's, once a replica said it
  const bool adapter = model.served_names().IsAdapter(id);
  const std::string root = adapter ? model.served_names().RootOf(id) : std::string();
  return fmt::format(
      R"({{"id":{},"object":"model","created":{},"owned_by":"lm-warden","root":{},"parent":{},)"
      R"({}"type":"model","display_name":{},"created_at":"{:%FT%TZ}"}})",
      JsonString(id), started.time_since_epoch().count(),
      JsonString(root.empty() ? served : std::string_view(root)),
      adapter ? JsonString(served) : std::string("null"),
      max_model_len > 0 ? fmt::format(R"("max_model_len":{},)", max_model_len) : std::string(),
      JsonString(id), fmt::gmtime(std::chrono::system_clock::to_time_t(started)));
}

std::string Gateway::ServedHere() const {
  std::vector<std::string> names;
  for (const auto& m : models_) {
    std::string name = m->name();
    if (const std::vector<std::string> aliases = m->aliases(); !aliases.empty())
      name += fmt::format(" (also {})", fmt::join(aliases, ", "));
    // Adapters may be thousands: counted, not listed.
    if (const size_t others = m->served_names().All().size(); others > 0)
      name += fmt::format(" and {} other name{} its servers list (GET /v1/models)", others,
                          others == 1 ? "" : "s");
    names.push_back(std::move(name));
  }
  return fmt::format("served: {}; names are matched exactly, case included",
                     fmt::join(names, "; "));
}

// The served models, and their aliases that are names (not patterns), which clients may send too.
std::string Gateway::ModelsListBody(std::string_view target, std::string* error) const {
  std::vector<std::string> names, entries;  // in order, each once
  std::set<std::string, std::less<>> listed;
  for (const auto& m : models_) {
    std::vector<std::string> ids = {m->name()};
    for (const std::string& alias : m->aliases()) {
      if (alias.find_first_of("*?") == std::string::npos && alias != m->name())
        ids.push_back(alias);
    }
    // LoRA adapters and other names the replicas serve.
    for (std::string& name : m->served_names().All()) ids.push_back(std::move(name));
    for (const std::string& id : ids) {
      // Each name once, under the model a request naming it goes to.
      if (!listed.insert(id).second || ResolveModel(id) != m.get()) continue;
      entries.push_back(ModelEntry(id, *m));
      names.push_back(id);
    }
  }
  // Anthropic's paging (after_id, before_id, limit), which its clients may use by hand; OpenAI's
  // list has none, and without them every model is listed (found by review: a cursor listed its
  // own model again).
  size_t begin = 0, end = names.size();
  const auto index_of = [&](std::string_view name) {
    const std::vector<std::string> values = QueryValues(target, name);
    if (values.empty()) return std::optional<size_t>();
    const auto it = std::find(names.begin(), names.end(), values.front());
    return std::optional<size_t>(it - names.begin());  // unknown: past the end
  };
  const std::optional<size_t> after = index_of("after_id"), before = index_of("before_id");
  if (after) begin = std::min(names.size(), *after + 1);
  if (before) end = std::max(begin, std::min(end, *before));
  bool has_more = false;
  if (const std::vector<std::string> limit = QueryValues(target, "limit"); !limit.empty()) {
    size_t n = 0;
    const char* const last = limit[0].data() + limit[0].size();
    const auto [p, ec] = std::from_chars(limit[0].data(), last, n);
    if (ec != std::errc() || p != last || n == 0) {  // as Anthropic's API: a 400, not every model
      *error = fmt::format("limit: '{}' is no positive integer", ValidUtf8OrEscaped(limit[0]));
      return {};
    }
    if (end - begin > n) {
      has_more = true;
      if (before && !after) {
        begin = end - n;  // the page just before the cursor
      } else {
        end = begin + n;
      }
    }
  }
  const std::span<const std::string> page(entries.data() + begin, end - begin);
  return fmt::format(R"({{"object":"list","data":[{}],"has_more":{},"first_id":{},"last_id":{}}})",
                     fmt::join(page, ","), has_more,
                     begin < end ? JsonString(names[begin]) : "null",
                     begin < end ? JsonString(names[end - 1]) : "null");
}

// GET /v1/models/{id} (both APIs have it): any name the gateway routes, aliases and patterns'
// matches included.
HttpResponse Gateway::ModelResponse(const HttpRequest& request, std::string_view path) {
  const ErrorShape shape = ModelsErrorShape(request);
  std::string id;
  if (!PercentDecode(path.substr(std::string_view("/v1/models/").size()), &id))
    return Error(request, shape, 400, "the model id is not validly percent-encoded");
  ModelState* model = id.empty() ? nullptr : ResolveModel(id);
  if (!model) {
    return Error(request, shape, 404,
                 fmt::format("model '{}' is not served here", ValidUtf8OrEscaped(id)));
  }
  HttpResponse response = MakeResponse(request, http::status::ok, ModelEntry(id, *model));
  AllowAnyOrigin(request, response);
  return response;
}

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
  if (decision.new_home >= 0) peer_sync_->Nudge();
  return decision;
}

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
  fwd.conversation_key = key.key;
  fwd.stands_for = key.opening_key.empty() ? key.key : key.opening_key;
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
      decision = RouteTry(model, key, attempt, &fwd);
      if (decision.replica < 0) break;
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
          {fwd.route_request.needs_home, decision.to_draining, fwd.route_request.avoid});
    }
    if (wait != AdmissionWait::kGo) {  // not sent: counted as ended where it was routed
      const bool moved = wait == AdmissionWait::kRouteAgain || wait == AdmissionWait::kDrained;
      model.WithRouter([&](ModelRouter& r) {
        // Routed again: counted where it goes, not also where it was held.
        moved ? r.Unsent(decision.replica, Now()) : r.Finish(decision.replica, {}, Now());
      });
      // A new conversation is still new where it goes (its opening's entry is placed afresh).
      if (moved && decision.kind == RouteKind::kNew) fwd.route_request.place_as_new = true;
      if (wait == AdmissionWait::kRouteAgain) continue;  // the lost replica is unhealthy: avoided
      if (wait == AdmissionWait::kDrained) {  // no failure: not counted against its tries
        if (++fwd.drain_moves <= kMaxDrainMoves) ++tries;
        continue;
      }
      if (wait == AdmissionWait::kStopping) {
        HttpResponse response =
            Error(ex.request(), shape, 503,
                  "the gateway is stopping before this request's turn came: it was not sent to a "
                  "replica; send it again",
                  ErrorCode::kGatewayStopping);
        response.set(http::field::retry_after, "1");
        fwd.EndUnanswered(model, Now());
        client.Release();
        co_await ex.Respond(std::move(response));
        co_return;
      }
      fwd.EndUnanswered(model, Now());
      ex.Abandon();
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
    Upstream upstream = co_await Send(request, shard, model, health_of, pool, rank, parser, watch,
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
    if (upstream.connection) {
      const std::string_view conversation = fwd.route_request.sticky ? fwd.conversation_key : "";
      const bool name_by_reply =
          generation && fwd.route_request.opens_conversation && !delegate && !conversation.empty();
      const Relayed relayed =
          co_await Relay(ex, shard, std::move(upstream), *parser, model, decision, conversation,
                         generation, facts.sequences, name_by_reply, started, watch, client);
      if (relayed.stalled) {  // out of service now: routed again, as if it could not be reached
        claim.Done();
        model.WithRouter([&](ModelRouter& r) { r.Fail(decision.replica, /*replica_down=*/false); });
        spdlog::warn(
            "model {}: replica {} ({}) is held stalled (stall_timeout_s) with a stream it had not "
            "begun: sent to another server if one is in service",
            model.name(), decision.replica, model.ReplicaUrl(decision.replica));
        fwd.TryAnotherServer(model, decision, seeks_stored);
        continue;
      }
      if (relayed.dropped_unanswered) {
        claim.Done();
        fwd.last_dropped = true;
        if (!fwd.TryAfterDrop(model, decision, seeks_stored)) break;
        continue;
      }
      const RequestOutcome& outcome = relayed.outcome;
      claim.Done(outcome.prompt_tokens, outcome.output_tokens, outcome.completed);
      // A server that does not know the name the replicas were said to serve has unloaded it (or
      // restarted): its names are read again now rather than within 30 s.
      if (parser->status() == 404 && !facts.model.empty() && facts.model != model.name() &&
          model.served_names().Contains(facts.model))
        asio::co_spawn(*shards_[shard], RelearnServedNames(shard), asio::detached);
      // Peers count this request in flight until they hear it ended: the conversation's next
      // turn, through another gateway, must not find its home busy with it (with a low overflow
      // limit it went elsewhere).
      peer_sync_->Nudge();
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
    bool marked_down = false;
    const bool others = MarkUnreachable(model, decision.replica, upstream.refused, &marked_down);
    // Said by the request that took it out of service, not by each one caught with it.
    spdlog::log(marked_down ? spdlog::level::warn : spdlog::level::debug,
                "model {}: replica {} ({}) did not answer; {}", model.name(), decision.replica,
                model.ReplicaUrl(decision.replica),
                others ? "trying another" : "no other healthy replica");
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
        [this] { return Now(); }, /*news=*/true);
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
    std::string_view key, bool reserves, HangupWatch& watch, HeldFor held_for) {
  const auto executor = co_await asio::this_coro::executor;
  const std::shared_ptr<AdmissionWaiter> waiter =
      model.Admit(replica, id, blocks, key, reserves, executor);
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

asio::awaitable<Gateway::Upstream> Gateway::Send(const HttpRequest& request, int shard,
                                                 ModelState& model, int replica, UpstreamPool& pool,
                                                 int rank, std::optional<RelayParser>& parser,
                                                 HangupWatch& watch, bool resend_if_stale) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config_.connect_timeout_s * 1000));
  Upstream up;
  for (int fresh = 0; fresh < 2; ++fresh) {
    up.dropped = false;
    boost::system::error_code ec;
    // A pooled connection, most often: taken without Acquire's coroutine.
    std::unique_ptr<UpstreamConnection> connection = fresh == 0 ? pool.TakeIdle(shard) : nullptr;
    if (!connection) connection = co_await pool.Acquire(shard, timeout, ec, fresh == 1);
    if (!connection) {
      if (IsLocalResourceError(ec)) up.local_failure = ec;
      up.refused = ec == asio::error::connection_refused;
      co_return up;
    }
    watch.SetUpstream(&connection->socket);
    // (vLLM's CORS middleware answers a preflight without a key, as browsers send none.)
    WriteUpstreamHead(request, pool.url(), rank, via_,
                      IsCorsPreflight(request) ? std::string_view() : model.replica_authorization(),
                      &connection->head);
    const std::array<asio::const_buffer, 2> buffers = {asio::buffer(connection->head),
                                                       asio::buffer(request.body())};
    // Watched from the first byte sent: a replica that stops reading the request (a lost one,
    // or one silent for read_timeout_s) fails the write as it would fail the read.
    ReplicaLossWatch::Waiting waiting(*loss_watches_[shard], model, replica, connection->socket,
                                      ReadTimeout());
    // The plain socket's calls inline: a coroutine in between costs every request its frame.
    boost::system::error_code write_ec;
    if (connection->tls) {
      write_ec = co_await WriteUpstream(*connection, buffers);
    } else {
      const size_t sent_now = WriteNow(connection->socket, buffers, write_ec);
      if (write_ec == asio::error::would_block) {
        waiting.Writing(true);
        write_ec = co_await WriteRest(connection->socket, buffers, sent_now);
        waiting.Writing(false);
      }
    }
    const auto sent = std::chrono::steady_clock::now();
    bool answered_some = false;  // the replica read the request: it is not sent again
    // What it answered first is readable: the write failed as it stopped reading and closed, or
    // the watch stopped the write for an answer that came while the replica read no more.
    const bool cut = write_ec == asio::error::connection_reset ||
                     write_ec == asio::error::broken_pipe || waiting.answered_early();
    if (!write_ec || cut) {
      boost::system::error_code read_ec;
      // Interim responses (100 Continue, 103 Early Hints) come before the real one: skipped, up
      // to a bound (found by review: a replica sending 100s without end kept a core busy).
      int interim = 0;
      do {
        if (interim++ > kMostInterimResponses) {  // (the 17th interim head read)
          watch.SetUpstream(nullptr);
          up.malformed = fmt::format("more than {} interim (1xx) responses", kMostInterimResponses);
          co_return up;
        }
        parser.emplace(&connection->head);
        parser->SetUpstream(&pool.url());
        if (request.method() == http::verb::head) parser->skip(true);
        if (connection->tls) {  // GCC 12 miscompiles co_await in a conditional expression
          read_ec = co_await ReadUpstream(*connection, *parser, ReadUntil::kHeader);
        } else {  // (without ReadHttp's coroutine frame)
          HttpReadStep<false> step(connection->buffer, *parser, ReadUntil::kHeader);
          while (!step.Done()) {
            const auto bytes = co_await step.ReadSome(connection->socket);
            step.Took(bytes, connection->socket);
          }
          read_ec = step.result();
        }
        answered_some = answered_some || parser->got_some();
      } while (!read_ec && parser->status() >= 100 && parser->status() < 200 &&
               parser->status() != 101);
      // 101 Switching Protocols to a request that asked for none (Upgrade is not passed on): the
      // connection speaks something else from here on.
      if (!read_ec && parser->status() == 101) {
        watch.SetUpstream(nullptr);
        up.malformed = "101 Switching Protocols to a request that asked for no upgrade";
        co_return up;
      }
      // A head that came (even as the watch gave up: what the buffer holds can still go out) is
      // relayed.
      if (!read_ec && waiting.ended_by_stop()) {  // its socket closed as the head was read
        watch.SetUpstream(nullptr);
        up.stopped = true;
        co_return up;
      }
      if (!read_ec) {
        up.request_cut = cut;
        up.connection = std::move(connection);
        co_return up;
      }
      if (IsMalformedResponse(read_ec) && !waiting.given_up()) {
        watch.SetUpstream(nullptr);
        up.malformed = read_ec.message();
        co_return up;
      }
    }
    const bool given_up = waiting.given_up();    // the replica was lost before it answered
    const bool timed_out = waiting.timed_out();  // or sent nothing for read_timeout_s
    watch.SetUpstream(nullptr);
    if (watch.hung_up()) {
      up.client_gone = true;
      co_return up;
    }
    if (timed_out) {
      up.timed_out = true;
      co_return up;
    }
    if (waiting.ended_by_stop()) {
      up.stopped = true;
      co_return up;
    }
    // Lost before it answered anything: routed again, like a replica that could not be reached.
    if (given_up && !answered_some) co_return up;
    up.dropped = true;
    // A pooled connection the server closed just as the request went out (its keep-alive
    // timeout): once more on a new one. Not when the server had the request for longer or
    // answered any of it (it may have run it), or on a new connection (the replica is in
    // trouble).
    if (!resend_if_stale || !connection->reused || answered_some ||
        std::chrono::steady_clock::now() - sent > kStaleConnectionWindow)
      co_return up;
    resent_.fetch_add(1, std::memory_order_relaxed);
  }
  co_return up;
}

asio::awaitable<Gateway::Relayed> Gateway::Relay(HttpExchange& ex, int shard, Upstream up,
                                                 RelayParser& parser, ModelState& model,
                                                 const RouteDecision& decision,
                                                 std::string_view key, bool generation,
                                                 int sequences, bool name_by_reply, double started,
                                                 HangupWatch& watch, ClientSlot& client) {
  std::string& head = up.connection->head;  // the parser wrote the status line and fields
  const bool delegated = decision.replica < 0;
  if (config_.route_headers && delegated) {
    head += "x-warden-route: engine\r\n";
  } else if (config_.route_headers) {
    head += "x-warden-replica: ";
    AppendNumber(&head, decision.replica);
    head.append("\r\nx-warden-route: "sv)
        .append(RouteKindName(ShownKind(decision, generation)))
        .append("\r\n"sv);
  }
  // A page a replica serves (vLLM's /docs, an HTML error page of a proxy in front of it) would
  // run on the panel's origin, where the admin token is kept: in a sandbox it has an origin of
  // its own. API clients do not read the field.
  head += "Content-Security-Policy: sandbox allow-scripts allow-forms allow-popups\r\n"sv;
  // A whole JSON body is held for its usage only where there is one to read: not an embedding's
  // (megabytes each, for nothing).
  ResponseObserver observer(parser.event_stream(), generation ? size_t{4} << 20 : 0);
  std::optional<ReplyText> reply;  // with name_by_reply: hashed as it streams, not held
  std::vector<std::string> reply_tool_calls;
  if (name_by_reply) observer.CaptureText(&reply.emplace(), &reply_tool_calls);
  std::optional<uint64_t> length;
  if (!parser.chunked() && parser.content_length()) length = *parser.content_length();
  const bool head_request = ex.request().method() == http::verb::head;
  if (parser.is_done() && !length && !head_request) length = 0;

  UpstreamConnection& connection = *up.connection;
  double ttft = -1;
  bool upstream_ok = true;
  // A replica that stops sending for read_timeout_s: its connection is closed, the response cut.
  std::optional<ReplicaLossWatch::Waiting> quiet;
  // (And a stream, to be cut if its replica is held stalled, as it would wait as long as the
  // hang; or ended with an error event if the gateway's drain runs out of time.)
  if (config_.read_timeout_s > 0 || parser.event_stream()) {
    quiet.emplace(*loss_watches_[shard], model, std::max(decision.replica, 0), connection.socket,
                  ReadTimeout(), /*give_up_when_lost=*/false);
    quiet->Pause();  // counted only while a read waits (read_piece)
  }
  bool engine_answered = false;  // a stream's first bytes came (ModelState::NoteAnswered)
  bool ended_by_stop = false;    // the drain's end closed the replica's side (EndRelays)
  // After a read of the body that failed with `ec`.
  const auto read_failed = [&](boost::system::error_code ec) {
    upstream_ok = false;
    ended_by_stop = quiet && quiet->ended_by_stop();
    if (quiet && quiet->given_up() && engine_answered) {  // (else Forward says it)
      spdlog::warn("model {}: {} is held stalled (stall_timeout_s): a response from it cut",
                   model.name(), model.ReplicaUrl(std::max(decision.replica, 0)));
    }
    if (quiet && quiet->timed_out()) {
      body_timeouts_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("model {}: {} sent nothing for {} s in a response (read_timeout_s): cut",
                   model.name(), model.ReplicaUrl(std::max(decision.replica, 0)),
                   config_.read_timeout_s);
    }
  };
  // The piece of the body the parser took in the last read, seen by the observer; empty if none.
  const auto piece_taken = [&]() -> std::string_view {
    const size_t got = parser.body_received();
    if (got == 0) return {};
    if (!engine_answered && parser.event_stream()) {
      engine_answered = true;
      model.NoteAnswered(std::max(decision.replica, 0));
    }
    const std::string_view piece(connection.body_piece.data(), got);
    if (observer.Feed(piece) && ttft < 0) ttft = Now() - started;
    return piece;
  };
  // Before each read of the body: where the parser is to put the next piece; the quiet limit
  // counts while the read waits.
  const auto before_read = [&] {
    parser.SetBodyBuffer(connection.body_piece.data(), connection.body_piece.size());
    if (quiet) quiet->Progress();
  };
  // After a read that ended with `ec`: the piece it gave (empty at the end, or after a failure),
  // or nothing when another read is needed.
  const auto after_read = [&](boost::system::error_code ec) -> std::optional<std::string_view> {
    if (quiet) quiet->Pause();
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      read_failed(ec);
      return std::string_view();
    }
    if (const std::string_view piece = piece_taken(); !piece.empty()) return piece;
    if (parser.is_done()) return std::string_view();
    return std::nullopt;
  };
  // Reads the next piece of the body into the connection's buffer; empty at the end. (The relay's
  // loop does the same inline, without this coroutine's frame or ReadHttp's for every event.)
  auto read_piece = [&]() -> asio::awaitable<std::string_view> {
    if (parser.is_done()) co_return std::string_view();
    for (;;) {
      before_read();
      const boost::system::error_code ec =
          co_await ReadUpstream(connection, parser, ReadUntil::kProgress);
      if (std::optional<std::string_view> piece = after_read(ec)) co_return *piece;
    }
  };
  // The next piece of the body from what the read buffer holds alone (no coroutine); empty if
  // that has none of it yet.
  const auto buffered_piece = [&]() -> std::string_view {
    while (!parser.is_done()) {
      parser.SetBodyBuffer(connection.body_piece.data(), connection.body_piece.size());
      const size_t buffered = connection.buffer.size();
      if (quiet) quiet->Progress();
      boost::system::error_code ec = ParseBuffered(connection.buffer, parser);
      if (quiet) quiet->Pause();
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        read_failed(ec);
        return {};
      }
      if (const std::string_view piece = piece_taken(); !piece.empty()) return piece;
      if (connection.buffer.size() == 0 || connection.buffer.size() == buffered)
        break;  // e.g. a chunk's size line without its data
    }
    return {};
  };
  // The outcome is recorded before the body's last bytes go out: a client that has its whole
  // response sees it in the counters.
  bool recorded = false;
  bool client_ok = true;  // every write to the client went out
  // The replica's status, or 400 for its context error reworded (its fault is the prompt's).
  int status_said = parser.status();
  EventTail tail;  // where a stream the replica breaks off stops
  const bool stream = parser.event_stream() && !length && parser.status() / 100 == 2;
  // A stream the replica broke off after its last event: what the client has is whole.
  bool ended_whole = false;
  RequestOutcome outcome;
  auto record = [&] {
    if (recorded) return;
    recorded = true;
    observer.Finish();
    outcome = {observer.usage().prompt_tokens, observer.usage().cached_tokens, ttft,
               observer.usage().output_tokens};
    // A stream cut before its final usage (the client stopped it, as Claude Code's Esc does)
    // tells the prompt's size at most, not what the cache gave: no split is counted for it.
    if (observer.usage().preliminary) outcome.prompt_tokens = outcome.cached_tokens = -1;
    DropImplausibleUsage(&outcome, model.usage_bound(), sequences);
    if (!generation) {
      // Nothing ran: a stored response read back (GET /v1/responses/{id}) carries the usage of
      // the turn that made it, counted then (found by review), and a probe has no first token.
      outcome.prompt_tokens = outcome.cached_tokens = outcome.output_tokens = -1;
      outcome.ttft_s = -1;
    }
    outcome.sequences = sequences;
    outcome.anthropic_usage = observer.usage().anthropic;
    // Only a generation request's whole successful answer carries usage (not count_tokens', not
    // an error's, not other paths', not one cut short).
    outcome.usage_expected = generation && parser.status() / 100 == 2 && parser.is_done() &&
                             upstream_ok && !observer.error_event();
    // Not the client's leaving, nor a stream that had said it ended (its answer is whole).
    outcome.broke_off = !upstream_ok && !watch.hung_up() && !ended_whole && !ended_by_stop;
    outcome.error_answer = status_said >= 500 || status_said == 429;
    outcome.client_error_answer = status_said >= 400 && status_said < 500 && status_said != 429;
    if (outcome.prompt_tokens < 0 && outcome.usage_expected) {
      outcome.prompt_tokens_guess = static_cast<int>(std::min<long>(
          EstimateTokensWithInlineData(ex.request().body()), std::numeric_limits<int>::max()));
    }
    if (access_log_.load(std::memory_order_relaxed)) {
      // (A client that stopped reading, cut at the send timeout, left too.)
      NoteOutcome(outcome, parser.is_done() && upstream_ok,
                  (watch.hung_up() || !client_ok) && !ex.cut_short(), &ex.note());
    }
    if (outcome.usage_expected) CountClientUsage(client.counts(), outcome);  // a whole answer
    client.Release();
    RecordEnded(model, decision, key, generation, name_by_reply,
                name_by_reply ? reply->Hash(reply_tool_calls) : 0, outcome, parser.status(),
                observer);
  };
  // A body that came in with the head goes out with it, in one write; a stream whose first event is
  // not there yet gets its head at once.
  std::string_view first;
  std::string whole_error;  // an error read whole, to say it in the client's API's words
  if (SaysErrorsInAnthropicsWords(ex.request(), parser.status(), length, parser.event_stream()) &&
      !BodyEncoded(head)) {
    while (!parser.is_done() && upstream_ok && whole_error.size() <= kLargestError) {
      const std::string_view piece = co_await read_piece();
      whole_error.append(piece);
    }
    if (parser.is_done() && upstream_ok) {
      // A prompt vLLM counted only in part: counted by the replica's count_tokens, else guessed
      // from the request's size.
      long estimate = EstimateTokensWithInlineData(ex.request().body());
      long counted = 0;
      // (vLLM says a context error with a 400, or in later versions with a 500.)
      const bool messages = TargetPath(ex.request().target()) == "/v1/messages" &&
                            (status_said == 400 || status_said == 500);
      if (messages && !delegated && PromptCountedInPart(whole_error)) {
        counted = co_await CountPromptTokens(model, shard, decision.replica, ex.request().body(),
                                             kPromptCountTimeout);
      }
      if (counted > 0) estimate = counted;
      std::optional<std::string> said;
      if (messages && (said = AnthropicContextError(whole_error, estimate, counted > 0))) {
        whole_error = std::move(*said);
        if (status_said != 400) SayBadRequest(&head);
        status_said = 400;
        SayJson(&head);
      } else if (std::optional<std::string> shaped = InAnthropicsShape(whole_error, status_said)) {
        whole_error = std::move(*shaped);  // vLLM's own type names (BadRequestError), plain text
        SayJson(&head);
      }
      length = whole_error.size();
    }
    first = whole_error;  // the rest, if any, follows
  } else if (!parser.is_done() && connection.buffer.size() > 0) {
    first = buffered_piece();
  }
  // A generation stream whose end is the connection's (neither a length nor chunks) that closed
  // before the stream said it ended was broken off, however cleanly the connection closed. (Other
  // paths' streams are not read for their end: there the close is the end.)
  const auto closed_unfinished = [&] {
    return stream && generation && !parser.chunked() && parser.is_done() &&
           !observer.stream_ended();
  };
  // A generation stream's head waits for its first event: vLLM sends the head as it queues the
  // request, and a replica that dies before the first event (queued, or reading the prompt) has
  // then given the client nothing, so the request can go to another replica (Forward).
  if (stream && generation && !delegated && first.empty() && !parser.is_done() && upstream_ok) {
    first = co_await read_piece();
    if (closed_unfinished()) upstream_ok = false;
    if (!upstream_ok && !watch.hung_up() && !ended_by_stop && !(quiet && quiet->timed_out())) {
      watch.SetUpstream(nullptr);
      co_return Relayed{.dropped_unanswered = true, .stalled = quiet && quiet->given_up()};
    }
  }
  if (parser.is_done() && upstream_ok) record();
  // A first turn that ends with no answer hands its entry over (as RecordEnded does).
  const bool abandons_opening = name_by_reply && !decision.key_left_alone;
  const std::string_view turn_of = decision.key_left_alone ? std::string_view() : key;
  if (!upstream_ok && watch.hung_up()) {  // the client left while its error was read
    model.WithRouter([&](ModelRouter& r) {
      delegated ? r.FinishDelegated({}, Now()) : r.Finish(decision.replica, {}, Now());
      r.EndUnanswered(turn_of);
      if (abandons_opening) r.AbandonOpening(key, Now());
    });
    ex.Abandon();
    co_return Relayed{};
  }
  if (!upstream_ok) {  // broken before anything went out: the client still gets an answer
    model.WithRouter([&](ModelRouter& r) {
      if (ended_by_stop) {  // not the replica's failure
        delegated ? r.FinishDelegated({}, Now()) : r.Finish(decision.replica, {}, Now());
      } else {
        delegated ? r.FailDelegated() : r.Fail(decision.replica, /*replica_down=*/false);
      }
      r.EndUnanswered(turn_of);
      if (abandons_opening) r.AbandonOpening(key, Now());
    });
    watch.SetUpstream(nullptr);
    const ErrorShape shape = ErrorShapeFor(TargetPath(ex.request().target()));
    HttpResponse response;
    if (ended_by_stop) {
      response = Error(ex.request(), shape, 503,
                       "the gateway stopped (its drain's time ran out) before this request's "
                       "answer began; send it again",
                       ErrorCode::kGatewayStopping);
      response.set(http::field::retry_after, "1");
    } else {
      response = quiet && quiet->timed_out()
                     ? Error(ex.request(), shape, 504,
                             fmt::format(
                                 "the replica sent no event in {} s (the gateway's read_timeout_s)",
                                 config_.read_timeout_s))
                     : Error(ex.request(), shape, 502,
                             "the replica's response broke off or was not valid HTTP");
      // The replica had the request (found by review: the 504 a hung vLLM's stream gets).
      response.set(kShouldRetry, "false");
    }
    client.Release();
    co_await ex.Respond(std::move(response));
    co_return Relayed{};
  }
  if (parser.is_done()) record();
  // No body and no framing fields (RFC 9110 §8.6, §15.3.5, §15.4.5): and the answer to a HEAD
  // whose length the replica did not say (a length of 0 would be a claim about the GET).
  const bool bodiless =
      parser.status() == 204 || parser.status() == 304 || (head_request && !length);
  if (std::optional<bool> started = ex.StartBodyRawAtOnce(head, length, first, bodiless)) {
    client_ok = *started;  // (most answers: without a coroutine)
  } else {
    client_ok = co_await ex.SendPending();
  }
  if (stream) tail.Relayed(first);
  while (client_ok && upstream_ok && !parser.is_done()) {
    std::optional<std::string_view> read;  // read_piece's work, inline: this runs for every event
    while (!read) {
      before_read();
      if (connection.tls) {
        const boost::system::error_code ec =
            co_await ReadUpstream(connection, parser, ReadUntil::kProgress);
        read = after_read(ec);
        continue;
      }
      HttpReadStep<false> step(connection.buffer, parser, ReadUntil::kProgress);
      while (!step.Done()) {
        const auto bytes = co_await step.ReadSome(connection.socket);
        step.Took(bytes, connection.socket);
      }
      read = after_read(step.result());
    }
    const std::string_view piece = *read;
    if (closed_unfinished()) upstream_ok = false;
    if (parser.is_done()) record();
    if (!piece.empty()) {
      if (std::optional<bool> sent = ex.SendBodyAtOnce(piece)) {
        client_ok = *sent;  // (most events: without a coroutine)
      } else {
        client_ok = co_await ex.SendPending();
      }
    }
    if (stream) tail.Relayed(piece);
  }
  const bool timed_out = quiet && quiet->timed_out();
  quiet.reset();  // before the connection may go back to the pool
  // A stream the replica broke off between two events: ended properly, after an error event
  // unless it had said it ended.
  const bool can_end =
      !upstream_ok && client_ok && stream && !watch.hung_up() && tail.between_events();
  ended_whole = can_end && observer.stream_ended();
  std::string broken_event;
  if (can_end && !ended_whole)
    broken_event = BrokenStreamEvent(
        TargetPath(ex.request().target()),
        ended_by_stop ? std::string(kStoppedMidStream)
                      : BrokeOffMessage(decision.replica, timed_out ? config_.read_timeout_s : 0),
        observer.response_id());
  if (client_ok && upstream_ok) {
    if (std::optional<bool> ended = ex.EndBodyAtOnce()) {
      client_ok = *ended;
    } else {
      client_ok = co_await ex.EndBody();
    }
  } else if (ended_whole || !broken_event.empty()) {
    if (!broken_event.empty()) client_ok = co_await ex.SendBody(broken_event);
    if (client_ok) client_ok = co_await ex.EndBody();
    ex.CloseAfterResponse();
  } else {
    ex.BreakOff();  // a body cut short: the client must see the connection end, and not whole
  }
  record();
  watch.SetUpstream(nullptr);  // from here the connection may serve another request
  // Not after a response without a body (to HEAD, a 204 or a 304): a replica or proxy that sends
  // one anyway, later than the liveness peek can see, would have it read as the next request's
  // answer (found by review). vLLM sends none of these to the requests that matter.
  const bool without_body = head_request || parser.status() == 204 || parser.status() == 304;
  if (client_ok && upstream_ok && parser.keep_alive() && !up.request_cut && !without_body) {
    UpstreamPool& pool = delegated ? *model.pools()[0] : *model.target(decision.replica).pool;
    pool.Release(shard, std::move(up.connection));
  }
  // Only a whole, successful response teaches admission what a request costs.
  const bool whole = client_ok && upstream_ok && parser.is_done() && parser.status() / 100 == 2;
  if (!whole) co_return Relayed{};
  outcome.completed = true;
  co_return Relayed{outcome};
}

}  // namespace warden
