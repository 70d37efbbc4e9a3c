#include "net/upstream.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <charconv>
#include <filesystem>

#include "net/receive_queue.h"
#include "util/ascii_case.h"

namespace warden {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace boost::asio::experimental::awaitable_operators;

namespace {
constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

// Whether nothing has come on an idle kept-alive connection: no end of stream (the server closed
// it, e.g. its keep-alive timeout) and no byte (a response to no request would be taken for the
// next request's: the connection is out of step). When the response's last read emptied the
// socket and epoll has reported nothing for it since, that is known without a system call (as
// nginx knows it: what arrived in the last microseconds is not seen; a close then is the stale
// connection the relay sends the request again for). Otherwise one non-blocking peek.
// Over TLS too: a server that closes an idle connection sends close_notify first, and TLS 1.3's
// session tickets come right after the handshake, taken in the first response's reads.
bool StillIdle(tcp::socket& socket) {
  if (ReceiveQueueStillEmpty(socket)) return true;
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Whether TLS holds bytes past the response: decrypted and not read yet, or received and not yet
// decrypted (the server is out of step, as with bytes left in the read buffer).
bool TlsHoldsBytes(asio::ssl::stream<tcp::socket&>& tls) {
  SSL* ssl = tls.native_handle();
  return SSL_pending(ssl) > 0 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0;
}

// The host as the resolver and TLS take it: an IPv6 literal without its brackets.
std::string BareHost(const std::string& host) {
  return host.size() >= 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
}

// Why a certificate was refused, if it was.
std::string VerifyFailure(asio::ssl::stream<tcp::socket&>& tls) {
  const long result = SSL_get_verify_result(tls.native_handle());
  return result == X509_V_OK ? "" : X509_verify_cert_error_string(result);
}

// Whether `host` is an IP address (no name to send or check as TLS's server name).
bool IsIpLiteral(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}
}  // namespace

void CheckServerNamed(asio::ssl::stream<tcp::socket&>& tls, const std::string& url_host) {
  // OpenSSL's own name check (rather than a verify callback), so that a mismatch is said as such.
  const std::string host = BareHost(url_host);
  SSL* ssl = tls.native_handle();
  if (IsIpLiteral(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, host.c_str());  // SNI
    SSL_set1_host(ssl, host.c_str());
  }
}

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
    // OpenSSL says nothing when there is no store at all (no ca-certificates package).
    X509_STORE* store = SSL_CTX_get_cert_store(context->native_handle());
    if (!ec && !std::filesystem::exists(X509_get_default_cert_file()) &&
        (!std::filesystem::is_directory(X509_get_default_cert_dir()) ||
         std::filesystem::is_empty(X509_get_default_cert_dir())) &&
        sk_X509_OBJECT_num(X509_STORE_get0_objects(store)) == 0) {
      ec = asio::error::not_found;
    }
  } else {
    context->load_verify_file(tls.ca_file, ec);
  }
  if (ec) {
    *error = tls.ca_file.empty()
                 ? "no certificate authorities on this system to check https replicas against "
                   "(install ca-certificates, or give tls_ca_file): " +
                       ec.message()
                 : "cannot read the CA file " + tls.ca_file + ": " + ec.message();
    return nullptr;
  }
  return context;
}

