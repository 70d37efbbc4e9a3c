#include "net/http_read.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>
#include <vector>

#include "net/socket_pair_test_util.h"

namespace warden {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;

// What one read of a response found: its error, and the parser's state after it.
struct ReadResponse {
  boost::system::error_code ec = asio::error::operation_aborted;  // (not read)
  bool header_done = false;
  bool done = false;
  int status = 0;
  std::string body;
};

// Sends `pieces` to a response read with ReadUntil `until`, one piece each time the reader waits
// for more (so a read sees each piece alone), then closes the writer's side if `close`. The read
// goes through HttpReadStep awaited by hand (`by_step`) or through ReadHttp.
ReadResponse ReadSentResponse(const std::vector<std::string>& pieces, ReadUntil until, bool close,
                              bool by_step) {
  asio::io_context io;
  SocketPair pair(io);
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  ReadResponse got;
  size_t next = 0;
  bool closed = false;
  // The next piece, or the close after the last.
  const auto send_next = [&] {
    if (next < pieces.size()) {
      asio::write(pair.writer, asio::buffer(pieces[next++]));
    } else if (close && !closed) {
      closed = true;
      pair.writer.shutdown(tcp::socket::shutdown_send);
    }
  };
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        if (!by_step) {  // all sent at once: ReadHttp reads what comes as it comes
          for (size_t i = 0; i <= pieces.size(); ++i) send_next();
          got.ec = co_await ReadHttp(pair.reader, buffer, parser, until);
          co_return;
        }
        send_next();  // then one more each time a read has taken what was sent
        HttpReadStep<false> step(buffer, parser, until);
        while (!step.Done()) {
          const auto bytes = co_await step.ReadSome(pair.reader);
          step.Took(bytes, pair.reader);
          send_next();
        }
        got.ec = step.result();
      },
      asio::detached);
  io.run();
  got.header_done = parser.is_header_done();
  got.done = parser.is_done();
  if (got.header_done) got.status = parser.get().result_int();
  if (got.done) got.body = parser.get().body();
  return got;
}

class HttpReadStepTest : public ::testing::TestWithParam<bool> {};

TEST_P(HttpReadStepTest, ReadsAHeaderSentInPiecesAndStopsThere) {
  const ReadResponse got = ReadSentResponse(
      {"HTTP/1.1 20", "0 OK\r\nContent-Le", "ngth: 5\r\n", "\r\nhel", "lo"}, ReadUntil::kHeader,
      /*close=*/false, GetParam());
  EXPECT_FALSE(got.ec) << got.ec.message();
  EXPECT_TRUE(got.header_done);
  EXPECT_FALSE(got.done);
  EXPECT_EQ(got.status, 200);
}

TEST_P(HttpReadStepTest, ReadsAWholeChunkedMessage) {
  const ReadResponse got =
      ReadSentResponse({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nhel",
                        "lo\r\n", "6\r\n world\r\n", "0\r\n\r\n"},
                       ReadUntil::kMessage, /*close=*/false, GetParam());
  EXPECT_FALSE(got.ec) << got.ec.message();
  EXPECT_TRUE(got.done);
  EXPECT_EQ(got.body, "hello world");
}

TEST_P(HttpReadStepTest, APeerClosingBeforeAnyByteIsTheEndOfTheStream) {
  const ReadResponse got = ReadSentResponse({}, ReadUntil::kHeader, /*close=*/true, GetParam());
  EXPECT_EQ(got.ec, http::error::end_of_stream);
}

TEST_P(HttpReadStepTest, APeerClosingInsideABodyOfKnownLengthCutsItOff) {
  const ReadResponse got = ReadSentResponse({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel"},
                                            ReadUntil::kMessage, /*close=*/true, GetParam());
  EXPECT_EQ(got.ec, http::error::partial_message);
  EXPECT_FALSE(got.done);
}

TEST_P(HttpReadStepTest, ABodyWithoutLengthEndsWithTheConnection) {
  const ReadResponse got = ReadSentResponse({"HTTP/1.1 200 OK\r\n\r\nall ", "of it"},
                                            ReadUntil::kMessage, /*close=*/true, GetParam());
  EXPECT_FALSE(got.ec) << got.ec.message();
  EXPECT_TRUE(got.done);
  EXPECT_EQ(got.body, "all of it");
}

TEST_P(HttpReadStepTest, BytesThatCannotBeginAStatusLineFailAtOnce) {
  // Beast would wait for the line's end, which never comes.
  const ReadResponse got =
      ReadSentResponse({"SSH-2.0-"}, ReadUntil::kHeader, /*close=*/false, GetParam());
  EXPECT_EQ(got.ec, http::error::bad_version);
}

TEST_P(HttpReadStepTest, AChunkSizeLineEndingInABareLfFailsAtOnce) {
  const ReadResponse got = ReadSentResponse(
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "5\nhello"}, ReadUntil::kMessage,
      /*close=*/false, GetParam());
  EXPECT_EQ(got.ec, http::error::bad_chunk);
}

