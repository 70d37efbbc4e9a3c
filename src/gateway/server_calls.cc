#include "gateway/server_calls.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace warden {
namespace asio = boost::asio;

ServerCall CallTo(const ModelState& model, size_t server) {
  return {model.pools()[server].get(), model.replica_authorization()};
}

bool ServerHealthy(ModelState& model, size_t server) {
  const int replica = model.ReplicasOf(server).front();
  return model.WithRouter([&](ModelRouter& r) { return r.healthy(replica); });
}

asio::awaitable<std::vector<UpstreamGetResult>> CallServers(
    const std::vector<ServerCall>& servers, int shard, boost::beast::http::verb method,
    std::string path, std::string body, std::chrono::milliseconds timeout,
    std::chrono::milliseconds connect_timeout) {
  if (servers.empty()) co_return std::vector<UpstreamGetResult>{};
  const auto executor = co_await asio::this_coro::executor;
  const auto call = [&](const ServerCall& s) {
    return asio::co_spawn(executor,
                          UpstreamCall(*s.pool, shard, method, path, body, timeout, s.authorization,
                                       16 << 20, connect_timeout),
                          asio::deferred);
  };
  std::vector<decltype(call(servers[0]))> calls;
  for (const ServerCall& s : servers) calls.push_back(call(s));
  auto [order, failures, results] =
      co_await asio::experimental::make_parallel_group(std::move(calls))
          .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!failures[i]) continue;
    results[i] = UpstreamGetResult{};
    results[i].error = "the call failed";
  }
  co_return results;
}

}  // namespace warden
