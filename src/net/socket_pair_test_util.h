// A connected pair of loopback sockets, for the tests of what reads and writes sockets.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace warden {

// `writer` is connected to `reader`, both on `io`.
struct SocketPair {
  explicit SocketPair(boost::asio::io_context& io) : writer(io), reader(io) {
    using boost::asio::ip::tcp;
    tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0));
    writer.connect(acceptor.local_endpoint());
    acceptor.accept(reader);
  }
  boost::asio::ip::tcp::socket writer;
  boost::asio::ip::tcp::socket reader;
};

}  // namespace warden
