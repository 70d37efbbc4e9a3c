// Keep-alive connections to one upstream HTTP server (a vLLM API server).
#pragma once

#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace warden {

// One connection, used by one request at a time. A plain socket (no Beast timers), so a pooled
// connection can be picked up by a request running on any strand.
struct UpstreamConnection {
  explicit UpstreamConnection(boost::asio::any_io_executor executor) : socket(executor) {}
  boost::asio::ip::tcp::socket socket;
  // For an https server: TLS over `socket` (closing the socket ends it too); else null.
  std::unique_ptr<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls;
  boost::beast::flat_buffer buffer;
  bool reused = false;  // taken from the pool (the server may have closed it meanwhile)
  int idle_sweeps = 0;  // SweepIdle calls it has been idle through
  // Room for relaying a response body piece by piece, reused with the connection.
  std::array<char, 16 * 1024> body_piece;
  // The request's head, then the response's, reused with the connection.
  std::string head;
};

// Whether a connection could not be made for want of the gateway's own resources (open files,
// socket buffers, memory, local ports), which says nothing of the server it was for.
bool IsLocalResourceError(const boost::system::error_code& ec);

// An http://host:port[/prefix] or https:// address.
struct UpstreamUrl {
  std::string host;
  uint16_t port = 80;
  std::string base_path = {};  // without a trailing slash; usually empty
  bool tls = false;            // https
  bool default_port() const { return port == (tls ? 443 : 80); }
  // The Host field's value: the port left out where it is the scheme's.
  std::string host_header() const {
    return default_port() ? host : host + ":" + std::to_string(port);
  }
  std::string ToString() const {
    return (tls ? "https://" : "http://") + host + ":" + std::to_string(port) + base_path;
  }
};

// Parses an http:// or https:// URL (port 80 or 443 when none is given). Returns false and fills
// `error` for anything else.
bool ParseUpstreamUrl(std::string_view url, UpstreamUrl* out, std::string* error);

// How an https server's certificate is checked: against the system's trusted authorities
// (Debian's ca-certificates) or the ones in `ca_file` (PEM), and its name against the URL's host;
// or not at all (`verify` false: a self-signed certificate on a network one trusts).
struct UpstreamTls {
  bool verify = true;
  std::string ca_file;
};

// A client's TLS over a connection to `host` (a URL's host: a name, an IP address, or an IPv6
// address in brackets): the server's certificate must name it, and a name goes out as SNI.
void CheckServerNamed(boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>& tls,
                      const std::string& host);

// The TLS client context for `tls`. Returns null and fills `error` when the CA file cannot be read.
std::shared_ptr<boost::asio::ssl::context> MakeTlsContext(const UpstreamTls& tls,
                                                          std::string* error);

// Idle kept-alive connections to one server. The gateway runs one io_context per thread (a
// shard); each shard has its own idle connections, made on its own io_context, so a connection
// never crosses threads. Thread-safe (the endpoints are shared under a mutex).
class UpstreamPool {
 public:
  // One executor per shard. REQUIRES: !shards.empty().
  // An https `url` needs `tls` (MakeTlsContext).
  UpstreamPool(std::vector<boost::asio::any_io_executor> shards, UpstreamUrl url,
               size_t max_idle = 256, std::shared_ptr<boost::asio::ssl::context> tls = nullptr);
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // An idle connection if there is one, else a new one (connect bounded by `timeout`). Returns
  // nullptr and sets `ec` when the server cannot be reached. `fresh` skips the pool.
  boost::asio::awaitable<std::unique_ptr<UpstreamConnection>> Acquire(
      int shard, std::chrono::milliseconds timeout, boost::system::error_code& ec,
      bool fresh = false);
  // Acquire's first step alone, which needs no waiting: an idle connection still fit for a
  // request (a closed one is dropped), or nullptr if there is none.
  std::unique_ptr<UpstreamConnection> TakeIdle(int shard);

  // Returns a connection that is ready for another request (a complete response was read and the
  // server did not ask to close). One with bytes left past the response is closed instead, and so
  // is an idle one on which anything arrives before it is used again.
  void Release(int shard, std::unique_ptr<UpstreamConnection> connection);

  // Closes the shard's connections idle through `max_sweeps` calls: called once a second, so that
  // none is kept past the server's own keep-alive timeout (vLLM's is 5 s) to race its close, and
  // no socket the server closed is held after a burst. From the shard's thread only.
  void SweepIdle(int shard, int max_sweeps);

  const UpstreamUrl& url() const { return url_; }
  // Why the last TLS handshake failed (the certificate's fault, if it was), for the log.
  std::string last_tls_failure() const {
    std::lock_guard lock(mu_);
    return last_tls_failure_;
  }

 private:
  // TLS on a new connection to an https server, within `timeout`: the server's name sent (SNI)
  // and its certificate checked as the context says. Returns false and sets `ec` on failure.
  boost::asio::awaitable<bool> Handshake(UpstreamConnection& c,
                                         std::chrono::steady_clock::time_point deadline,
                                         boost::system::error_code& ec);

  struct Shard {
    boost::asio::any_io_executor executor;
    std::vector<std::unique_ptr<UpstreamConnection>> idle;  // touched by the shard's thread only
  };
  std::vector<Shard> shards_;
  const UpstreamUrl url_;
  const size_t max_idle_;
  const std::shared_ptr<boost::asio::ssl::context> tls_;
  mutable std::mutex mu_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;  // resolved once, under mu_
  std::string last_tls_failure_;                           // under mu_
};

}  // namespace warden
