#include "net/upstream.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
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
bool StillIdle(tcp::socket& socket) {
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}
}  // namespace

bool ParseUpstreamUrl(std::string_view url, UpstreamUrl* out, std::string* error) {
  constexpr std::string_view kScheme = "http://";
  if (url.starts_with("https://")) {
    *error = "https is not supported (terminate TLS in front of the replicas): " + std::string(url);
    return false;
  }
  if (!url.starts_with(kScheme)) {
    *error = "expected http://host:port, got '" + std::string(url) + "'";
    return false;
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  const size_t colon = authority.rfind(':');
  UpstreamUrl u;
  if (colon == std::string_view::npos) {
    u.host = authority;
    u.port = 80;
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
                           size_t max_idle)
    : url_(std::move(url)), max_idle_(max_idle) {
  for (auto& e : shards) shards_.push_back({e, {}});
}

asio::awaitable<std::unique_ptr<UpstreamConnection>> UpstreamPool::Acquire(
    int shard, std::chrono::milliseconds timeout, boost::system::error_code& ec, bool fresh) {
  ec = {};
  Shard& s = shards_[shard];
  while (!fresh && !s.idle.empty()) {
    auto c = std::move(s.idle.back());
    s.idle.pop_back();
    if (!StillIdle(c->socket)) continue;  // closed, or out of step: dropped
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
  co_return c;
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
