#include "tls_front.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <memory>

namespace warden::testing {
namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

// Copies what `from` reads to `to` until either side ends.
template <typename From, typename To>
asio::awaitable<void> Pump(From& from, To& to) {
  std::array<char, 16 * 1024> buffer;
  for (;;) {
    auto [rec, n] = co_await from.async_read_some(asio::buffer(buffer), kUseTuple);
    if (n > 0) {
      auto [wec, w] = co_await asio::async_write(to, asio::buffer(buffer.data(), n), kUseTuple);
      if (wec) co_return;
    }
    if (rec) co_return;
  }
}

asio::awaitable<void> Serve(tcp::socket client, ssl::context& context, uint16_t target_port,
                            std::atomic<int>& handshakes, std::atomic<int>& refused, std::mutex& mu,
                            std::string& server_name) {
  ssl::stream<tcp::socket> tls(std::move(client), context);
  auto [hec] = co_await tls.async_handshake(ssl::stream_base::server, kUseTuple);
  if (hec) {
    ++refused;
    co_return;
  }
  ++handshakes;
  {
    const char* name = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
    std::lock_guard lock(mu);
    server_name = name ? name : "";
  }
  tcp::socket upstream(tls.get_executor());
  auto [cec] = co_await upstream.async_connect(
      tcp::endpoint(asio::ip::address_v4::loopback(), target_port), kUseTuple);
  if (cec) co_return;
  // Whichever way ends first ends the connection.
  co_await (Pump(tls, upstream) || Pump(upstream, tls));
  boost::system::error_code ignored;
  upstream.close(ignored);
  tls.next_layer().close(ignored);
}

asio::awaitable<void> Accept(tcp::acceptor& acceptor, ssl::context& context, uint16_t target_port,
                             std::atomic<int>& handshakes, std::atomic<int>& refused,
                             std::mutex& mu, std::string& server_name) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kUseTuple);
    if (ec) co_return;
    asio::co_spawn(
        acceptor.get_executor(),
        Serve(std::move(socket), context, target_port, handshakes, refused, mu, server_name),
        asio::detached);
  }
}

}  // namespace

TlsFront::TlsFront(uint16_t target_port, const std::string& cert_file, const std::string& key_file,
                   const std::string& address)
    : context_(ssl::context::tls_server), acceptor_(io_), target_port_(target_port) {
  context_.use_certificate_chain_file(cert_file);
  context_.use_private_key_file(key_file, ssl::context::pem);
  const tcp::endpoint endpoint(asio::ip::make_address(address), 0);
  acceptor_.open(endpoint.protocol());
  acceptor_.bind(endpoint);
  acceptor_.listen();
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(
      io_, Accept(acceptor_, context_, target_port_, handshakes_, refused_, mu_, server_name_),
      asio::detached);
  thread_ = std::thread([this] { io_.run(); });
}

TlsFront::~TlsFront() {
  io_.stop();
  thread_.join();
}

}  // namespace warden::testing
