#include "net/receive_queue.h"

#include <gtest/gtest.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <string>

#include "net/socket_pair_test_util.h"

namespace warden {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// As the gateway's shards: one thread does the context's I/O, so the reactor does not lock.
constexpr int kOneThread = BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO;

// One read of `socket` into `storage`, started at once; `done` says whether it has completed.
struct PendingRead {
  PendingRead(tcp::socket& socket, std::array<char, 16>& storage) {
    socket.async_read_some(asio::buffer(storage), [this](boost::system::error_code e, size_t n) {
      ec = e;
      bytes = n;
      done = true;
    });
  }
  bool done = false;
  boost::system::error_code ec;
  size_t bytes = 0;
};

// Runs `io` until `read` completes, for at most five seconds.
void RunUntilDone(asio::io_context& io, const PendingRead& read) {
  io.restart();  // a run that ran out of work stopped the context
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!read.done && std::chrono::steady_clock::now() < deadline)
    io.run_one_for(std::chrono::milliseconds(100));
}

TEST(ReceiveQueue, TakesEffectWithThisBuildsAsio) {
  // Debian 12's Boost 1.81 with epoll: if this fails, Boost changed and the note does nothing.
  EXPECT_TRUE(ReceiveQueueNotesTakeEffect());
}

// Runs `io` until epoll has reported `socket` readable.
void WaitReadable(asio::io_context& io, tcp::socket& socket) {
  bool readable = false;
  socket.async_wait(tcp::socket::wait_read, [&](boost::system::error_code) { readable = true; });
  while (!readable) io.run_one();
  io.restart();  // run_one stopped the context when its work ran out
}

TEST(ReceiveQueue, ANotedReadWaitsForNewBytesInsteadOfTryingTheSocket) {
  asio::io_context io(kOneThread);
  SocketPair pair(io);
  NoteReceiveQueueEmpty(pair.reader);  // a socket's first note only asks epoll for peer closes
  asio::write(pair.writer, asio::buffer(std::string("xy")));
  WaitReadable(io, pair.reader);

  // A wrong note (the bytes are still queued): the read must not look at the socket by itself.
  NoteReceiveQueueEmpty(pair.reader);
  std::array<char, 16> storage{};
  PendingRead read(pair.reader, storage);
  io.poll();
  EXPECT_FALSE(read.done) << "the read tried the socket at once";

  asio::write(pair.writer, asio::buffer(std::string("z")));  // a new readiness edge
  RunUntilDone(io, read);
  ASSERT_TRUE(read.done);
  EXPECT_FALSE(read.ec);
  EXPECT_EQ(std::string(storage.data(), read.bytes), "xyz");
}

TEST(ReceiveQueue, BytesThatArriveAfterTheNoteButBeforeTheReadAreRead) {
  asio::io_context io(kOneThread);
  SocketPair pair(io);
  NoteReceiveQueueEmpty(pair.reader);                         // true: nothing was sent yet
  asio::write(pair.writer, asio::buffer(std::string("ab")));  // arrives before the read starts
  std::array<char, 16> storage{};
  PendingRead read(pair.reader, storage);
  RunUntilDone(io, read);
  ASSERT_TRUE(read.done);
  EXPECT_EQ(std::string(storage.data(), read.bytes), "ab");
}

TEST(ReceiveQueue, ACloseAfterTheNoteEndsTheRead) {
  asio::io_context io(kOneThread);
  SocketPair pair(io);
  NoteReceiveQueueEmpty(pair.reader);
  std::array<char, 16> storage{};
  PendingRead read(pair.reader, storage);
  pair.writer.close();
  RunUntilDone(io, read);
  ASSERT_TRUE(read.done);
  EXPECT_EQ(read.ec, asio::error::eof);
}

// The case a note must not break: the peer's close came with its last bytes, in one readiness
// edge that epoll has reported. No edge will follow, so the next read must look for itself.
TEST(ReceiveQueue, APeersCloseReportedWithItsLastBytesStillEndsTheNextRead) {
  asio::io_context io(kOneThread);
  SocketPair pair(io);
  NoteReceiveQueueEmpty(pair.reader);
  asio::write(pair.writer, asio::buffer(std::string("last")));
  pair.writer.shutdown(tcp::socket::shutdown_send);
  WaitReadable(io, pair.reader);
  std::array<char, 16> storage{};
  PendingRead first(pair.reader, storage);
  RunUntilDone(io, first);
  ASSERT_TRUE(first.done);
  ASSERT_EQ(std::string(storage.data(), first.bytes), "last");
  NoteReceiveQueueEmpty(pair.reader);  // a short read, as the gateway would note it
  PendingRead second(pair.reader, storage);
  RunUntilDone(io, second);
  ASSERT_TRUE(second.done) << "the end of stream was never read";
  EXPECT_EQ(second.ec, asio::error::eof);
}

