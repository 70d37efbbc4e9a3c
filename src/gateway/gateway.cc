// Gateway: its shards and listeners, drain and stop, settings changed while it runs, and a
// request's way in (keys, checks, body) up to Forward (gateway_forward.cc).
#include "gateway/gateway.h"

#include <fcntl.h>
#include <fmt/format.h>
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
#include <cerrno>
#include <cmath>
#include <span>

#include "core/protocol/inline_data.h"
#include "core/protocol/inline_system.h"
#include "core/protocol/multipart_field.h"
#include "gateway/adapter_update.h"
#include "gateway/gateway_internal.h"
#include "gateway/peer_sync.h"
#include "net/content_coding.h"
#include "net/cross_origin.h"
#include "net/hangup_watch.h"
#include "net/log_safe.h"
#include "net/off_thread.h"
#include "net/server_tls.h"
#include "util/ascii_case.h"
#include "util/json_escape.h"
#include "util/normalised_path.h"
#include "util/steady_seconds.h"

namespace warden {

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

// A client that hangs up is noticed at most this late; requests answered sooner cost no watch.
constexpr std::chrono::milliseconds kHangupWatchDelay{5};

// Anthropic's API says a request's id in this field, where its SDKs read it (for errors).
constexpr std::string_view kAnthropicRequestId = "request-id";

// How often a shard's replica-loss watch looks at its waiting requests: once a second, or often
// enough that a read_timeout_s under 4 s is kept to within a quarter of it.
std::chrono::milliseconds LossWatchPeriod(double read_timeout_s) {
  constexpr std::chrono::milliseconds kDefault{1000}, kShortest{5};
  if (read_timeout_s <= 0) return kDefault;
  const auto quarter = std::chrono::milliseconds(static_cast<int64_t>(read_timeout_s * 250));
  return std::clamp(quarter, kShortest, kDefault);
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

// A compressed body this small is decoded on the shard, up to this much decoded (tens of
// microseconds at most); past that, on a decoding thread. A burst of small compressed requests
// then takes no thread hops, nor places in the decoders' queue.
constexpr size_t kDecodedOnTheShard = 64 * 1024;
constexpr size_t kCodedSmallBody = 4 * 1024;

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

// The answer to a path that repeats /v1 (/v1/v1/messages): the client's base URL ends in /v1, and
// its SDK adds /v1 too. Else the replica's bare 404, which Claude Code takes for a model problem.
std::string DoubledV1(std::string_view path) {
  return fmt::format(
      "no such path: {} repeats /v1; the client's base URL ends in /v1 and its SDK adds one too "
      "(Claude Code's ANTHROPIC_BASE_URL and Anthropic's SDKs take the gateway's address alone, "
      "http://host:port; OpenAI's SDKs take it with one /v1)",
      ValidUtf8OrEscaped(path.substr(0, 64)));
}

// Whether `path` is one of the API's endpoints without its /v1 (/chat/completions): no server has
// those, and the client's base URL lacks the /v1 OpenAI's SDKs want.
bool LacksV1(std::string_view path) {
  return path == "/chat/completions" || path == "/completions" || path == "/responses" ||
         path == "/messages" || path == "/messages/count_tokens" || path == "/embeddings" ||
         path == "/models";
}

// The answer to such a path: else the replica's bare 404, which an SDK shows as "(no body)".
std::string MissingV1(std::string_view path) {
  return fmt::format(
      "no such path: {} lacks /v1; OpenAI's SDKs take the gateway's address with /v1 "
      "(http://host:port/v1), Claude Code's ANTHROPIC_BASE_URL and Anthropic's SDKs without it",
      path);
}

// Whether the API keys guard a request: all but the admin API (which has its own token, and is
// always answered here), CORS preflights, OPTIONS *, and what the gateway answers itself to a GET
// or HEAD: the probes, health, metrics and the panel. Anything else could reach a replica (a POST
// /, a /panel/../v1/... that a proxy in front of the replica normalises), so it needs a key.
// `admin_decides`: the admin token guards the path instead (adapter updates, when there is one).
bool GuardedByApiKeys(const HttpRequest& request, std::string_view path, bool admin_decides) {
  if (IsAdminPath(path)) return false;
  if (admin_decides) return false;
  const http::verb method = request.method();
  if (method == http::verb::options && IsCorsPreflight(request)) return false;
  // OPTIONS * asks about the gateway itself, which answers it (LocalResponse): no replica is asked.
  if (method == http::verb::options && request.target() == "*") return false;
  if (method != http::verb::get && method != http::verb::head) return true;
  return !(path == "/" || path == "/api/hello" || path == "/health" || path == "/ready" ||
           path == "/metrics" || path == "/panel" || path.starts_with("/panel/"));
}

// The request headers as the session-key extractor reads them, without copying.
std::vector<HeaderView>& HeaderViews(const HttpRequest& request) {
  thread_local std::vector<HeaderView> views;
  views.clear();
  for (const auto& f : request) views.push_back({f.name_string(), f.value()});
  return views;
}

}  // namespace

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
    if (config_.admission_max_hold_s > 0)
      models_.back()->SetAdmissionMaxHold(config_.admission_max_hold_s);
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
  if (config_.request_ids) options.request_ids = &request_ids_;
  if (!config_.traffic_log.empty()) {
    std::string error;
    traffic_log_ = TrafficLog::Open(config_.traffic_log, config_.traffic_log_block,
                                    UnixTime(0) * 1000, &error);
    if (!traffic_log_) throw std::runtime_error("traffic_log: " + error);
    hash_prompts_ = true;  // its block ids
    spdlog::info(
        "recording each answered generation request to {} (warden lab --trace {} replays "
        "it)",
        config_.traffic_log, config_.traffic_log);
  }
  options.max_connections = MaxConnectionsPerThread(config_.max_connections, shards_.size());
  if (!config_.tls_cert_file.empty()) {
    std::string error;
    options.tls = MakeServerTlsContext(config_.tls_cert_file, config_.tls_key_file, &error);
    if (!options.tls) throw std::runtime_error("tls_cert_file, tls_key_file: " + error);
  }
  options.malformed_body = [](std::string_view target, int status, std::string_view message) {
    std::string storage;
    const std::string_view path = NormalisedPathView(TargetPath(target), &storage);
    if (IsAdminPath(path)) {  // the admin API's own shape
      return std::pair<std::string, std::string>(
          fmt::format(R"({{"error":{{"message":{}}}}})", JsonString(message)), "application/json");
    }
    return std::pair<std::string, std::string>(ErrorBody(ErrorShapeFor(path), status, message),
                                               "application/json");
  };
  // (Its refusals before the body is read, in the API's shape, say the id as Handle's answers do.)
  options.request_id_alias = [](const HttpRequest& head) -> std::string_view {
    std::string storage;
    const std::string_view path = NormalisedPathView(TargetPath(head.target()), &storage);
    return ErrorShapeForRequest(head, path) == ErrorShape::kAnthropic ? kAnthropicRequestId : "";
  };
  options.refused = [this](std::string_view target, int status) {
    std::string storage;
    if (!IsAdminPath(NormalisedPathView(TargetPath(target), &storage)))
      own_error_answers_.Add(status);
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
    // (A stream of a replica out of service that sends nothing for stall_timeout_s is cut.)
    loss_watches_.push_back(
        std::make_unique<ReplicaLossWatch>(executors[i], LossWatchPeriod(config_.read_timeout_s),
                                           SteadySeconds(config_.stall_timeout_s)));
  }
  std::vector<ModelState*> models;
  for (auto& m : models_) models.push_back(m.get());
  peer_sync_ = std::make_unique<PeerSync>(config_, std::move(models), executors[0],
                                          [this] { return Now(); });
  via_ = "1.1 warden-" + peer_sync_->instance();
  if (!config_.otlp_traces_endpoint.empty()) {
    UpstreamUrl url;
    std::string error;
    ParseUpstreamUrl(config_.otlp_traces_endpoint, &url, &error);  // the config was validated
    // An https collector's certificate is checked against the system's authorities.
    std::shared_ptr<asio::ssl::context> tls = url.tls ? MakeTlsContext({}, &error) : nullptr;
    traces_ =
        std::make_unique<TraceExporter>(executors[0], std::move(url), std::move(tls), "warden");
  }
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
  if (traces_) {
    traces_->Start();
    spdlog::info("traces: a span per request relayed, sent to {}", traces_->endpoint());
  }
  if (!config_.state_file.empty()) asio::co_spawn(*shards_[0], SaveStateLoop(), asio::detached);
  if (traffic_log_) asio::co_spawn(*shards_[0], TrafficLogLoop(), asio::detached);
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
  if (traces_) traces_->Stop();
  for (auto& h : http_) h->Close();
}

