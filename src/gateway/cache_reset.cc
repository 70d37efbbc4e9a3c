// vLLM's POST /reset_prefix_cache, /reset_mm_cache and /reset_encoder_cache (with
// VLLM_SERVER_DEV_MODE=1) act on the server they reach: through the gateway they go to every
// server of every model, so that an operator who resets the caches between two runs resets them
// all, as a client of one vLLM would.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

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
  return path == "/reset_prefix_cache" || path == "/reset_mm_cache" ||
         path == "/reset_encoder_cache";
}

asio::awaitable<void> Gateway::ResetCaches(HttpExchange& ex, int shard, std::string target) {
  const auto connect_timeout = ConnectTimeout();
  const std::string via = ViaAfter(ex.request());
  const EveryServerCall every =
      co_await CallEveryServer(models_, shard, http::verb::post, std::move(target),
                               kCacheResetTimeout, connect_timeout, via);
  HttpResponse response = EveryServerAnswer(ex.request(), every, false);
  co_await ex.Respond(std::move(response));
}

HttpResponse Gateway::EveryServerAnswer(const HttpRequest& request, const EveryServerCall& every,
                                        bool relay_common_body) {
  const std::vector<std::string> problems = every.Problems(kQuotedAnswerBytes);
  const size_t done = every.Done();
  if (problems.empty() && done > 0) {
    spdlog::info("{}: done on {} server{}", request.target(), done, done == 1 ? "" : "s");
    // As one server would answer, when they all said the same.
    const std::string& first = every.answers.front().body;
    const bool alike = relay_common_body &&
                       std::all_of(every.answers.begin(), every.answers.end(),
                                   [&](const UpstreamGetResult& a) { return a.body == first; });
    return MakeResponse(request, http::status::ok, alike ? first : "",
                        alike && !first.empty() ? "application/json" : "text/plain");
  }
  // Every server refused it alike: the request's fault, said as they said it.
  if (const int status = every.SameClientError(); status == 404) {
    return Error(request, ErrorShape::kOpenAi, 404,
                 fmt::format("every server answered 404 to {}: vLLM serves it only with "
                             "VLLM_SERVER_DEV_MODE=1 (/sleep and /wake_up with "
                             "--enable-sleep-mode too)",
                             TargetPath(request.target())),
                 ErrorCode::kUnknownPath);
  } else if (status != 0) {
    return MakeResponse(request, static_cast<http::status>(status), every.answers.front().body);
  }
  const std::string message = fmt::format("{} done on {} of {} servers; {}", request.target(), done,
                                          every.total, fmt::join(problems, "; "));
  spdlog::warn("{}", message);
  return Error(request, ErrorShape::kOpenAi, 502, message);
}

}  // namespace warden