TEST(ReceiveQueue, StaysEmptyUntilEpollReportsABytesArrival) {
  asio::io_context io(kOneThread);
  SocketPair pair(io);
  EXPECT_FALSE(ReceiveQueueStillEmpty(pair.reader)) << "nothing was noted yet";
  NoteReceiveQueueEmpty(pair.reader);
  NoteReceiveQueueEmpty(pair.reader);
  EXPECT_TRUE(ReceiveQueueStillEmpty(pair.reader));
  asio::write(pair.writer, asio::buffer(std::string("stray")));
  WaitReadable(io, pair.reader);
  EXPECT_FALSE(ReceiveQueueStillEmpty(pair.reader));
}

TEST(ReceiveQueue, StaysEmptyUntilEpollReportsAClose) {
  asio::io_context io(kOneThread);
  SocketPair pair(io);
  NoteReceiveQueueEmpty(pair.reader);
  NoteReceiveQueueEmpty(pair.reader);
  ASSERT_TRUE(ReceiveQueueStillEmpty(pair.reader));
  pair.writer.close();
  WaitReadable(io, pair.reader);
  EXPECT_FALSE(ReceiveQueueStillEmpty(pair.reader));
  NoteReceiveQueueEmpty(pair.reader);  // wrong, but the close epoll reported is remembered
  EXPECT_FALSE(ReceiveQueueStillEmpty(pair.reader));
}

// Urgent data stops a read at its mark, short of the bytes behind it, with no later edge.
TEST(ReceiveQueue, BytesBehindUrgentDataAreStillRead) {
  asio::io_context io(kOneThread);
  SocketPair pair(io);
  NoteReceiveQueueEmpty(pair.reader);
  const int fd = pair.writer.native_handle();
  ASSERT_EQ(::send(fd, "abc", 3, 0), 3);
  ASSERT_EQ(::send(fd, "X", 1, MSG_OOB), 1);
  ASSERT_EQ(::send(fd, "def", 3, 0), 3);
  WaitReadable(io, pair.reader);
  std::array<char, 16> storage{};
  std::string got;
  while (got.find("def") == std::string::npos) {
    PendingRead read(pair.reader, storage);
    RunUntilDone(io, read);
    ASSERT_TRUE(read.done) << "stuck after " << got;
    ASSERT_FALSE(read.ec) << read.ec.message();
    got.append(storage.data(), read.bytes);
    if (read.bytes < storage.size()) NoteReceiveQueueEmpty(pair.reader);  // as ReadHttp does
  }
  EXPECT_EQ(got, "abcdef");
}

// With several threads running the context, another could process the socket's events between
// a read and its note: the note does nothing there.
TEST(ReceiveQueue, NotesDoNothingWhereTheReactorLocks) {
  asio::io_context io;  // the default hint: any number of threads
  SocketPair pair(io);
  NoteReceiveQueueEmpty(pair.reader);
  NoteReceiveQueueEmpty(pair.reader);
  EXPECT_FALSE(ReceiveQueueStillEmpty(pair.reader));
  asio::write(pair.writer, asio::buffer(std::string("xy")));
  WaitReadable(io, pair.reader);
  NoteReceiveQueueEmpty(pair.reader);  // wrong, and ignored: the read tries the socket at once
  std::array<char, 16> storage{};
  PendingRead read(pair.reader, storage);
  io.poll();
  ASSERT_TRUE(read.done);
  EXPECT_EQ(std::string(storage.data(), read.bytes), "xy");
}

TEST(ReceiveQueue, AClosedSocketIsLeftAlone) {
  asio::io_context io(kOneThread);
  tcp::socket socket(io);
  NoteReceiveQueueEmpty(socket);  // no reactor state: nothing to note, no crash
  EXPECT_FALSE(ReceiveQueueStillEmpty(socket));
  EXPECT_FALSE(socket.is_open());
}

}  // namespace
}  // namespace warden
