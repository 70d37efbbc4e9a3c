// vLLM's POST /reset_prefix_cache and /reset_mm_cache (with VLLM_SERVER_DEV_MODE=1) act on the
// server they reach: through the gateway they go to every server of every model, so that an
// operator who resets the caches between two runs resets them all, as a client of one vLLM would.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <set>

#include "gateway/gateway.h"
#include "gateway/server_calls.h"

namespace warden {
namespace {

namespace http = boost::beast::http;

// Dropping the cache takes the engine a moment; a server busy with long prefills answers late.
constexpr std::chrono::milliseconds kCacheResetTimeout{60'000};
constexpr size_t kQuotedAnswerBytes = 200;

}  // namespace

bool IsCacheReset(std::string_view path) {
  return path == "/reset_prefix_cache" || path == "/reset_mm_cache";
}

asio::awaitable<void> Gateway::ResetCaches(HttpExchange& ex, int shard, std::string target) {
  const HttpRequest& request = ex.request();
  std::vector<ServerCall> calls;
  std::vector<std::string> urls;
  std::vector<std::string> problems;
  std::set<std::string> seen;  // a server two models name is reset once
  for (const auto& model : models_) {
    for (size_t s = 0; s < model->pools().size(); ++s) {
      const std::string url = model->pools()[s]->url().ToString();
      if (!seen.insert(url).second) continue;
      if (!ServerHealthy(*model, s)) {
        problems.push_back(url + " was not sent it (its health checks fail)");
        continue;
      }
      calls.push_back(CallTo(*model, s));
      urls.push_back(url);
    }
  }
  const auto connect_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config_.connect_timeout_s * 1000));
  const std::vector<UpstreamGetResult> answers = co_await CallServers(
      calls, shard, http::verb::post, std::move(target), "", kCacheResetTimeout, connect_timeout);
  size_t done = 0;
  for (size_t i = 0; i < answers.size(); ++i) {
    const UpstreamGetResult& a = answers[i];
    if (a.status / 100 == 2) {
      ++done;
    } else if (a.status != 0) {
      problems.push_back(fmt::format("{} answered {}: {}", urls[i], a.status,
                                     a.body.substr(0, kQuotedAnswerBytes)));
    } else {
      problems.push_back(fmt::format("{}: {}", urls[i], a.error));
    }
  }
  if (problems.empty() && done > 0) {
    spdlog::info("{}: done on {} server{}", request.target(), done, done == 1 ? "" : "s");
    HttpResponse response = MakeResponse(request, http::status::ok, "", "text/plain");
    co_await ex.Respond(std::move(response));
    co_return;
  }
  const std::string message = fmt::format("{} done on {} of {} servers; {}", request.target(), done,
                                          seen.size(), fmt::join(problems, "; "));
  spdlog::warn("{}", message);
  HttpResponse response = Error(request, ErrorShape::kOpenAi, 502, message);
  co_await ex.Respond(std::move(response));
}

}  // namespace warden
