#include "net/hangup_watch.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>

#include "net/socket_pair_test_util.h"

namespace warden {
namespace {

// A client that hangs up while its request is served: the watch notices and closes the upstream
// socket, so that the replica's request ends.
TEST(HangupWatch, AClientThatHangsUpClosesTheUpstream) {
  boost::asio::io_context io;
  SocketPair client(io), upstream(io);
  HangupWatchArmer armer(io.get_executor(), std::chrono::microseconds(0));
  HangupWatch watch(client.reader, armer);
  watch.Start();
  watch.SetUpstream(&upstream.writer);
  client.writer.close();
  while (!watch.hung_up() && io.run_one() > 0) {
  }
  EXPECT_TRUE(watch.hung_up());
  EXPECT_FALSE(upstream.writer.is_open());
  watch.Stop();
}

// A failed write to the client says it is gone before the watch does (it is not armed yet, or the
// client stopped reading): the same as a hang-up, for the upstream socket of now and any later one.
TEST(HangupWatch, AClientGoneClosesTheUpstreamAndAnyLaterOne) {
  boost::asio::io_context io;
  SocketPair client(io), upstream(io), later(io);
  HangupWatchArmer armer(io.get_executor(), std::chrono::hours(1));  // never armed here
  HangupWatch watch(client.reader, armer);
  watch.Start();
  watch.SetUpstream(&upstream.writer);
  EXPECT_FALSE(watch.hung_up());
  watch.ClientGone();
  EXPECT_TRUE(watch.hung_up());
  EXPECT_FALSE(upstream.writer.is_open());
  watch.SetUpstream(&later.writer);
  EXPECT_FALSE(later.writer.is_open());
  watch.Stop();
}

}  // namespace
}  // namespace warden