bool ParseUpstreamUrl(std::string_view url, UpstreamUrl* out, std::string* error) {
  const auto starts_with_scheme = [url](std::string_view scheme) {  // in any case (RFC 3986)
    return url.size() >= scheme.size() && IEquals(url.substr(0, scheme.size()), scheme);
  };
  const bool tls = starts_with_scheme("https://");
  const std::string_view kScheme = tls ? "https://" : "http://";
  if (!starts_with_scheme(kScheme)) {
    *error = "expected http://host:port or https://host:port, got '" + std::string(url) + "'";
    return false;
  }
  // Requests go to the URL's path followed by theirs: a query or fragment would come first.
  if (const size_t at = url.find_first_of("?# \t\r\n"); at != std::string_view::npos) {
    *error = fmt::format("'{}': {} in a server's URL (expected http://host:port[/path])", url,
                         url[at] == '?'   ? "a query"
                         : url[at] == '#' ? "a fragment"
                                          : "a space");
    return false;
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (authority.find('@') != std::string_view::npos) {
    // Not said back: the part before '@' is a password, not for the log or the admin API.
    *error = fmt::format(
        "credentials in a URL (user:password@) are not supported, in the URL to {}: a replica's "
        "API key goes in replica_api_key",
        authority.substr(authority.rfind('@') + 1));
    return false;
  }
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
  if (!bracketed && u.host.find(':') != std::string::npos) {  // which colon starts the port?
    *error = "'" + std::string(url) + "': an IPv6 address goes in brackets, as http://[::1]:8000";
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

std::unique_ptr<UpstreamConnection> UpstreamPool::TakeIdle(int shard) {
  Shard& s = shards_[shard];
  while (!s.idle.empty()) {
    std::unique_ptr<UpstreamConnection> c = std::move(s.idle.back());
    s.idle.pop_back();
    if (!StillIdle(c->socket)) continue;  // closed, or out of step: dropped
    c->reused = true;
    return c;
  }
  return nullptr;
}

asio::awaitable<std::unique_ptr<UpstreamConnection>> UpstreamPool::Acquire(
    int shard, std::chrono::milliseconds timeout, boost::system::error_code& ec, bool fresh) {
  ec = {};
  Shard& s = shards_[shard];
  if (!fresh) {
    if (std::unique_ptr<UpstreamConnection> c = TakeIdle(shard)) co_return c;
  }
  std::vector<tcp::endpoint> endpoints;
  {
    std::lock_guard lock(mu_);
    endpoints = endpoints_;
  }
  if (endpoints.empty()) {
    tcp::resolver resolver(s.executor);
    auto [rec, results] =
        co_await resolver.async_resolve(BareHost(url_.host), std::to_string(url_.port), kUseTuple);
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
  const auto deadline = std::chrono::steady_clock::now() + timeout;  // the handshake's too
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  // Each address in turn on a socket opened here: a socket the gateway cannot have (out of
  // descriptors) is then said as such (Asio's range connect reopens the socket for each address,
  // and reports a failed reopen as operation_aborted).
  ec = asio::error::host_not_found;  // when the name resolved to no address
  for (const tcp::endpoint& endpoint : endpoints) {
    boost::system::error_code ignored;
    c->socket.close(ignored);
    c->socket.open(endpoint.protocol(), ec);
    if (ec) co_return nullptr;
    auto result =
        co_await (c->socket.async_connect(endpoint, kUseTuple) || timer.async_wait(kUseTuple));
    if (result.index() == 1) {
      ec = asio::error::timed_out;
      co_return nullptr;
    }
    std::tie(ec) = std::get<0>(result);
    if (!ec) break;
  }
  if (ec) co_return nullptr;
  c->socket.set_option(tcp::no_delay(true), ec);
  if (url_.tls) {  // (no co_await inside a condition's && either: GCC 12)
    const bool shaken = co_await Handshake(*c, deadline, ec);
    if (!shaken) co_return nullptr;
  }
  co_return c;
}

asio::awaitable<bool> UpstreamPool::Handshake(UpstreamConnection& c,
                                              std::chrono::steady_clock::time_point deadline,
                                              boost::system::error_code& ec) {
  if (!tls_) {
    ec = asio::error::no_protocol_option;
    co_return false;
  }
  c.tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(c.socket, *tls_);
  CheckServerNamed(*c.tls, url_.host);
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  auto result = co_await (c.tls->async_handshake(asio::ssl::stream_base::client, kUseTuple) ||
                          timer.async_wait(kUseTuple));
  if (result.index() == 1) {
    ec = asio::error::timed_out;
    co_return false;
  }
  ec = std::get<0>(std::get<0>(result));
  if (ec) {
    const std::string why = VerifyFailure(*c.tls);
    std::lock_guard lock(mu_);
    last_tls_failure_ = why.empty() ? ec.message() : ec.message() + ": " + why;
  }
  co_return !ec;
}

void UpstreamPool::Release(int shard, std::unique_ptr<UpstreamConnection> connection) {
  // Bytes past the end of the response: the server is out of step with its requests. Or closed
  // (given up while its answer was on its way).
  if (connection->buffer.size() > 0 || !connection->socket.is_open()) return;
  if (connection->tls && TlsHoldsBytes(*connection->tls)) return;
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

bool IsLocalResourceError(const boost::system::error_code& ec) {
  return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
         ec == asio::error::no_memory ||
         ec == boost::system::error_code(EADDRNOTAVAIL, boost::system::system_category()) ||
         ec == boost::system::error_code(ENFILE, boost::system::system_category());
}

}  // namespace warden
