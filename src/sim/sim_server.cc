#include "sim/sim_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <xxhash.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <iterator>
#include <random>
#include <set>
#include <unordered_map>

#include "core/filler.h"
#include "core/protocol/adapter_request.h"
#include "net/api_keys.h"
#include "net/http_server.h"
#include "sim/api_request.h"
#include "sim/api_response.h"
#include "sim/cors.h"
#include "sim/engine_runner.h"
#include "sim/vllm_metrics.h"
#include "util/json_escape.h"
#include "util/percent_decode.h"
#include "util/query_string.h"
#include "util/steady_seconds.h"

namespace warden {
namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

bool ApiForPath(std::string_view path, SimApi* api) {
  if (path == "/v1/chat/completions") {
    *api = SimApi::kChatCompletions;
  } else if (path == "/v1/completions") {
    *api = SimApi::kCompletions;
  } else if (path == "/v1/messages") {
    *api = SimApi::kMessages;
  } else if (path == "/v1/messages/count_tokens") {
    *api = SimApi::kCountTokens;
  } else if (path == "/v1/responses") {
    *api = SimApi::kResponses;
  } else {
    return false;
  }
  return true;
}

bool IsAnthropic(SimApi api) {
  return api == SimApi::kMessages || api == SimApi::kCountTokens;
}

// How often a request without tokens yet looks whether its client is still there.
constexpr std::chrono::milliseconds kHangupPoll{50};
// vLLM's CompletionRequest.max_tokens default (OpenAI's too).
constexpr int kCompletionsDefaultMaxTokens = 16;

// Whether the client closed its connection (a peek that reads the end of the stream, or fails for
// another reason than "nothing yet"); bytes it pipelined are left where they are.
bool ClientHungUp(tcp::socket& socket) {
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

HttpServerOptions HttpOptions(const SimOptions& options) {
  HttpServerOptions http;
  http.body_limit = options.body_limit;
  http.header_timeout = std::chrono::seconds(options.keep_alive_s);
  http.server_name = "warden-sim";
  return http;
}

}  // namespace

// One HTTP endpoint and the ranks behind it.
class SimServer {
 public:
  SimServer(asio::io_context& io, const SimOptions& options, const EngineProfile& profile,
            const ScaledClock* clock, int num_ranks)
      : io_(io),
        options_(options),
        profile_(profile),
        clock_(clock),
        api_keys_(options.api_keys),
        adapters_(AdaptersAtStart(options.lora_modules)),
        http_(
            io.get_executor(), [this](HttpExchange& ex) { return Handle(ex); },
            HttpOptions(options)) {
    for (int r = 0; r < num_ranks; ++r) {
      api_servers_.emplace_back(num_ranks, options.balancer, r, num_ranks);
      ranks_.push_back(std::make_unique<EngineRunner>(io.get_executor(), profile, clock));
    }
  }

  uint16_t Start(uint16_t port) {
    for (auto& r : ranks_) r->Start();
    if (ranks_.size() > 1) asio::co_spawn(io_, BroadcastLoop(), asio::detached);
    if (options_.sleep_idle_ttl_s > 0) {
      last_inference_ = clock_->Now();
      asio::co_spawn(io_, IdleSleepLoop(), asio::detached);
    }
    return http_.Listen(options_.host, port);
  }
  void Stop() { http_.Close(); }

