#include "net/upstream_get.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <string>
#include <thread>

namespace warden {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

UpstreamGetResult Get(asio::io_context& io, uint16_t port, std::chrono::milliseconds timeout) {
  UpstreamUrl url;
  std::string error;
  EXPECT_TRUE(ParseUpstreamUrl("http://127.0.0.1:" + std::to_string(port), &url, &error));
  UpstreamPool pool({io.get_executor()}, url, 4, nullptr);
  std::optional<UpstreamGetResult> result;
  asio::co_spawn(io, UpstreamGet(pool, 0, "/metrics", timeout),
                 [&](std::exception_ptr, UpstreamGetResult r) { result = std::move(r); });
  io.run();
  io.restart();
  return result.value_or(UpstreamGetResult{});
}

// A server that accepts and never answers is slow (perhaps busy); one that refuses is gone.
// The load test counts the first as busy as it last was, the second as running nothing.
TEST(UpstreamGet, TellsASlowServerFromAGoneOne) {
  asio::io_context io;
  tcp::acceptor silent(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  const UpstreamGetResult slow =
      Get(io, silent.local_endpoint().port(), std::chrono::milliseconds(100));
  EXPECT_EQ(slow.status, 0);
  EXPECT_TRUE(slow.timed_out) << slow.error;

  uint16_t closed_port;
  {
    tcp::acceptor closed(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    closed_port = closed.local_endpoint().port();
  }
  const UpstreamGetResult gone = Get(io, closed_port, std::chrono::seconds(5));
  EXPECT_EQ(gone.status, 0);
  EXPECT_FALSE(gone.timed_out) << gone.error;
  EXPECT_FALSE(gone.error.empty());
}

// A GET answered with `bytes` (none: the connection closed at once) by a server that then closes.
UpstreamGetResult AnsweredWith(const std::string& bytes) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  std::thread server([&] {
    tcp::socket socket(acceptor.get_executor());
    acceptor.accept(socket);
    std::string request;
    char buffer[4096];
    while (request.find("\r\n\r\n") == std::string::npos)
      request.append(buffer, socket.read_some(asio::buffer(buffer)));
    if (!bytes.empty()) asio::write(socket, asio::buffer(bytes));
  });
  const UpstreamGetResult got = Get(io, acceptor.local_endpoint().port(), std::chrono::seconds(5));
  server.join();
  return got;
}

// A server that sends an interim answer (103 Early Hints) before its answer: the answer is what
// counts, not the interim one (a /health taken for "answered 103" took the replica out).
TEST(UpstreamGet, ReadsPastInterimAnswers) {
  const UpstreamGetResult got = AnsweredWith(
      "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
  EXPECT_EQ(got.status, 200) << got.error;
  EXPECT_EQ(got.body, "ok");
}

// Bytes that are no HTTP are malformed (a wrong answer); a close before any byte, or in the middle
// of an answer, is not (a server gone, as silence is).
TEST(UpstreamGet, SaysAnAnswerThatIsNoHttpApartFromOneCutShort) {
  const UpstreamGetResult ssh = AnsweredWith("SSH-2.0-OpenSSH_9.2p1\r\n");
  EXPECT_EQ(ssh.status, 0);
  EXPECT_TRUE(ssh.malformed) << ssh.error;
  EXPECT_EQ(ssh.error, "bad version");
  const UpstreamGetResult closed = AnsweredWith("");
  EXPECT_EQ(closed.status, 0);
  EXPECT_FALSE(closed.malformed) << closed.error;
  const UpstreamGetResult cut = AnsweredWith("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok");
  EXPECT_EQ(cut.status, 0);
  EXPECT_FALSE(cut.malformed) << cut.error;
}

}  // namespace
}  // namespace warden
