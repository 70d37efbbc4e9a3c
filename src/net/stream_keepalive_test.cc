#include "net/stream_keepalive.h"

#include <gtest/gtest.h>

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>
#include <string>

#include "net/socket_pair_test_util.h"

namespace warden {
namespace {

constexpr std::string_view kHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n";
constexpr std::string_view kPing = ": ping\n\n";

HttpRequest Post() {
  HttpRequest request{http::verb::post, "/v1/chat/completions", 11};
  request.set(http::field::host, "127.0.0.1");
  return request;
}

// How many times `what` occurs in `text`.
int Count(std::string_view text, std::string_view what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Reads from `socket` into `got` until it holds `marker` `times` times (or the peer closes).
asio::awaitable<void> ReadUntil(tcp::socket& socket, std::string& got, std::string_view marker,
                                int times) {
  std::array<char, 4096> chunk;
  while (Count(got, marker) < times) {
    auto [ec, n] =
        co_await socket.async_read_some(asio::buffer(chunk), asio::as_tuple(asio::use_awaitable));
    got.append(chunk.data(), n);
    if (ec) co_return;
  }
}

TEST(StreamKeepalive, SendsTheHeadThenKeepalivesUntilStopped) {
  asio::io_context io;
  SocketPair pair(io);
  ClientStream client(std::move(pair.writer));
  HttpExchange exchange(&client, Post(), false, true);
  std::string head(kHead);
  std::string got;
  StreamKeepalive::Result result;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        StreamKeepalive keepalive(co_await asio::this_coro::executor, exchange, head, kPing,
                                  std::chrono::milliseconds(1), std::chrono::milliseconds(1));
        co_await ReadUntil(pair.reader, got, kPing, 3);
        result = co_await keepalive.Stop();
        // The response has begun: the relay goes on with the body alone.
        EXPECT_TRUE(co_await exchange.SendBody("data: x\n\n"));
        EXPECT_TRUE(co_await exchange.EndBody());
        co_await ReadUntil(pair.reader, got, "0\r\n\r\n", 1);
      },
      asio::detached);
  io.run();
  EXPECT_TRUE(result.head_sent);
  EXPECT_TRUE(result.client_ok);
  ASSERT_GE(result.sent, 3);
  EXPECT_TRUE(got.starts_with(std::string(kHead) + "Transfer-Encoding: chunked\r\n\r\n8\r\n: ping"))
      << got;
  EXPECT_EQ(Count(got, kPing), result.sent) << "none after Stop()";
  EXPECT_TRUE(got.ends_with("8\r\n: ping\n\n\r\n9\r\ndata: x\n\n\r\n0\r\n\r\n")) << got;
}

TEST(StreamKeepalive, StoppedInTimeSendsNothing) {
  asio::io_context io;
  SocketPair pair(io);
  ClientStream client(std::move(pair.writer));
  HttpExchange exchange(&client, Post(), false, true);
  std::string head(kHead);
  StreamKeepalive::Result result{.head_sent = true, .client_ok = false, .sent = -1};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        StreamKeepalive keepalive(co_await asio::this_coro::executor, exchange, head, kPing,
                                  std::chrono::hours(1), std::chrono::hours(1));
        result = co_await keepalive.Stop();
      },
      asio::detached);
  io.run();  // returns: the keepalive's timer went with Stop(), an hour early
  EXPECT_FALSE(result.head_sent);
  EXPECT_TRUE(result.client_ok);
  EXPECT_EQ(result.sent, 0);
  EXPECT_FALSE(exchange.responded());
  EXPECT_EQ(head, kHead);
}

TEST(StreamKeepalive, StopsWhenTheClientIsGone) {
  asio::io_context io;
  SocketPair pair(io);
  ClientStream client(std::move(pair.writer));
  HttpExchange exchange(&client, Post(), false, true);
  std::string head(kHead);
  pair.reader.set_option(asio::socket_base::linger(true, 0));  // closes with a reset
  pair.reader.close();
  std::optional<StreamKeepalive> keepalive;
  int told_gone = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        keepalive.emplace(co_await asio::this_coro::executor, exchange, head, kPing,
                          std::chrono::milliseconds(1), std::chrono::milliseconds(1),
                          std::function<void()>{}, [&] { ++told_gone; });
        co_return;
      },
      asio::detached);
  io.run();                 // until a write fails: the keepalives end by themselves then
  EXPECT_EQ(told_gone, 1);  // (the relay ends the replica's request then)
  StreamKeepalive::Result result;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { result = co_await keepalive->Stop(); }, asio::detached);
  io.restart();
  io.run();
  EXPECT_TRUE(result.head_sent);
  EXPECT_FALSE(result.client_ok);
}

TEST(StreamKeepalive, PingsInEachApisOwnWay) {
  EXPECT_EQ(StreamKeepalive::KeepaliveFor("/v1/messages"),
            "event: ping\ndata: {\"type\": \"ping\"}\n\n");
  EXPECT_EQ(StreamKeepalive::KeepaliveFor("/v1/chat/completions"), ": ping\n\n");
  EXPECT_EQ(StreamKeepalive::KeepaliveFor("/v1/responses"), ": ping\n\n");
}

}  // namespace
}  // namespace warden