 private:
  // GCC 12 destroys some temporaries of a co_await expression twice (seen with ?: operands), so
  // responses are built into named locals before they are awaited.
  asio::awaitable<void> Handle(HttpExchange& ex) {
    // As uvicorn (vLLM's server): escapes decoded before the route is matched.
    const std::string_view raw_path = TargetPath(ex.request().target());
    std::string decoded;
    const std::string_view path =
        raw_path.find('%') != std::string_view::npos && PercentDecode(raw_path, &decoded)
            ? std::string_view(decoded)
            : raw_path;
    if (!api_keys_.empty() && NeedsKey(ex.request().method(), path) &&
        !api_keys_.AcceptsBearer(ex.request()[http::field::authorization])) {
      HttpResponse response =
          MakeResponse(ex.request(), http::status::unauthorized, R"({"error":"Unauthorized"})");
      co_await ex.Respond(std::move(response));
      co_return;
    }
    if (std::optional<HttpResponse> preflight = CorsPreflightAnswer(ex.request())) {
      HttpResponse response = std::move(*preflight);
      co_await ex.Respond(std::move(response));
      co_return;
    }
    SimApi api;
    if (ApiForPath(path, &api) && ex.request().method() == http::verb::post) {
      // vLLM's routes take JSON only (its validate_json_request, answered as a validation error:
      // a 400 in OpenAI's shape on every path).
      if (!IsJsonContentType(ex.request())) {
        HttpResponse response = MakeResponse(
            ex.request(), http::status::bad_request,
            OpenAiErrorBody({400, "Bad Request",
                             "Unsupported Media Type: Only 'application/json' is allowed"}));
        co_await ex.Respond(std::move(response));
        co_return;
      }
      if (auto_slept_) {      // asleep for want of requests (--sleep-idle-ttl): this one wakes it
        auto_slept_ = false;  // others coming meanwhile wait for this wake
        if (co_await Wake()) spdlog::info("awake: a request came");
        if (ClientHungUp(ex.socket())) co_return;  // it left during the wake: not run
      }
      const InferenceInFlight counted(this);
      co_await Generate(ex, api);
      co_return;
    }
    if (options_.runtime_lora_updating &&
        (path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter")) {
      if (ex.request().method() != http::verb::post) {
        HttpResponse response = MethodNotAllowed(ex.request(), "POST");
        co_await ex.Respond(std::move(response));
        co_return;
      }
      const bool load = path == "/v1/load_lora_adapter";
      co_await TakeAdapterTurn(ex.request().body(), load);
      HttpResponse response = UpdateAdapters(ex.request(), load);
      co_await ex.Respond(std::move(response));
      co_return;
    }
    if (options_.sleep_mode && (path == "/sleep" || path == "/wake_up" || path == "/is_sleeping")) {
      co_await AnswerSleepMode(ex, path);
      co_return;
    }
    if (path == "/reset_prefix_cache" || path == "/reset_mm_cache" ||
        path == "/reset_encoder_cache") {
      HttpResponse response = co_await ResetCache(ex.request(), path);
      co_await ex.Respond(std::move(response));
      co_return;
    }
    HttpResponse response = RespondToGet(ex.request(), path);
    AllowAnyOrigin(ex.request(), response);
    co_await ex.Respond(std::move(response));
  }

  // vLLM's sleep mode (--enable-sleep-mode, with VLLM_SERVER_DEV_MODE=1): POST
  // /sleep?level=0|1|2&mode=abort|wait|keep, POST /wake_up[?tags=weights&tags=kv_cache], GET
  // /is_sleeping. Asleep, the server answers /health as ever, /metrics says so
  // (vllm:engine_sleep_state), and requests wait until it wakes, as vLLM queues them.
  asio::awaitable<void> AnswerSleepMode(HttpExchange& ex, std::string_view path) {
    const HttpRequest& req = ex.request();
    const http::verb method = path == "/is_sleeping" ? http::verb::get : http::verb::post;
    HttpResponse response;
    if (req.method() != method) {
      response = MethodNotAllowed(req, method == http::verb::get ? "GET, HEAD" : "POST");
    } else if (path == "/sleep") {
      response = co_await Sleep(req);
    } else if (path == "/wake_up") {
      response = co_await WakeUp(req);
    } else {
      response = MakeResponse(req, http::status::ok,
                              fmt::format(R"({{"is_sleeping":{}}})", sleep_level_ >= 0));
    }
    co_await ex.Respond(std::move(response));
  }

  // vLLM's cache resets (with VLLM_SERVER_DEV_MODE=1; the simulator serves them always): POST
  // /reset_prefix_cache[?reset_running_requests=true] empties every rank's prefix cache, and
  // answers 409 while requests run unless they are to be preempted (computed again from their
  // start), as vLLM 0.11 on does; the multimodal and encoder caches the simulator has not.
  asio::awaitable<HttpResponse> ResetCache(const HttpRequest& req, std::string_view path) {
    if (req.method() != http::verb::post) co_return MethodNotAllowed(req, "POST");
    if (path != "/reset_prefix_cache") co_return EmptyOk(req);
    bool running_too = false;
    for (const std::string& v : QueryValues(req.target(), "reset_running_requests")) {
      const std::optional<bool> flag = QueryFlag(v);
      if (!flag) {
        co_return RefuseQuery(req, "reset_running_requests",
                              "reset_running_requests must be true or false, not '" + v + "'");
      }
      running_too = *flag;
    }
    // All or none: a rank running requests fails the reset before any rank is emptied (one that
    // starts running one while an earlier rank waits for its step may still fail alone).
    const bool running = std::any_of(ranks_.begin(), ranks_.end(),
                                     [](const auto& r) { return r->engine().num_running() > 0; });
    bool done = running_too || !running;
    for (auto& r : ranks_) {
      if (!done) break;
      const bool rank_done = co_await r->ResetPrefixCache(running_too);
      done = done && rank_done;
    }
    if (!done) co_return Detail(req, http::status::conflict, "Prefix cache reset failed.");
    spdlog::info("prefix cache reset");
    co_return EmptyOk(req);
  }

  // Starlette's Response(status_code=200): no body, no content type.
  static HttpResponse EmptyOk(const HttpRequest& req) {
    HttpResponse response = MakeResponse(req, http::status::ok, "");
    response.erase(http::field::content_type);
    return response;
  }

  // A query flag as FastAPI reads a bool.
  static std::optional<bool> QueryFlag(std::string_view v) {
    for (std::string_view yes : {"true", "1", "yes", "on", "True"})
      if (v == yes) return true;
    for (std::string_view no : {"false", "0", "no", "off", "False"})
      if (v == no) return false;
    return std::nullopt;
  }

  static HttpResponse RefuseQuery(const HttpRequest& req, std::string param, std::string message) {
    return MakeResponse(
        req, http::status::bad_request,
        OpenAiErrorBody({400, "BadRequestError", std::move(message), "query." + std::move(param)}));
  }

  asio::awaitable<HttpResponse> Sleep(const HttpRequest& req) {
    int level = 1;
    std::string mode = "abort";
    for (const std::string& v : QueryValues(req.target(), "level")) {
      if (v != "0" && v != "1" && v != "2")
        co_return RefuseQuery(req, "level", "level must be 0, 1 or 2, not '" + v + "'");
      level = v[0] - '0';
    }
    for (const std::string& v : QueryValues(req.target(), "mode")) {
      if (v != "abort" && v != "wait" && v != "keep")
        co_return RefuseQuery(req, "mode", "mode must be abort, wait or keep, not '" + v + "'");
      mode = v;
    }
    while (waking_) co_await awake_.async_wait(kUseTuple);  // then sleeps again
    // Asleep already: as vLLM, what sleeps stays asleep (a pause only may go deeper), and an idle
    // sleep still ends at the next request.
    if (sleep_level_ > 0 || (sleep_level_ == 0 && level == 0)) {
      co_return MakeResponse(req, http::status::ok,
                             fmt::format(R"({{"status":"sleeping","level":{}}})", sleep_level_));
    }
    auto_slept_ = false;  // put to sleep by hand: only a POST /wake_up wakes it
    if (!co_await FallAsleep(level, mode))
      co_return MakeResponse(req, http::status::ok, R"({"status":"awake","level":null})");
    spdlog::info("asleep at level {} (mode {}): requests wait until POST /wake_up", sleep_level_,
                 mode);
    co_return MakeResponse(req, http::status::ok,
                           fmt::format(R"({{"status":"sleeping","level":{}}})", sleep_level_));
  }

  // Puts the engines to sleep at `level` once what runs is aborted (mode abort), has finished
  // (wait) or is set back in the queue (keep). False if woken before it was done.
  asio::awaitable<bool> FallAsleep(int level, const std::string& mode) {
    sleep_level_ = level;  // from now on, requests wait
    tags_woken_.clear();
    if (mode == "abort") {
      for (auto& r : ranks_) r->AbortAll();
    } else if (mode == "wait") {
      for (auto& r : ranks_) co_await r->Idle();
      if (sleep_level_ < 0) co_return false;  // woken meanwhile
    }
    for (auto& r : ranks_) r->Pause();
    for (auto& r : ranks_) co_await r->Parked();
    if (sleep_level_ < 0) {  // woken meanwhile
      for (auto& r : ranks_) r->Resume();
      co_return false;
    }
    if (sleep_level_ >= 1) {
      for (auto& r : ranks_) r->DiscardKvCache();
    }
    co_return true;
  }

  // Wakes the engines, after options_.wake_up_s from level 1 or 2. A wake under way is waited for
  // (and if a sleep came after it, this one wakes the server again); returns whether this call
  // woke them.
  asio::awaitable<bool> Wake() {
    // One under way ends asleep again if a sleep came meanwhile: then this wakes it anew.
    while (waking_) co_await awake_.async_wait(kUseTuple);
    if (sleep_level_ < 0) co_return false;
    if (sleep_level_ >= 1 && options_.wake_up_s > 0) {
      waking_ = true;
      asio::steady_timer timer(io_);
      timer.expires_after(SteadySeconds(options_.wake_up_s / options_.time_scale));
      co_await timer.async_wait(kUseTuple);
      waking_ = false;
    }
    WakeAll();
    co_return true;
  }

  void WakeAll() {
    sleep_level_ = -1;
    tags_woken_.clear();
    auto_slept_ = false;
    last_inference_ = clock_->Now();  // a whole TTL awake first, as vLLM's idle sleep
    for (auto& r : ranks_) r->Resume();
    awake_.cancel();
  }

  // vLLM's --sleep-idle-ttl: asleep (level 1) once no inference request has come or run for the
  // TTL; the next one wakes it (Handle).
  asio::awaitable<void> IdleSleepLoop() {
    const double ttl = options_.sleep_idle_ttl_s;
    // As vLLM: a tenth of the TTL, from 10 ms to 5 s, in real time (not simulated: a high time
    // scale would poll without pause).
    const auto poll = SteadySeconds(std::clamp(ttl / options_.time_scale / 10, 0.01, 5.0));
    asio::steady_timer timer(io_);
    for (;;) {
      timer.expires_after(poll);
      if (auto [ec] = co_await timer.async_wait(kUseTuple); ec) co_return;
      if (sleep_level_ >= 0 || inference_in_flight_ > 0 || clock_->Now() - last_inference_ < ttl)
        continue;
      auto_slept_ = true;  // set first: a request that comes meanwhile wakes it
      if (co_await FallAsleep(1, "wait"))
        spdlog::info("asleep after {:g} s without a request (--sleep-idle-ttl)", ttl);
    }
  }

  asio::awaitable<HttpResponse> WakeUp(const HttpRequest& req) {
    // Level 0 (a pause) wakes with "scheduling"; levels 1 and 2 once both "weights" and
    // "kv_cache" are woken. Other tags change nothing (vLLM only warns of them).
    const std::vector<std::string> tags = QueryValues(req.target(), "tags");
    std::string woken_list;
    for (const std::string& tag : tags) {
      if (tag != "weights" && tag != "kv_cache" && tag != "scheduling")
        spdlog::warn("POST /wake_up: unknown tag '{}'", tag);
      woken_list += (woken_list.empty() ? "" : ",") + JsonString(tag);
    }
    if (sleep_level_ >= 0) {
      tags_woken_.insert(tags.begin(), tags.end());
      const bool all = sleep_level_ == 0
                           ? tags_woken_.contains("scheduling")
                           : tags_woken_.contains("weights") && tags_woken_.contains("kv_cache");
      if ((tags.empty() || all) && co_await Wake()) spdlog::info("awake");
    }
    co_return MakeResponse(
        req, http::status::ok,
        fmt::format(R"({{"status":"{}","tags_woken":{}}})",
                    sleep_level_ >= 0 ? "sleeping" : "awake",
                    tags.empty() ? std::string("null") : "[" + woken_list + "]"));
  }

  // What vLLM's --api-key guards (its AuthenticationMiddleware): paths under /v1 (the text's
  // start, as vLLM checks it), whatever the method but OPTIONS.
  static bool NeedsKey(http::verb method, std::string_view path) {
    return method != http::verb::options && path.starts_with("/v1");
  }

  // The Responses API's stored responses, the oldest forgotten past kMaxStored.
  static constexpr size_t kMaxStored = 10000;
  static constexpr size_t kMaxConversations = 1000;  // of which the conversations kept
  // `conversation`: its prompt and reply, which a request that continues it comes after (as vLLM
  // keeps a stored response's messages).
  void Store(const std::string& id, std::string body, std::vector<TokenId> conversation) {
    conversations_.insert_or_assign(id, std::move(conversation));
    if (!stored_.insert_or_assign(id, std::move(body)).second) return;
    stored_order_.push_back(id);
    if (stored_order_.size() > kMaxConversations)  // the older ones' tokens take too much room
      conversations_.erase(stored_order_[stored_order_.size() - kMaxConversations - 1]);
    if (stored_order_.size() > kMaxStored) {
      stored_.erase(stored_order_.front());
      stored_order_.pop_front();
    }
  }

  // GET or DELETE /v1/responses/{id}: the response stored here, or 404.
  HttpResponse StoredResponse(const HttpRequest& req, std::string_view id) {
    const auto it = stored_.find(std::string(id));
    if (it == stored_.end()) {
      return MakeResponse(req, http::status::not_found,
                          OpenAiErrorBody({404, "NotFoundError",
                                           fmt::format("Response with id '{}' not found.", id)}));
    }
    if (req.method() != http::verb::delete_) return MakeResponse(req, http::status::ok, it->second);
    stored_.erase(it);
    conversations_.erase(std::string(id));
    return MakeResponse(
        req, http::status::ok,
        fmt::format(R"({{"id":{},"object":"response","deleted":true}})", JsonString(id)));
  }

  HttpResponse RespondToGet(const HttpRequest& req, std::string_view path) {
    constexpr std::string_view kStored = "/v1/responses/";
    if (path.starts_with(kStored) && path.size() > kStored.size() &&
        (req.method() == http::verb::get || req.method() == http::verb::delete_)) {
      return StoredResponse(req, path.substr(kStored.size()));
    }
    SimApi api;
    if (ApiForPath(path, &api)) return MethodNotAllowed(req, "POST");
    // vLLM's /ping (SageMaker's health check) answers GET and POST as /health does.
    if (path == "/ping" && req.method() == http::verb::post)
      return MakeResponse(req, http::status::ok, "");
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      return Detail(req, http::status::not_found, "Not Found");
    }
    if (path == "/health" || path == "/ping") return MakeResponse(req, http::status::ok, "");
    if (path == "/metrics") {
      return MakeResponse(req, http::status::ok, MetricsText(),
                          "text/plain; version=0.0.4; charset=utf-8");
    }
    if (path == "/v1/models") return MakeResponse(req, http::status::ok, ModelsBody());
    if (path == "/version")
      return MakeResponse(req, http::status::ok, R"({"version":"0.26.0+warden-sim"})");
    return Detail(req, http::status::not_found, "Not Found");
  }

