// vLLM's sleep mode (POST /sleep, POST /wake_up, GET /is_sleeping; with VLLM_SERVER_DEV_MODE=1)
// acts on the server it reaches. Through the gateway it acts on every server of every model, as
// for one vLLM: a trainer that puts its inference servers to sleep between rollouts puts them all
// to sleep. The answer waits until routing knows (a scrape of each server begun after the call):
// after a wake, the next request finds the servers in service; after a sleep, none is sent there.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <iterator>

#include "gateway/gateway.h"
#include "gateway/server_calls.h"
#include "util/steady_seconds.h"

namespace warden {
namespace {

namespace http = boost::beast::http;
namespace json = boost::json;

// A sleep in mode wait lasts as long as what runs; a wake from level 2 reloads the weights.
constexpr std::chrono::milliseconds kSleepControlTimeout{600'000};
constexpr size_t kQuotedAnswerBytes = 200;

// A server's {"is_sleeping": bool}; nullopt when the answer is not that.
std::optional<bool> ReadIsSleeping(const UpstreamGetResult& answer) {
  if (answer.status != 200) return std::nullopt;
  boost::system::error_code ec;
  const json::value v = json::parse(answer.body, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  const json::value* flag = o ? o->if_contains("is_sleeping") : nullptr;
  if (!flag || !flag->is_bool()) return std::nullopt;
  return flag->as_bool();
}

}  // namespace

bool ControlsTheEngine(std::string_view path) {
  if (path.starts_with("/v1/")) return false;  // the model's API: most requests, at once
  if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);  // Starlette redirects those
  static constexpr std::string_view kRoutes[] = {
      "/collective_rpc", "/pause",        "/resume",           "/is_paused",
      "/start_profile",  "/stop_profile", "/scale_elastic_ep", "/is_scaling_elastic_ep",
      "/server_info"};
  return std::find(std::begin(kRoutes), std::end(kRoutes), path) != std::end(kRoutes);
}

bool ChangesEveryServer(std::string_view path, http::verb method) {
  return method == http::verb::post &&
         (IsCacheReset(path) || path == "/sleep" || path == "/wake_up");
}

bool IsSleepControl(std::string_view path, http::verb method) {
  if (path == "/is_sleeping") return method == http::verb::get;
  return (path == "/sleep" || path == "/wake_up") && method == http::verb::post;
}

asio::awaitable<void> Gateway::ControlSleep(HttpExchange& ex, int shard, std::string target,
                                            std::string path) {
  const HttpRequest& request = ex.request();
  const auto connect_timeout = ConnectTimeout();
  const std::string via = ViaAfter(request);
  const EveryServerCall every =
      co_await CallEveryServer(models_, shard, request.method(), std::move(target),
                               kSleepControlTimeout, connect_timeout, via);
  if (path == "/is_sleeping") {
    HttpResponse response = IsSleepingAnswer(request, every);
    co_await ex.Respond(std::move(response));
    co_return;
  }
  std::vector<std::pair<ModelState*, size_t>> changed;
  for (size_t i = 0; i < every.answers.size(); ++i) {
    if (every.answers[i].status / 100 != 2) continue;
    for (const auto& [model, server] : every.servers[i]) {
      if (path == "/sleep") model->SetSleptByHand(server);
      changed.emplace_back(model, server);
    }
  }
  co_await ScrapeNow(changed);
  HttpResponse response = EveryServerAnswer(request, every, true);
  co_await ex.Respond(std::move(response));
}

HttpResponse Gateway::IsSleepingAnswer(const HttpRequest& request, const EveryServerCall& every) {
  if (every.SameClientError() != 0) return EveryServerAnswer(request, every, false);
  json::array servers;
  std::vector<std::string> problems = every.not_sent;
  bool all = !every.answers.empty();
  for (size_t i = 0; i < every.answers.size(); ++i) {
    const std::optional<bool> sleeping = ReadIsSleeping(every.answers[i]);
    if (!sleeping) {
      problems.push_back(every.Said(i, kQuotedAnswerBytes));
      continue;
    }
    all = all && *sleeping;
    servers.push_back(json::object{{"url", every.urls[i]}, {"is_sleeping", *sleeping}});
  }
  if (!problems.empty()) {
    return Error(request, ErrorShape::kOpenAi, 502,
                 fmt::format("/is_sleeping: {}", fmt::join(problems, "; ")));
  }
  // Asleep when every server is (the gateway serves nothing then); each server's own beside it.
  return MakeResponse(request, http::status::ok,
                      json::serialize(json::object{{"is_sleeping", all}, {"servers", servers}}));
}

asio::awaitable<void> Gateway::ScrapeNow(
    const std::vector<std::pair<ModelState*, size_t>>& servers) {
  if (servers.empty() || stopped_) co_return;
  std::vector<uint64_t> begun;
  for (const auto& [model, server] : servers) {
    begun.push_back(model->scrape_schedule().begun(server));
    model->scrape_schedule().Ask(server);
    asio::post(*shards_[0], [model, server] { model->scrape_schedule().Wake(server); });
  }
  // Within two scrape timeouts and a connect's; past that the answer goes, and routing learns
  // at the next scrapes.
  double longest_s = 0;
  for (const auto& [model, server] : servers)
    longest_s = std::max(longest_s, std::max(0.5, model->scrape_interval_s()));
  const auto deadline =
      std::chrono::steady_clock::now() + SteadySeconds(2 * longest_s + config_.connect_timeout_s);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < servers.size() && all; ++i)
      all = servers[i].first->scrape_schedule().DoneSince(servers[i].second, begun[i]);
    if (all || stopped_ || std::chrono::steady_clock::now() >= deadline) co_return;
    timer.expires_after(std::chrono::milliseconds(10));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

}  // namespace warden
