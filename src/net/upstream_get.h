// A small GET against an upstream server, bounded by a timeout: for health checks and scrapes.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "net/upstream.h"

namespace warden {

struct UpstreamGetResult {
  int status = 0;  // 0: no response (connect failed, timed out, connection broke)
  std::string body = {};
  std::string error = {};  // with status 0: what went wrong
  // With status 0: the gateway could not open a connection (IsLocalResourceError), so the call
  // says nothing of the server.
  bool local_failure = false;
  // With status 0: the server was slow (the connection or the answer took longer than allowed),
  // not gone (refused, reset).
  bool timed_out = false;
  // With status 0: the server's host refused the connection (nothing listens on the port).
  bool refused = false;
  // The connection was made (the server's kernel at least answered): with timed_out, the server
  // itself was slow to answer.
  bool connected = false;
  // With status 0: the server answered with bytes that are not an HTTP response (another
  // protocol on the port, say); `error` says what the parser found.
  bool malformed = false;
};

// Sends `method` base_path + path (with a JSON body if not empty, and an Authorization header if
// `authorization` is not empty) on a new connection (closed after), all within `timeout`, the
// connection made within `connect_timeout` too. A response body over `body_limit` bytes is no
// response.
boost::asio::awaitable<UpstreamGetResult> UpstreamCall(
    UpstreamPool& pool, int shard, boost::beast::http::verb method, std::string_view path,
    std::string body, std::chrono::milliseconds timeout, std::string_view authorization = {},
    uint64_t body_limit = 16 << 20,
    std::chrono::milliseconds connect_timeout = std::chrono::milliseconds::max(),
    int data_parallel_rank = -1,  // >= 0: sent with X-data-parallel-rank
    std::string_view via = {});   // a Via header's value (the gateway's, to tell a loop)

// GETs base_path + path on a new connection (closed after), all within `timeout`.

boost::asio::awaitable<UpstreamGetResult> UpstreamGet(UpstreamPool& pool, int shard,
                                                      std::string_view path,
                                                      std::chrono::milliseconds timeout);

}  // namespace warden