  // Waits until the updates of the same adapter name that came before are done, then, for a load,
  // for the time a load takes (lora_load_s): vLLM holds a lock per name for the whole update.
  asio::awaitable<void> TakeAdapterTurn(const std::string& body, bool load) {
    const std::optional<AdapterRequest> parsed = ParseAdapterRequest(body);
    if (!parsed) co_return;
    const AdapterRequest& asked = *parsed;
    const auto now = std::chrono::steady_clock::now();
    const auto takes = SteadySeconds(load ? options_.lora_load_s / options_.time_scale : 0);
    auto& busy_until = adapter_busy_until_[asked.name];
    // (Strictly after the update before it, so that the two timers cannot fire out of order.)
    const auto start = busy_until > now ? busy_until + std::chrono::microseconds(1) : now;
    busy_until = start + takes;
    if (busy_until <= now) co_return;
    if (load) spdlog::info("loading LoRA adapter '{}'", asked.name);
    asio::steady_timer wait(co_await asio::this_coro::executor, busy_until);
    co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
  }

  // POST /v1/load_lora_adapter (`load`) or /v1/unload_lora_adapter, as vLLM answers them: a text
  // line on success, its error shape otherwise.
  HttpResponse UpdateAdapters(const HttpRequest& req, bool load) {
    const auto refuse = [&](http::status status, const char* type, std::string message) {
      return MakeResponse(req, status,
                          OpenAiErrorBody({static_cast<int>(status), type, std::move(message)}));
    };
    const std::optional<AdapterRequest> parsed = ParseAdapterRequest(req.body());
    if (!parsed)
      return refuse(http::status::bad_request, "BadRequestError", "expected a JSON object");
    const AdapterRequest& asked = *parsed;
    const auto it = std::find_if(adapters_.begin(), adapters_.end(),
                                 [&](const Adapter& a) { return a.name == asked.name; });
    if (load) {
      if (asked.name.empty() || asked.path.empty()) {
        return refuse(http::status::bad_request, "InvalidUserInput",
                      "Both 'lora_name' and 'lora_path' must be provided.");
      }
      if (it != adapters_.end() && !asked.inplace) {
        return refuse(http::status::bad_request, "InvalidUserInput",
                      fmt::format("The lora adapter '{}' has already been loaded.", asked.name));
      }
      if (it != adapters_.end()) {
        it->path = asked.path;
      } else {
        adapters_.push_back({asked.name, asked.path});
      }
    } else {
      if (asked.name.empty()) {
        return refuse(http::status::bad_request, "InvalidUserInput",
                      "either 'lora_name' and 'lora_int_id' needs to be provided.");
      }
      if (it == adapters_.end()) {
        return refuse(http::status::not_found, "NotFoundError",
                      fmt::format("The lora adapter '{}' cannot be found.", asked.name));
      }
      adapters_.erase(it);
    }
    return MakeResponse(req, http::status::ok,
                        fmt::format("Success: LoRA adapter '{}' {} successfully.", asked.name,
                                    load ? "added" : "removed"),
                        "text/plain; charset=utf-8");
  }

