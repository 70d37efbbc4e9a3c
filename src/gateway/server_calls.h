// The same call to every server of a model at once, for what vLLM does per server rather than per
// request: loading a LoRA adapter (lora_adapters.cc), resetting the prefix cache (cache_reset.cc),
// putting the engines to sleep and waking them (sleep_control.cc).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/model_state.h"
#include "net/upstream_get.h"

namespace warden {

// A server to call, the key it wants, and the gateway's Via (a server URL that points back at the
// gateway is then refused, not called again and again).
struct ServerCall {
  UpstreamPool* pool;
  std::string_view authorization;
  std::string_view via;
};

ServerCall CallTo(const ModelState& model, size_t server, std::string_view via);

// Whether the server answers (its health checks pass and no request found it down since).
bool ServerHealthy(ModelState& model, size_t server);
// The same, or it sleeps (vLLM's sleep mode: out of service, but it answers).
bool ServerAnswers(ModelState& model, size_t server);

// The same call to every server at once; their results in the servers' order (a call that failed
// to run has its error said).
boost::asio::awaitable<std::vector<UpstreamGetResult>> CallServers(
    const std::vector<ServerCall>& servers, int shard, boost::beast::http::verb method,
    std::string path, std::string body, std::chrono::milliseconds timeout,
    std::chrono::milliseconds connect_timeout);

// One call to every server of every model (a server two models name is called once).
struct EveryServerCall {
  std::vector<std::string> urls;  // of the servers called
  // Per server called: the models' servers it is (model, server index).
  std::vector<std::vector<std::pair<ModelState*, size_t>>> servers;
  std::vector<UpstreamGetResult> answers;  // per server called
  std::vector<std::string> not_sent;       // why the others were not called
  size_t total = 0;                        // servers, called or not
  // How many answered 2xx; what the others said (with not_sent), to name in an error.
  size_t Done() const;
  std::vector<std::string> Problems(size_t quoted_bytes) const;
  // What server `i` (of those called) answered, or why it did not, to name in an error.
  std::string Said(size_t i, size_t quoted_bytes) const;
  // The status every server answered when it is the same error of the request's own (400, 404,
  // 405, 409 or 422; not one about the gateway's key or rate) for all, each called; else 0.
  int SameClientError() const;
};

// A server known to be down (ServerAnswers) is not called, and said so in not_sent.
boost::asio::awaitable<EveryServerCall> CallEveryServer(
    const std::vector<std::unique_ptr<ModelState>>& models, int shard,
    boost::beast::http::verb method, std::string target, std::chrono::milliseconds timeout,
    std::chrono::milliseconds connect_timeout, std::string_view via);

}  // namespace warden
