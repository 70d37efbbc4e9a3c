#include "net/upstream.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <charconv>

namespace warden {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace boost::asio::experimental::awaitable_operators;

namespace {
constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

// Whether nothing has come on an idle kept-alive connection: no end of stream (the server closed
// it, e.g. its keep-alive timeout) and no byte (a response to no request would be taken for the
// next request's: the connection is out of step). One non-blocking peek.
// Over TLS a server may send records after the handshake (session tickets), which the next read
// takes in its stride: only an end of stream tells there.
bool StillIdle(tcp::socket& socket, bool tls) {
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (tls && n > 0) return true;
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Whether `host` is an IP address (no name to send or check as TLS's server name).
bool IsIpLiteral(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}
}  // namespace

std::shared_ptr<asio::ssl::context> MakeTlsContext(const UpstreamTls& tls, std::string* error) {
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  boost::system::error_code ec;
  if (!tls.verify) {
    context->set_verify_mode(asio::ssl::verify_none);
    return context;
  }
  context->set_verify_mode(asio::ssl::verify_peer, ec);
  if (tls.ca_file.empty()) {
    context->set_default_verify_paths(ec);
  } else {
    context->load_verify_file(tls.ca_file, ec);
  }
  if (ec) {
    *error = tls.ca_file.empty()
                 ? "cannot load the system's certificate authorities: " + ec.message()
                 : "cannot read the CA file " + tls.ca_file + ": " + ec.message();
    return nullptr;
  }
  return context;
}

bool ParseUpstreamUrl(std::string_view url, UpstreamUrl* out, std::string* error) {
  const bool tls = url.starts_with("https://");
  const std::string_view kScheme = tls ? "https://" : "http://";
  if (!url.starts_with(kScheme)) {
    *error = "expected http://host:port or https://host:port, got '" + std::string(url) + "'";
    return false;
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  const size_t colon = authority.rfind(':');
  UpstreamUrl u;
  u.tls = tls;
  if (colon == std::string_view::npos || authority.back() == ']') {  // no port ([::1] has colons)
    u.host = authority;
    u.port = tls ? 443 : 80;
  } else {
    u.host = authority.substr(0, colon);
    std::string_view port = authority.substr(colon + 1);
    unsigned value = 0;
    const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || ptr != port.data() + port.size() || value == 0 || value > 65535) {
      *error = "bad port in '" + std::string(url) + "'";
      return false;
    }
    u.port = static_cast<uint16_t>(value);
  }
  if (u.host.empty()) {
    *error = "no host in '" + std::string(url) + "'";
    return false;
  }
  const bool bracketed = u.host.front() == '[' && u.host.back() == ']';
  if (!bracketed && u.host.find_first_of("[]") != std::string::npos) {
    *error = "bad host in '" + std::string(url) + "'";
    return false;
  }
  u.base_path = path;
  *out = std::move(u);
  return true;
}

UpstreamPool::UpstreamPool(std::vector<asio::any_io_executor> shards, UpstreamUrl url,
                           size_t max_idle, std::shared_ptr<asio::ssl::context> tls)
    : url_(std::move(url)), max_idle_(max_idle), tls_(std::move(tls)) {
  for (auto& e : shards) shards_.push_back({e, {}});
}

asio::awaitable<std::unique_ptr<UpstreamConnection>> UpstreamPool::Acquire(
    int shard, std::chrono::milliseconds timeout, boost::system::error_code& ec, bool fresh) {
  ec = {};
  Shard& s = shards_[shard];
  while (!fresh && !s.idle.empty()) {
    auto c = std::move(s.idle.back());
    s.idle.pop_back();
    if (!StillIdle(c->socket, c->tls != nullptr)) continue;  // closed, or out of step: dropped
    c->reused = true;
    co_return c;
  }
  std::vector<tcp::endpoint> endpoints;
  {
    std::lock_guard lock(mu_);
    endpoints = endpoints_;
  }
  if (endpoints.empty()) {
    tcp::resolver resolver(s.executor);
    auto [rec, results] =
        co_await resolver.async_resolve(url_.host, std::to_string(url_.port), kUseTuple);
    if (rec) {
      ec = rec;
      co_return nullptr;
    }
    for (const auto& r : results) endpoints.push_back(r.endpoint());
    std::lock_guard lock(mu_);
    endpoints_ = endpoints;
  }
  auto c = std::make_unique<UpstreamConnection>(s.executor);
  c->buffer.reserve(16 * 1024);  // Beast reads at most the free capacity at a time
  asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
  auto result = co_await (asio::async_connect(c->socket, endpoints, kUseTuple) ||
                          timer.async_wait(kUseTuple));
  if (result.index() == 1) {
    ec = asio::error::timed_out;
    co_return nullptr;
  }
  if (auto [cec, endpoint] = std::get<0>(result); cec) {
    ec = cec;
    co_return nullptr;
  }
  c->socket.set_option(tcp::no_delay(true), ec);
  if (url_.tls && !co_await Handshake(*c, timeout, ec)) co_return nullptr;
  co_return c;
}

asio::awaitable<bool> UpstreamPool::Handshake(UpstreamConnection& c,
                                              std::chrono::milliseconds timeout,
                                              boost::system::error_code& ec) {
  if (!tls_) {
    ec = asio::error::no_protocol_option;
    co_return false;
  }
  c.tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(c.socket, *tls_);
  const bool bracketed = url_.host.front() == '[';
  const std::string host = bracketed ? url_.host.substr(1, url_.host.size() - 2) : url_.host;
  if (!IsIpLiteral(host)) SSL_set_tlsext_host_name(c.tls->native_handle(), host.c_str());
  c.tls->set_verify_callback(asio::ssl::host_name_verification(host));
  asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
  auto result = co_await (c.tls->async_handshake(asio::ssl::stream_base::client, kUseTuple) ||
                          timer.async_wait(kUseTuple));
  if (result.index() == 1) {
    ec = asio::error::timed_out;
    co_return false;
  }
  ec = std::get<0>(std::get<0>(result));
  co_return !ec;
}

void UpstreamPool::Release(int shard, std::unique_ptr<UpstreamConnection> connection) {
  // Bytes past the end of the response: the server is out of step with its requests. Or closed
  // (given up while its answer was on its way).
  if (connection->buffer.size() > 0 || !connection->socket.is_open()) return;
  Shard& s = shards_[shard];
  connection->idle_sweeps = 0;
  if (s.idle.size() < max_idle_) s.idle.push_back(std::move(connection));
}

void UpstreamPool::SweepIdle(int shard, int max_sweeps) {
  auto& idle = shards_[shard].idle;
  std::erase_if(idle, [max_sweeps](const std::unique_ptr<UpstreamConnection>& c) {
    return ++c->idle_sweeps >= max_sweeps;
  });
}

}  // namespace warden