  static HttpResponse Detail(const HttpRequest& req, http::status status, std::string_view detail) {
    return MakeResponse(req, status, fmt::format(R"({{"detail":{}}})", JsonString(detail)));
  }

  // Starlette's 405, with the Allow field it sends.
  static HttpResponse MethodNotAllowed(const HttpRequest& req, std::string_view allow) {
    HttpResponse response = Detail(req, http::status::method_not_allowed, "Method Not Allowed");
    response.set(http::field::allow, allow);
    return response;
  }

  static HttpResponse ErrorResponse(const HttpRequest& req, SimApi api, const SimError& e) {
    std::string body = IsAnthropic(api) ? AnthropicErrorBody(e) : OpenAiErrorBody(e);
    return MakeResponse(req, static_cast<http::status>(e.status), std::move(body));
  }

  // Prepared::rank of a request the balancer places when it runs.
  static constexpr int kBalancerPicks = -1;

  // A request ready to run: its engine request, rank and reply options.
  struct Prepared {
    NewRequest engine_request;
    int rank = 0;  // or kBalancerPicks
    int prompt_tokens = 0;
    bool stream = false;
    bool include_usage = false;
    bool continuous_usage = false;
    std::string tool_use_name, tool_use_input;  // SimRequest's test hook
    std::string model;   // the name the reply gives: the model's, or a LoRA adapter's
    bool store = false;  // a Responses API answer kept for GET /v1/responses/{id}
    std::vector<TokenId> conversation;  // with `store`: the prompt, for the reply to be added to
  };

