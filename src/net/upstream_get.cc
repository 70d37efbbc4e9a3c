#include "net/upstream_get.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <memory>
#include <optional>
#include <tuple>

#include "net/await_tuple.h"
#include "net/upstream_io.h"

namespace warden {
namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

// Bytes that are no HTTP response, as opposed to a connection closed early or an answer too big.
bool IsParseError(const boost::system::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_version).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message &&
         ec != http::error::body_limit && ec != http::error::header_limit &&
         ec != http::error::buffer_overflow;
}

}  // namespace

asio::awaitable<UpstreamGetResult> UpstreamGet(UpstreamPool& pool, int shard, std::string_view path,
                                               std::chrono::milliseconds timeout) {
  UpstreamGetResult r = co_await UpstreamCall(pool, shard, http::verb::get, path, {}, timeout);
  co_return r;
}

asio::awaitable<UpstreamGetResult> UpstreamCall(UpstreamPool& pool, int shard, http::verb method,
                                                std::string_view path, std::string body,
                                                std::chrono::milliseconds timeout,
                                                std::string_view authorization, uint64_t body_limit,
                                                std::chrono::milliseconds connect_timeout,
                                                int data_parallel_rank, std::string_view via) {
  UpstreamGetResult result;
  boost::system::error_code ec;
  // A new connection each time, but to an https server: a TLS handshake a second for each check
  // and scrape is worth saving (and the pool drops a kept connection the server closed).
  const bool keep = pool.url().tls;
  std::unique_ptr<UpstreamConnection> c =
      co_await pool.Acquire(shard, std::min(timeout, connect_timeout), ec, !keep);
  if (!c) {
    result.error = ec ? ec.message() : "no connection";
    result.local_failure = IsLocalResourceError(ec);
    result.timed_out = ec == asio::error::timed_out;
    result.refused = ec == asio::error::connection_refused;
    if (ec.category() == asio::error::get_ssl_category()) result.error = pool.last_tls_failure();
    co_return result;
  }
  result.connected = true;
  // The deadline closes the socket, which fails whatever operation is pending on it; a deadline
  // that comes after the call (its handler already queued) finds `done` and touches nothing.
  auto done = std::make_shared<bool>(false);
  auto timed_out = std::make_shared<bool>(false);
  asio::steady_timer deadline(co_await asio::this_coro::executor, timeout);
  deadline.async_wait([done, timed_out, socket = &c->socket](boost::system::error_code e) {
    if (e || *done) return;
    *timed_out = true;
    socket->close(e);
  });
  http::request<http::string_body> req{method, pool.url().base_path + std::string(path), 11};
  req.set(http::field::host, pool.url().host_header());
  req.keep_alive(keep);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  if (!authorization.empty()) req.set(http::field::authorization, authorization);
  if (data_parallel_rank >= 0) req.set("X-data-parallel-rank", std::to_string(data_parallel_rank));
  if (!via.empty()) req.set(http::field::via, via);
  req.body() = std::move(body);
  req.prepare_payload();
  boost::system::error_code wec;  // (not co_await in a conditional expression: GCC 12)
  if (c->tls) {
    std::tie(wec, std::ignore) = co_await http::async_write(*c->tls, req, kAwaitTuple);
  } else {
    std::tie(wec, std::ignore) = co_await http::async_write(c->socket, req, kAwaitTuple);
  }
  if (!wec) {
    // Interim answers (100 Continue, 103 Early Hints) come before the answer (RFC 9110 §15.2).
    std::optional<http::response_parser<http::string_body>> parser;
    boost::system::error_code rec;
    do {
      parser.emplace();
      parser->body_limit(body_limit);
      rec = co_await ReadUpstream(*c, *parser, ReadUntil::kMessage);
    } while (!rec && parser->get().result_int() / 100 == 1 &&
             parser->get().result() != http::status::switching_protocols);
    if (!rec) {
      result.status = parser->get().result_int();
      result.body = std::move(parser->get().body());
      if (keep && parser->get().keep_alive()) {
        *done = true;
        deadline.cancel();
        pool.Release(shard, std::move(c));
        co_return result;
      }
    } else {
      result.error =
          rec == http::error::body_limit ? "its answer is over the size limit" : rec.message();
      result.malformed = IsParseError(rec);
    }
  } else {
    result.error = wec.message();
  }
  // The deadline's close fails the pending operation as "Operation canceled": say what it was.
  if (*timed_out && result.status == 0) {
    result.error = fmt::format("no answer within {:g} s", timeout.count() / 1000.0);
    result.timed_out = true;
  }
  *done = true;
  deadline.cancel();
  co_return result;
}

}  // namespace warden