INSTANTIATE_TEST_SUITE_P(ByHandAndThroughReadHttp, HttpReadStepTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Step" : "ReadHttp"; });

// kProgress (the relay's mode) returns as soon as the parser took something, so a body comes in
// piece by piece: here the next piece is sent only when a read must wait, and the message still
// ends whole, with no error on the way.
TEST(HttpReadStep, WithProgressABodyComesInPieceByPieceAndEndsWhole) {
  asio::io_context io;
  SocketPair pair(io);
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  const std::vector<std::string> pieces = {
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nevent ", "\r\n", "3\r\none\r\n",
      "3\r\ntwo\r\n0\r\n\r\n"};
  size_t sent = 0;
  int returns = 0;
  boost::system::error_code ec;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        while (!parser.is_done()) {
          HttpReadStep<false> step(buffer, parser, ReadUntil::kProgress);
          while (!step.Done()) {
            if (sent < pieces.size()) asio::write(pair.writer, asio::buffer(pieces[sent++]));
            const auto bytes = co_await step.ReadSome(pair.reader);
            step.Took(bytes, pair.reader);
          }
          ++returns;
          if ((ec = step.result())) co_return;
        }
      },
      asio::detached);
  io.run();
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(sent, pieces.size());
  EXPECT_GE(returns, static_cast<int>(pieces.size()));  // at least one return for each piece read
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.get().body(), "event onetwo");
}

// Sends `request` whole, then reads its head through HttpReadStep<true> asking for at most
// `max_read` bytes a read; returns how the read ended.
boost::system::error_code ReadSentRequestHead(const std::string& request,
                                              http::request_parser<http::string_body>& parser,
                                              size_t max_read) {
  asio::io_context io;
  SocketPair pair(io);
  asio::write(pair.writer, asio::buffer(request));
  boost::beast::flat_buffer buffer;
  boost::system::error_code ec = asio::error::operation_aborted;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        HttpReadStep<true> step(buffer, parser, ReadUntil::kHeader, max_read);
        while (!step.Done()) {
          const auto bytes = co_await step.ReadSome(pair.reader);
          step.Took(bytes, pair.reader);
        }
        ec = step.result();
      },
      asio::detached);
  io.run();
  return ec;
}

// A request's head read in reads of at most `max_read` bytes (as the server reads a head), its
// body left in the buffer.
TEST(HttpReadStep, ReadsARequestHeadInSmallReads) {
  http::request_parser<http::string_body> parser;
  const boost::system::error_code ec = ReadSentRequestHead(
      "POST /v1/messages HTTP/1.1\r\nHost: h\r\nX-Claude-Code-Session-Id: s-1\r\n"
      "Content-Length: 2\r\n\r\n{}",
      parser, /*max_read=*/7);
  EXPECT_FALSE(ec) << ec.message();
  ASSERT_TRUE(parser.is_header_done());
  EXPECT_FALSE(parser.is_done());
  EXPECT_EQ(parser.get().target(), "/v1/messages");
  EXPECT_EQ(parser.get()["x-claude-code-session-id"], "s-1");
}

// A head's bytes are counted as the parser takes them: a head of many small fields read in small
// reads fails past kMaxHeadBytes (Beast's own limit bounds only what it holds at once, and it
// takes each field as it comes whole), and one that just fits is read.
TEST(HttpReadStep, AHeadOfManySmallFieldsIsBoundedAsAWhole) {
  const auto read_head = [](size_t fields) {
    std::string request = "GET / HTTP/1.1\r\nHost: h\r\n";        // 25 bytes, and 2 at the end
    for (size_t i = 0; i < fields; ++i) request += "X-H: v\r\n";  // 8 bytes each
    request += "\r\n";
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeadBytes);
    return ReadSentRequestHead(request, parser, /*max_read=*/4096);
  };
  const size_t fit = (kMaxHeadBytes - 27) / 8;
  EXPECT_FALSE(read_head(fit));
  EXPECT_EQ(read_head(fit + 1), http::error::header_limit);
}

// Past the head, bytes the parser cannot take yet are held up to kMaxPendingBodyBytes: a chunk-size
// line that never ends fails the read rather than growing the buffer for as long as it comes.
TEST(HttpReadStep, AChunkSizeLineThatNeverEndsOverflows) {
  const std::string endless_line = "5;" + std::string(kMaxPendingBodyBytes + 1024, 'x');
  const ReadResponse got =
      ReadSentResponse({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", endless_line},
                       ReadUntil::kMessage, /*close=*/false, /*by_step=*/true);
  EXPECT_EQ(got.ec, http::error::buffer_overflow);
}

// kBuffered parses what the buffer holds and never waits for the socket.
TEST(HttpReadStep, WithBufferedOnlyItParsesTheBufferAndReadsNothing) {
  boost::beast::flat_buffer buffer;
  const std::string head = "HTTP/1.1 204 No Content\r\n\r\n";
  buffer.commit(asio::buffer_copy(buffer.prepare(head.size()), asio::buffer(head)));
  http::response_parser<http::string_body> parser;
  HttpReadStep<false> step(buffer, parser, ReadUntil::kBuffered);
  EXPECT_TRUE(step.Done());
  EXPECT_FALSE(step.result());
  EXPECT_TRUE(parser.is_header_done());
  EXPECT_EQ(parser.get().result_int(), 204);

  http::response_parser<http::string_body> empty_parser;
  boost::beast::flat_buffer empty;
  HttpReadStep<false> nothing(empty, empty_parser, ReadUntil::kBuffered);
  EXPECT_TRUE(nothing.Done());  // nothing to parse, and no read either
  EXPECT_FALSE(nothing.result());
  EXPECT_FALSE(empty_parser.got_some());
}

}  // namespace
}  // namespace warden