  // A max_tokens past the room the prompt leaves, refused in the words of vLLM's renderer
  // (vllm/renderers/params.py): past the context, before any count; else with the prompt counted
  // up to one token past the room left for it, as vLLM's tokenizer stops there.
  void RefuseAsVllmsRenderer(int max_tokens, int prompt_tokens, SimError* error) const {
    const int context = profile_.max_model_len;
    if (max_tokens > context) {
      error->message = fmt::format(
          "max_tokens={} cannot be greater than max_model_len=max_total_tokens={}. Please request "
          "fewer output tokens. (parameter=max_tokens, value={})",
          max_tokens, context, max_tokens);
      error->param = "max_tokens";
      return;
    }
    const int room = context - max_tokens;
    const int counted = std::min(prompt_tokens, room + 1);
    error->message = fmt::format(
        "You passed {} input tokens and requested {} output tokens. However, the model's context "
        "length is only {} tokens, resulting in a maximum input length of {} tokens. Please "
        "reduce the length of the input prompt. (parameter=input_tokens, value={})",
        counted, max_tokens, context, room, counted);
    error->param = "input_tokens";
  }

  // Validates the request and turns it into an engine request. Plain function: no awaiting.
  bool Prepare(const HttpExchange& ex, SimApi api, Prepared* p, SimError* error) {
    if (ex.body_too_large()) {
      *error = {413, "BadRequestError", "request body is over the server's limit"};
      return false;
    }
    SimRequest request;
    if (!ParseSimRequest(api, ex.request().body(), &request, error, options_.render)) return false;
    const bool adapter = ServesAdapter(request.model);
    if (!request.model.empty() && request.model != options_.model && !adapter) {
      *error = {404, "NotFoundError", fmt::format("The model `{}` does not exist.", request.model),
                "model"};
      return false;
    }
    p->model = adapter ? request.model : options_.model;
    p->engine_request.cache_namespace = adapter ? AdapterCacheNamespace(request.model) : 0;
    p->prompt_tokens = static_cast<int>(request.prompt.size());
    p->stream = request.stream;
    p->include_usage = request.include_usage || options_.force_include_usage;
    p->tool_use_name = std::move(request.tool_use_name);
    p->tool_use_input = std::move(request.tool_use_input);
    p->continuous_usage =
        (request.include_usage && request.continuous_usage) || options_.force_include_usage;
    p->store = api == SimApi::kResponses && request.store;
    // Stored responses live in this server's memory, as vLLM's do: a continuation of one made
    // elsewhere is not found.
    if (!request.previous_response_id.empty()) {
      if (!stored_.contains(request.previous_response_id)) {
        *error = {404, "NotFoundError",
                  fmt::format("Response with id '{}' not found.", request.previous_response_id)};
        return false;
      }
      // (an old one's conversation may be forgotten: its continuation goes on from its input)
      if (const auto c = conversations_.find(request.previous_response_id);
          c != conversations_.end()) {
        request.prompt.insert(request.prompt.begin(), c->second.begin(), c->second.end());
        p->prompt_tokens = static_cast<int>(request.prompt.size());
      }
    }
    if (p->store) p->conversation = request.prompt;
    if (api == SimApi::kCountTokens) return true;
    if (p->prompt_tokens >= profile_.max_model_len) {
      error->message = fmt::format(
          "This model's maximum context length is {} tokens. However, your request has {} input "
          "tokens. Please reduce the length of the input messages.",
          profile_.max_model_len, p->prompt_tokens);
      return false;
    }
    // vLLM reads the rank header on chat/completions, completions and messages only: its Responses
    // API hands every request to the balancer.
    if (request.priority != 0 && !profile_.priority_scheduling) {
      error->message =
          fmt::format("Got priority {} but Priority scheduling is not enabled.", request.priority);
      return false;
    }
    if (options_.no_auto_tool_choice && request.auto_tool_choice && api != SimApi::kResponses) {
      error->message =
          "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be "
          "set";
      return false;
    }
    if (api == SimApi::kResponses) {
      p->rank = ranks_.size() == 1 ? 0 : kBalancerPicks;
    } else if (!PickRank(ex.request(), &p->rank, error)) {
      return false;
    }
    // Unless strict, longer requests than the context allows are cut to fit rather than refused,
    // so clients that ask for huge limits (Claude Code asks for 32,000) work against the simulator.
    const int room = profile_.max_model_len - p->prompt_tokens;
    // vLLM's completions API, as OpenAI's, stops at 16 tokens unless told otherwise.
    if (api == SimApi::kCompletions && request.max_tokens < 0)
      request.max_tokens = kCompletionsDefaultMaxTokens;
    if (options_.strict_max_tokens && request.max_tokens > room) {
      RefuseAsVllmsRenderer(request.max_tokens, p->prompt_tokens, error);
      return false;
    }
    NewRequest& e = p->engine_request;
    e.max_output_tokens = request.max_tokens > 0 ? std::min(request.max_tokens, room) : room;
    e.reply_tokens = request.ignore_eos ? (1 << 30) : options_.reply_tokens;
    e.output_seed = XXH3_64bits(request.prompt.data(), request.prompt.size() * sizeof(TokenId));
    e.priority = request.priority;
    e.prompt = std::move(request.prompt);
    return true;
  }

