// A TLS server in front of a plain one, for tests of replicas at https:// URLs: it takes TLS on
// 127.0.0.1 with a given certificate and passes each connection's bytes both ways to a port on
// 127.0.0.1 (a `warden sim`), on a thread of its own.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace warden::testing {

class TlsFront {
 public:
  // `cert_file`, `key_file`: PEM; listens on `address` (a loopback one). Throws if they cannot be
  // read or no port can be bound.
  TlsFront(uint16_t target_port, const std::string& cert_file, const std::string& key_file,
           const std::string& address = "127.0.0.1");
  ~TlsFront();
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;

  uint16_t port() const { return port_; }
  // TLS handshakes completed, and refused (the client did not trust the certificate, say).
  int handshakes() const { return handshakes_.load(); }
  int refused() const { return refused_.load(); }
  // The server name (SNI) the last client that completed a handshake sent; empty if none.
  std::string server_name() const {
    std::lock_guard lock(mu_);
    return server_name_;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ssl::context context_;
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t target_port_;
  uint16_t port_ = 0;
  std::atomic<int> handshakes_{0};
  std::atomic<int> refused_{0};
  mutable std::mutex mu_;
  std::string server_name_;
  std::thread thread_;
};

}  // namespace warden::testing
