#include "gateway/server_calls.h"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <set>

namespace warden {
namespace asio = boost::asio;

ServerCall CallTo(const ModelState& model, size_t server, std::string_view via) {
  return {model.pools()[server].get(), model.replica_authorization(), via};
}

bool ServerHealthy(ModelState& model, size_t server) {
  const int replica = model.ReplicasOf(server).front();
  return model.WithRouter([&](ModelRouter& r) { return r.healthy(replica); });
}

bool ServerAnswers(ModelState& model, size_t server) {
  const int replica = model.ReplicasOf(server).front();
  return model.WithRouter([&](ModelRouter& r) {
    return r.healthy(replica) || r.scraped(replica).asleep.value_or(false);
  });
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
                                       16 << 20, connect_timeout, -1, s.via),
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

size_t EveryServerCall::Done() const {
  size_t done = 0;
  for (const UpstreamGetResult& a : answers) done += a.status / 100 == 2;
  return done;
}

std::vector<std::string> EveryServerCall::Problems(size_t quoted_bytes) const {
  std::vector<std::string> problems = not_sent;
  for (size_t i = 0; i < answers.size(); ++i)
    if (answers[i].status / 100 != 2) problems.push_back(Said(i, quoted_bytes));
  return problems;
}

std::string EveryServerCall::Said(size_t i, size_t quoted_bytes) const {
  const UpstreamGetResult& a = answers[i];
  return a.status != 0
             ? fmt::format("{} answered {}: {}", urls[i], a.status, a.body.substr(0, quoted_bytes))
             : fmt::format("{}: {}", urls[i], a.error);
}

int EveryServerCall::SameClientError() const {
  if (answers.empty() || !not_sent.empty()) return 0;
  // The request's fault, not the gateway's credentials or rate (401, 403, 429).
  const int status = answers.front().status;
  if (status != 400 && status != 404 && status != 405 && status != 409 && status != 422) return 0;
  for (const UpstreamGetResult& a : answers)
    if (a.status != status) return 0;
  return status;
}

asio::awaitable<EveryServerCall> CallEveryServer(
    const std::vector<std::unique_ptr<ModelState>>& models, int shard,
    boost::beast::http::verb method, std::string target, std::chrono::milliseconds timeout,
    std::chrono::milliseconds connect_timeout, std::string_view via) {
  EveryServerCall every;
  std::vector<ServerCall> calls;
  std::map<std::string, size_t> called;  // url: its index in every.urls
  std::set<std::string> seen;
  for (const auto& model : models) {
    for (size_t s = 0; s < model->pools().size(); ++s) {
      const std::string url = model->pools()[s]->url().ToString();
      if (seen.insert(url).second) {
        ++every.total;
        if (!ServerAnswers(*model, s)) {
          every.not_sent.push_back(url + " was not sent it (its health checks fail)");
          continue;
        }
        called.emplace(url, every.urls.size());
        every.urls.push_back(url);
        every.servers.emplace_back();
        calls.push_back(CallTo(*model, s, via));
      }
      if (const auto it = called.find(url); it != called.end())
        every.servers[it->second].emplace_back(model.get(), s);
    }
  }
  every.answers =
      co_await CallServers(calls, shard, method, std::move(target), "", timeout, connect_timeout);
  co_return every;
}

}  // namespace warden