  asio::awaitable<void> Generate(HttpExchange& ex, SimApi api) {
    Prepared p;
    SimError error;
    if (!Prepare(ex, api, &p, &error)) {
      HttpResponse response = ErrorResponse(ex.request(), api, error);
      AllowAnyOrigin(ex.request(), response);
      co_await ex.Respond(std::move(response));
      co_return;
    }
    if (api == SimApi::kCountTokens) {
      HttpResponse response = MakeResponse(
          ex.request(), http::status::ok,
          fmt::format(
              R"({{"input_tokens":{},"context_management":{{"original_input_tokens":{}}}}})",
              p.prompt_tokens, p.prompt_tokens));
      AllowAnyOrigin(ex.request(), response);
      co_await ex.Respond(std::move(response));
      co_return;
    }
    co_await Run(ex, api, std::move(p));
  }

  asio::awaitable<void> Run(HttpExchange& ex, SimApi api, Prepared p) {
    const int prompt_tokens = p.prompt_tokens;
    const uint64_t output_seed = p.engine_request.output_seed;
    const bool stream = p.stream;
    const std::string id = NextId(api, ex.request());
    auto formatter =
        MakeReplyFormatter(api, ReplyIdentity{.id = id,
                                              .model = p.model,
                                              .created = UnixSeconds(),
                                              .include_usage = p.include_usage,
                                              .continuous_usage = p.continuous_usage,
                                              .prompt_token_details = options_.prompt_token_details,
                                              .tool_use_name = p.tool_use_name,
                                              .tool_use_input = p.tool_use_input});

    if (stream) {
      HttpStreamHeader header{http::status::ok, ex.request().version()};
      header.set(http::field::content_type, "text/event-stream; charset=utf-8");
      header.set(http::field::cache_control, "no-cache");
      AllowAnyOrigin(ex.request(), header);
      if (!co_await ex.StartStream(std::move(header))) co_return;
    }
    co_await ApiLatency();
    if (sleep_level_ >= 0) {  // queued while asleep; not run if its client left meanwhile
      while (sleep_level_ >= 0) co_await awake_.async_wait(kUseTuple);
      if (ClientHungUp(ex.socket())) co_return;
    }
    // Like vLLM's API server, the balancer picks once the request is in (tokenized).
    if (p.rank == kBalancerPicks) p.rank = ApiServer(ex.socket()).Pick();
    EngineRunner& runner = *ranks_[p.rank];
    const EngineRunner::Submission submission = runner.Submit(std::move(p.engine_request));
    TokenStream& tokens = *submission.stream;

    std::string text;
    ReplyUsage usage{.prompt_tokens = prompt_tokens};
    for (;;) {
      // Like vLLM, a request whose client left while it waits or its prompt is read is aborted
      // then, not at its first token (found by review: a long prefill ran on for seconds).
      co_await tokens.WaitAtMost(kHangupPoll);
      if (!tokens.has_events()) {
        if (ClientHungUp(ex.socket())) {
          runner.Abort(submission.id);
          co_return;
        }
        continue;
      }
      bool client_gone = false;
      std::string chunk;
      while (tokens.has_events()) {
        const TokenEvent e = tokens.Pop();
        if (e.finish == FinishReason::kAborted) {  // put to sleep in mode abort: no token
          usage.finish = e.finish;
          continue;
        }
        const std::string_view word =
            e.token == kImEnd ? "" : GeneratedWord(output_seed, e.output_index).text;
        std::string piece =
            word.empty() || text.empty() ? std::string(word) : fmt::format(" {}", word);
        text += piece;
        usage.completion_tokens = e.output_index + 1;
        usage.cached_tokens = e.cached_tokens;
        // The full blocks it wrote to the prefix cache: none when there is none.
        usage.created_cache_tokens =
            profile_.enable_prefix_caching
                ? std::max(0, prompt_tokens / profile_.block_size * profile_.block_size -
                                  e.cached_tokens)
                : 0;
        if (stream) chunk += formatter->StreamToken(piece, usage, e.finish != FinishReason::kNone);
        if (p.store) p.conversation.push_back(e.token);
        if (e.finish != FinishReason::kNone) usage.finish = e.finish;
      }
      if (stream && !chunk.empty()) client_gone = !co_await ex.SendChunk(chunk);
      // Like vLLM, a request whose client left is aborted: a stream finds out when it writes, a
      // whole response by looking as its tokens come.
      if (!stream && ClientHungUp(ex.socket())) client_gone = true;
      if (client_gone) {
        runner.Abort(submission.id);
        co_return;
      }
      if (usage.finish != FinishReason::kNone) break;
    }
    if (p.store) {
      if (p.conversation.empty() || p.conversation.back() != kImEnd)
        p.conversation.push_back(kImEnd);
      p.conversation.push_back(kNewline);
      Store(id, formatter->WholeBody(text, usage), std::move(p.conversation));
    }
    if (stream) {
      const std::string end = formatter->StreamEnd(usage);
      if (co_await ex.SendChunk(end)) co_await ex.EndStream();
    } else {
      HttpResponse response =
          MakeResponse(ex.request(), http::status::ok, formatter->WholeBody(text, usage));
      AllowAnyOrigin(ex.request(), response);
      co_await ex.Respond(std::move(response));
    }
  }

