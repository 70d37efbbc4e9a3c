// The same call to every server of a model at once, for what vLLM does per server rather than per
// request: loading a LoRA adapter (lora_adapters.cc), resetting the prefix cache (cache_reset.cc).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/model_state.h"
#include "net/upstream_get.h"

namespace warden {

// A server to call, and the key it wants.
struct ServerCall {
  UpstreamPool* pool;
  std::string_view authorization;
};

ServerCall CallTo(const ModelState& model, size_t server);

// Whether the server answers (its health checks pass and no request found it down since).
bool ServerHealthy(ModelState& model, size_t server);

// The same call to every server at once; their results in the servers' order (a call that failed
// to run has its error said).
boost::asio::awaitable<std::vector<UpstreamGetResult>> CallServers(
    const std::vector<ServerCall>& servers, int shard, boost::beast::http::verb method,
    std::string path, std::string body, std::chrono::milliseconds timeout,
    std::chrono::milliseconds connect_timeout);

}  // namespace warden