bool Gateway::PeersTold() const {
  return peer_sync_->Stopped() && (!traces_ || traces_->Stopped());
}

int64_t Gateway::UnixNanos(double now) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(unix_start_.time_since_epoch())
             .count() +
         std::llround(now * 1e9);
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
  auto table = std::make_shared<const ClientTable>(keys, clients_.get(), Now());
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
  return Unauthorized(head, ErrorShapeForRequest(head, normalised));
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
  return SteadySeconds(config_.read_timeout_s);
}

void Gateway::WarnOfLoop(const HttpRequest& request) {
  const int64_t minute = static_cast<int64_t>(Now() / 60);
  if (loop_warned_.exchange(minute, std::memory_order_relaxed) == minute) return;
  std::string scratch;
  spdlog::warn(
      "a request came back to this gateway ({}) by way of {}: a model's replica URL leads back "
      "here, through the gateways named there; such requests are answered 508 (said at most once "
      "a minute)",
      via_.substr(4), LogSafe(ViaAfter(request), scratch));
}

void Gateway::WarnShortOfResources(const std::string& what) {
  const int64_t second = static_cast<int64_t>(Now());
  if (short_of_resources_warned_.exchange(second, std::memory_order_relaxed) == second) return;
  spdlog::warn(
      "cannot open connections to replicas: {} (the gateway's own limit, not the replicas'; "
      "requests get 503 meanwhile)",
      what);
}