  bool PickRank(const HttpRequest& req, int* rank, SimError* error) {
    const int n = static_cast<int>(ranks_.size());
    auto it = req.find("X-data-parallel-rank");
    if (it != req.end()) {
      const std::string_view v = it->value();
      int r;
      const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), r);
      const bool digits = ptr == v.data() + v.size();
      if (ec == std::errc::result_out_of_range && digits) {  // an integer, just too large
        *error = {400, "BadRequestError",
                  fmt::format("data_parallel_rank {} is out of range [0, {}).", v, n)};
        return false;
      }
      if (ec == std::errc() && digits) {  // vLLM ignores non-integers
        if (r < 0 || r >= n) {
          *error = {400, "BadRequestError",
                    fmt::format("data_parallel_rank {} is out of range [0, {}).", r, n)};
          return false;
        }
        *rank = r;
        return true;
      }
    }
    *rank = n == 1 ? 0 : kBalancerPicks;
    return true;
  }

  asio::awaitable<void> ApiLatency() {
    const double latency =
        options_.api_latency_s >= 0 ? options_.api_latency_s : profile_.api_latency_s;
    if (latency <= 0) co_return;
    asio::steady_timer timer(io_, clock_->Real(latency));
    co_await timer.async_wait(kUseTuple);
  }

  // The balancer of the API server that took the connection. vLLM's API servers share one
  // listening socket, so which one accepts a connection is up to the kernel: here, a hash of the
  // client's port (consecutive connections' ports often differ by 2: a plain modulo would skip
  // API servers).
  DpBalancer& ApiServer(const tcp::socket& socket) {
    boost::system::error_code ec;
    const uint16_t port = socket.remote_endpoint(ec).port();
    const uint64_t hash = ec ? 0 : XXH3_64bits(&port, sizeof port);
    return api_servers_[hash % api_servers_.size()];
  }

  // The DP coordinator's broadcasts to the API servers' balancers.
  asio::awaitable<void> BroadcastLoop() {
    asio::steady_timer timer(io_);
    double next = clock_->Now();
    std::vector<EngineLoad> loads(ranks_.size());
    const bool fresh = api_servers_.front().mode() == DpBalancer::Mode::kFresh;
    DpCoordinator coordinator;
    for (;;) {
      next += api_servers_.front().broadcast_interval_s();
      timer.expires_at(clock_->RealAt(next));
      auto [ec] = co_await timer.async_wait(kUseTuple);
      if (ec) co_return;
      for (size_t i = 0; i < ranks_.size(); ++i) {
        loads[i] = {ranks_[i]->engine().num_waiting(), ranks_[i]->engine().num_running()};
      }
      if (fresh && !coordinator.Publishes(loads, next)) continue;
      for (DpBalancer& b : api_servers_) b.Broadcast(loads);
    }
  }

  std::string MetricsText() const {
    std::vector<EngineView> views;
    for (size_t i = 0; i < ranks_.size(); ++i)
      views.push_back(
          {&ranks_[i]->engine(), static_cast<int>(i), ranks_[i]->late_s(), sleep_level_});
    return VllmMetricsText(options_.model, views);
  }

  // As vLLM's: the model, then each LoRA adapter with the model as its parent. The model's card
  // also says it is simulated (a field vLLM's clients ignore), so that a gateway in front says so.
  std::string ModelsBody() const {
    std::string data = fmt::format(
        R"({{"id":{},"object":"model","created":{},"owned_by":"vllm","root":{},"parent":null,"max_model_len":{},)"
        R"("warden_simulated":{}}})",
        JsonString(options_.model), UnixSeconds(), JsonString(options_.model),
        profile_.max_model_len,
        JsonString(
            fmt::format("warden sim, profile {}, time x{}", profile_.name, options_.time_scale)));
    for (const auto& [name, path] : adapters_) {
      fmt::format_to(
          std::back_inserter(data),
          R"(,{{"id":{},"object":"model","created":{},"owned_by":"vllm","root":{},"parent":{},"max_model_len":null}})",
          JsonString(name), UnixSeconds(), JsonString(path), JsonString(options_.model));
    }
    return R"({"object":"list","data":[)" + data + "]}";
  }

  struct Adapter {
    std::string name;
    std::string path;  // its lora_path, listed as its "root"
  };

  // --lora-modules' adapters.
  static std::vector<Adapter> AdaptersAtStart(const std::vector<std::string>& modules) {
    std::vector<Adapter> adapters;
    for (const std::string& module : modules) {
      const size_t equals = module.find('=');
      const std::string name = module.substr(0, equals);
      adapters.push_back(
          {name, equals == std::string::npos ? "/adapters/" + name : module.substr(equals + 1)});
    }
    return adapters;
  }

  bool ServesAdapter(std::string_view name) const {
    return std::any_of(adapters_.begin(), adapters_.end(),
                       [&](const Adapter& a) { return a.name == name; });
  }

  // The prefix cache an adapter's requests read and fill, apart from the model's (0) and every
  // other adapter's; by name, so that an adapter unloaded and loaded again finds its blocks.
  static uint64_t AdapterCacheNamespace(std::string_view name) {
    return XXH3_64bits(name.data(), name.size()) | 1;
  }

  // Like vLLM: the client's X-Request-Id when it sends one, else a fresh id.
  std::string NextId(SimApi api, const HttpRequest& request) {
    const char* prefix = api == SimApi::kCompletions ? "cmpl-"
                         : api == SimApi::kResponses ? "resp_"
                                                     : "chatcmpl-";
    if (auto it = request.find("X-Request-Id"); it != request.end() && !it->value().empty()) {
      return fmt::format("{}{}", prefix, std::string_view(it->value()));
    }
    return fmt::format("{}{:016x}", prefix, ++request_counter_ * 0x9e3779b97f4a7c15ULL);
  }

  asio::io_context& io_;
  const SimOptions& options_;
  const EngineProfile& profile_;
  const ScaledClock* clock_;
  std::vector<DpBalancer> api_servers_;  // one per rank, as `vllm serve` 0.26 starts them
  const ApiKeys api_keys_;
  std::unordered_map<std::string, std::string> stored_;  // response id -> its whole body
  std::unordered_map<std::string, std::vector<TokenId>> conversations_;  // and its conversation
  std::deque<std::string> stored_order_;                                 // oldest first
  std::vector<std::unique_ptr<EngineRunner>> ranks_;
  std::vector<Adapter> adapters_;  // the LoRA adapters served now, in the order loaded
  // Per adapter name, when the last update asked for it ends (TakeAdapterTurn).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> adapter_busy_until_;
  HttpServer http_;
  // Where the ids start: apart for every server (several run side by side with --servers).
  uint64_t request_counter_ = std::random_device{}();
  // Sleep mode: the level slept at (0, 1 or 2), -1 awake; after a partial wake, the tags woken.
  int sleep_level_ = -1;
  std::set<std::string> tags_woken_;
  asio::steady_timer awake_{io_, asio::steady_timer::time_point::max()};  // cancelled on waking
  bool auto_slept_ = false;  // asleep by --sleep-idle-ttl: the next request wakes it
  bool waking_ = false;      // a wake is under way (Wake)
  // An inference request, from its start to its end, for --sleep-idle-ttl.
  struct InferenceInFlight {
    explicit InferenceInFlight(SimServer* s) : server(s) {
      ++server->inference_in_flight_;
      server->last_inference_ = server->clock_->Now();
    }
    ~InferenceInFlight() {
      --server->inference_in_flight_;
      server->last_inference_ = server->clock_->Now();
    }
    InferenceInFlight(const InferenceInFlight&) = delete;
    InferenceInFlight& operator=(const InferenceInFlight&) = delete;
    SimServer* server;
  };
  int inference_in_flight_ = 0;
  double last_inference_ = 0;  // simulated time an inference request last came or ended
};

