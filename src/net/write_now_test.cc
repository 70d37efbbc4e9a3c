#include "net/write_now.h"

#include <gtest/gtest.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <string>

#include "net/socket_pair_test_util.h"

namespace warden {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

std::string Pattern(size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 977) % 26);
  return s;
}

TEST(WriteNow, SendsASmallWriteWholeWithoutWaiting) {
  asio::io_context io;
  SocketPair pair(io);
  const std::string head = "HTTP/1.1 200 OK\r\n\r\n", body = "{\"ok\":true}";
  const std::array<asio::const_buffer, 2> buffers = {asio::buffer(head), asio::buffer(body)};
  boost::system::error_code ec;
  EXPECT_EQ(WriteNow(pair.writer, buffers, ec), head.size() + body.size());
  EXPECT_FALSE(ec);
  std::string got(head.size() + body.size(), '\0');
  asio::read(pair.reader, asio::buffer(got));
  EXPECT_EQ(got, head + body);
}

TEST(WriteNow, LeavesWhatTheKernelDidNotTakeToWriteRestInOrder) {
  asio::io_context io;
  SocketPair pair(io);
  // More than loopback's socket buffers hold while nobody reads: the first call must stop short.
  const std::string head = "head:", body = Pattern(64 << 20);
  const std::array<asio::const_buffer, 2> buffers = {asio::buffer(head), asio::buffer(body)};
  boost::system::error_code ec;
  const size_t sent = WriteNow(pair.writer, buffers, ec);
  ASSERT_EQ(ec, asio::error::would_block);
  ASSERT_LT(sent, head.size() + body.size());
  ASSERT_GT(sent, 0u);

  boost::system::error_code rest_ec = asio::error::operation_aborted;
  std::string got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        rest_ec = co_await WriteRest(pair.writer, buffers, sent);
        pair.writer.shutdown(tcp::socket::shutdown_send);
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::array<char, 1 << 16> chunk;
        for (;;) {
          auto [read_ec, n] = co_await pair.reader.async_read_some(
              asio::buffer(chunk), asio::as_tuple(asio::use_awaitable));
          got.append(chunk.data(), n);
          if (read_ec) break;
        }
      },
      asio::detached);
  io.run();
  EXPECT_FALSE(rest_ec);
  EXPECT_EQ(got.size(), head.size() + body.size());
  EXPECT_TRUE(got == head + body);  // not EXPECT_EQ: a 64 MiB diff is no help
}

TEST(WriteNow, SaysTheErrorOfAConnectionThePeerClosed) {
  asio::io_context io;
  SocketPair pair(io);
  pair.reader.set_option(asio::socket_base::linger(true, 0));  // closes with a reset
  pair.reader.close();
  const std::string data = Pattern(1 << 20);
  boost::system::error_code ec;
  for (int i = 0; i < 100 && !ec; ++i) WriteNow(pair.writer, asio::buffer(data), ec);
  EXPECT_TRUE(ec == asio::error::connection_reset || ec == asio::error::broken_pipe) << ec;
}

}  // namespace
}  // namespace warden