void Gateway::ReopenTrafficLog() {
  if (!traffic_log_) return;
  std::string error;
  if (traffic_log_->Reopen(config_.traffic_log, &error)) {
    spdlog::info("SIGHUP: the traffic log goes on in {}", config_.traffic_log);
  } else {
    spdlog::error("SIGHUP: the traffic log goes on in the file it had: {}", error);
  }
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
  // (And the models list, which the gateway answers itself: found by review, /v1/%6Dodels went to
  // one replica and got its own list.)
  if (scope->api_path != scope->path &&
      (IsJsonApi(scope->api_path) || scope->api_path == "/v1/models")) {
    SpellPlainly(ex.mutable_request(), scope->api_path);
    scope->path = scope->api_path = TargetPath(ex.request().target());
  }
  const HttpRequest& request = ex.request();
  const std::string_view path = scope->path;
  const std::string_view api_path = scope->api_path;
  scope->shape = ErrorShapeForRequest(request, api_path);
  if (scope->shape == ErrorShape::kAnthropic) ex.AlsoSayRequestIdAs(kAnthropicRequestId);
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
  // The admin token before the size, as from the head of a body that fits (found by review: one
  // over the limit got 413 without it).
  if (ex.body_too_large() && IsAdminPath(api_path)) {
    if (std::optional<HttpResponse> refused = RefuseAdminRequest(request)) return refused;
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
  if (LacksV1(api_path)) {
    return Error(request, ErrorShapeForRequest(request, "/v1" + std::string(api_path)), 404,
                 MissingV1(api_path), ErrorCode::kUnknownPath);
  }
  // An API endpoint takes POST alone: vLLM answers another method with FastAPI's bare
  // {"detail": "Method Not Allowed"}; here it is answered in the API's shape, sent to no replica
  // and counted as no request of one (found by review).
  if (IsJsonApi(api_path) && request.method() != http::verb::post && !IsCorsPreflight(request)) {
    HttpResponse response =
        Error(request, scope->shape, 405,
              fmt::format("{} takes POST, not {}", api_path,
                          QuotedName(std::string_view(request.method_string()), 32)));
    response.set(http::field::allow, "POST");
    return response;
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
                   : fmt::format("model '{}' is not served here ({})", QuotedName(facts.model),
                                 ServedHere()));
}

std::optional<HttpResponse> Gateway::PrepareForward(HttpExchange& ex, const RequestScope& scope,
                                                    ModelState& model, bool served_name,
                                                    const BodyFacts& facts, const SessionKey& key) {
  const HttpRequest& request = ex.request();
  if (access_log_.load(std::memory_order_relaxed)) {
    ex.note().append("model=").append(model.name());
    ex.note().append(" key=").append(KeySourceName(key.source));
    // The conversation, hashed (a key may be a user's name): its turns share it in the log.
    if (!key.key.empty()) {
      fmt::format_to(std::back_inserter(ex.note()), " conv={:08x}",
                     static_cast<uint32_t>(XXH3_64bits(key.key.data(), key.key.size())));
    }
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
  double wait_s = 0;
  if (scope.client && Generation(request, scope) &&
      !ClientTable::WithinBudget(*scope.client, Now(), &wait_s)) {
    // At most 59 s: Anthropic's SDK (so Claude Code) heeds a Retry-After under a minute only, and
    // otherwise retries a few seconds apart and gives up sooner.
    const int64_t wait = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait_s)));
    const int64_t seconds = std::min<int64_t>(wait, 59);
    HttpResponse response = Error(
        request, scope.shape, 429,
        fmt::format("client '{}' has used its budget of {} tokens a minute (prompt tokens not read "
                    "from the cache, and output tokens); it has room again in {} s, or sooner as "
                    "its requests in progress end",
                    scope.client->name, scope.client->tokens_per_minute, wait));
    response.set(http::field::retry_after, std::to_string(seconds));
    return response;
  }
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
    WarnOfLoop(request);
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
  if (!model && !facts.model.empty() && request.method() == http::verb::post) {
    // An adapter loaded through the gateway that the servers forgot (they restarted): being
    // loaded again (found by review: a 404 "not served here" until it was).
    bool still_missing = false;
    model = co_await AwaitAdapterReload(facts.model, &still_missing);
    HeaderViews(request);
    if (still_missing) {
      HttpResponse response = Error(
          request, shape, 503,
          fmt::format("LoRA adapter '{}', loaded through the gateway, is on none of its model's "
                      "servers now: they restarted, or were down, and have not loaded it again "
                      "yet (the gateway's log says why if a load failed)",
                      ValidUtf8OrEscaped(facts.model)));
      response.set(http::field::retry_after, "10");
      co_await ex.Respond(std::move(response));
      co_return;
    }
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
  // A request sent with others holds what its prompt will likely cost of its client's budget
  // until its cost is known.
  if (generation && scope.client && scope.client->tokens_per_minute) {
    const double guess = static_cast<double>(EstimateTokensWithInlineData(request.body()));
    slot.Hold(ClientTable::PromptHold(*scope.client->counts, guess), Now());
  }
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
  if (body->size() <= kCodedSmallBody) {
    const DecodedBody at_once =
        DecodeContentCoding(codings, body, std::min(limit, kDecodedOnTheShard));
    // (Left as it was when it decodes to more: decoded again, whole, off the shard.)
    if (!at_once.over_limit || limit <= kDecodedOnTheShard)
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
  // Counted until its decoding is done, on the decoding thread (found by review: counted until
  // the shard took the request up again, a burst of small bodies read in one turn of the shard's
  // loop was refused), or until this frame ends without it.
  struct Pending {
    std::atomic<int64_t>& count;
    std::atomic<bool> counted{true};
    void Done() {
      if (counted.exchange(false)) count.fetch_sub(1, std::memory_order_relaxed);
    }
    ~Pending() { Done(); }
  } pending{decodes_pending_};
  // Off the shard: a few kilobytes can take tens of milliseconds to decode, which the shard's
  // other connections would wait for. The request is this coroutine's, untouched meanwhile.
  auto decode = [&codings, body, limit, &pending] {
    const DecodedBody decoded = DecodeContentCoding(codings, body, limit);
    pending.Done();
    return decoded;
  };
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
                     ? "model: the string is not valid JSON text (a bad escape, or an escaped lone "
                       "surrogate)"
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
      // A keyless conversation is known by its opening and first reply from its second turn on;
      // its first turn's key stands for it where that must not change (admission's reservation,
      // a hashing policy's ring), as for a keyless turn that resends its history (found by
      // review: the second turn of a keyless chain waited behind its own first turn's room).
      key.opening_key = std::string(FirstTurnKeyOf(key.key));
      key.shorter_keys.clear();
      *stored_on = model.ReplicaOfResponse(facts->previous_response_id);
    }
  }
  return key;
}

}  // namespace warden