std::string ValidateSimOptions(const SimOptions& o) {
  if (!FindProfile(o.profile)) return fmt::format("--profile: unknown profile '{}'", o.profile);
  if (o.data_parallel_size < 1 || o.data_parallel_size > 64) {
    return fmt::format("--data-parallel-size: must be 1 to 64, got {}", o.data_parallel_size);
  }
  if (o.servers < 1 || o.servers > 64)
    return fmt::format("--servers: must be 1 to 64, got {}", o.servers);
  if (std::string e = CheckKvOffloading(o.kv_offloading_gib, *FindProfile(o.profile)); !e.empty())
    return e;
  if (o.servers > 1 && o.data_parallel_size > 1) {
    return "--servers and --data-parallel-size: choose one layout (N servers, or one server with N "
           "ranks)";
  }
  if (o.keep_alive_s < 1 || o.keep_alive_s > 3600)
    return fmt::format("--http-timeout-keep-alive: must be 1 to 3600 seconds, got {}",
                       o.keep_alive_s);
  if (!(o.sleep_idle_ttl_s >= 0 && o.sleep_idle_ttl_s <= 1e9))
    return fmt::format("--sleep-idle-ttl: must be 0 or more seconds, got {}", o.sleep_idle_ttl_s);
  if (o.sleep_idle_ttl_s > 0 && !o.sleep_mode)
    return "--sleep-idle-ttl: needs --enable-sleep-mode, as in vLLM";
  if (!(o.wake_up_s >= 0 && o.wake_up_s <= 3600))
    return fmt::format("--wake-up-seconds: must be 0 to 3600, got {}", o.wake_up_s);
  if (!(o.time_scale >= 1e-3 && o.time_scale <= 1e6)) {
    return fmt::format("--time-scale: must be 1e-3 to 1e6, got {}", o.time_scale);
  }
  if (o.reply_tokens < 1)
    return fmt::format("--reply-tokens: must be >= 1, got {}", o.reply_tokens);
  if (std::isnan(o.api_latency_s) || o.api_latency_s > 3600)  // < 0: the profile's
    return fmt::format("--api-latency: must be 0 to 3600 seconds, got {}", o.api_latency_s);
  if (o.model.empty()) return "--model: must not be empty";
  std::vector<std::string> names;
  for (const std::string& module : o.lora_modules) {
    const std::string name = module.substr(0, module.find('='));
    if (name.empty() || name == o.model ||
        std::find(names.begin(), names.end(), name) != names.end())
      return fmt::format("--lora-modules: '{}': each adapter needs a name of its own", name);
    names.push_back(name);
  }
  for (const std::string& key : o.api_keys) {
    if (std::string e = CheckApiKey(key); !e.empty()) return "--api-key: " + e;
  }
  if (o.servers > 1 && o.port != 0 && o.port + o.servers - 1 > 65535) {
    return fmt::format("--port: {} + {} servers runs past port 65535", o.port, o.servers);
  }
  return {};
}

Simulator::Simulator(asio::io_context& io, const SimOptions& options)
    : options_(options), profile_(*FindProfile(options.profile)), clock_(options.time_scale) {
  profile_.enable_prefix_caching = options.prefix_caching;
  profile_.reserve_full_prompt = options.reserve_full_prompt;
  profile_.priority_scheduling = options.priority_scheduling;
  profile_.kv_offloading_gib = options.kv_offloading_gib;
  const int num_servers = options_.servers;
  const int ranks_per_server = options_.data_parallel_size;
  for (int s = 0; s < num_servers; ++s) {
    servers_.push_back(
        std::make_unique<SimServer>(io, options_, profile_, &clock_, ranks_per_server));
  }
}

Simulator::~Simulator() = default;

std::vector<uint16_t> Simulator::Start() {
  std::vector<uint16_t> ports;
  for (size_t s = 0; s < servers_.size(); ++s) {
    const uint16_t want = options_.port == 0 ? 0 : static_cast<uint16_t>(options_.port + s);
    ports.push_back(servers_[s]->Start(want));
  }
  return ports;
}

void Simulator::Stop() {
  for (auto& s : servers_) s->Stop();
}

}  // namespace warden
