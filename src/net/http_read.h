// Reads an HTTP message into a Beast parser straight from a socket: Beast's async_read_header and
// async_read_some without their layers of composed operations, and without a trip through the
// scheduler when the buffer already holds what the parser needs.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <tuple>
#include <type_traits>

#include "net/await_tuple.h"
#include "net/receive_queue.h"

namespace warden {

enum class ReadUntil {
  kHeader,    // the parser has the whole header
  kProgress,  // the parser took some bytes (a piece of the body), or the message is done
  kMessage,   // the whole message, body included
  kBuffered,  // what the buffer holds, without reading the socket: it may be nothing
};

// Feeds `parser` from `buffer`, reading more from `socket` when it needs more. Returns Beast's
// errors as its reads do: http::error::end_of_stream when the peer closed before a message began,
// and a body parser's own errors (e.g. need_buffer) as they come. A field too large for Beast's
// field container (64 KiB, e.g. a chunked body's trailer) is http::error::bad_field, where Beast
// would throw. Each read asks the socket for at most `max_read` bytes: a server reading a request's
// header asks for little, so that the body after it is read straight into its own storage rather
// than into `buffer` and copied.
//
// Past the header, bytes the parser cannot take yet (a chunk-size line with its extensions, a
// chunked body's trailer) are kept in `buffer` until they are whole; with more than
// kMaxPendingBodyBytes of them the read fails with http::error::buffer_overflow, instead of
// growing the buffer for as long as the peer sends (Beast's header limit covers the header
// only).
inline constexpr size_t kMaxPendingBodyBytes = 64 * 1024;

// The most bytes a message's head (start line and fields) may take: past it the read fails with
// http::error::header_limit. Beast's own header limit bounds only the part it holds at once; it
// takes each field as it comes whole, so a head of many small fields sent in many reads would
// otherwise grow without end (found by review: 6,000 small fields, 70 KB, went through).
inline constexpr size_t kMaxHeadBytes = 64 * 1024;

// `Stream`: a tcp::socket, or TLS over one (ssl::stream<tcp::socket&>).
template <typename Stream, bool isRequest>
boost::asio::awaitable<boost::system::error_code> ReadHttp(
    Stream& socket, boost::beast::flat_buffer& buffer,
    boost::beast::http::basic_parser<isRequest>& parser, ReadUntil until,
    size_t max_read = 64 * 1024);

// ReadHttp's work between its reads, for a coroutine that awaits the socket itself: ReadHttp is a
// coroutine, and its frame costs every call (about 400 instructions, once per stream event where
// the relay reads them). Over a plain socket:
//
//   HttpReadStep<false> step(buffer, parser, ReadUntil::kProgress);
//   while (!step.Done()) {
//     const auto bytes = co_await step.ReadSome(socket);
//     step.Took(bytes, socket);
//   }
//   boost::system::error_code ec = step.result();
//
// does what `ec = co_await ReadHttp(socket, buffer, parser, ReadUntil::kProgress)` does.
template <bool isRequest>
class HttpReadStep {
 public:
  HttpReadStep(boost::beast::flat_buffer& buffer,
               boost::beast::http::basic_parser<isRequest>& parser, ReadUntil until,
               size_t max_read = 64 * 1024)
      : buffer_(buffer),
        parser_(parser),
        until_(until),
        max_read_(max_read),
        at_status_line_(!isRequest && !parser.got_some()) {}
  HttpReadStep(const HttpReadStep&) = delete;
  HttpReadStep& operator=(const HttpReadStep&) = delete;

  // Parses what the buffer holds. True when the read is over (result() says how); false when
  // more must be read first (ReadSome).
  bool Done();

  // The read of more bytes for the parser, to be awaited (after Done() said false): its result
  // goes to Took.
  template <typename Stream>
  auto ReadSome(Stream& socket) {
    return socket.async_read_some(room_, kAwaitTuple);
  }

  // Takes what this step's last ReadSome read from `socket` (its count is checked against the
  // room that read was given).
  template <typename Stream>
  void Took(const std::tuple<boost::system::error_code, size_t>& read, Stream& socket) {
    const auto& [read_ec, n] = read;
    if (!TookBytes(read_ec, n)) return;
    if constexpr (std::is_same_v<Stream, boost::asio::ip::tcp::socket>)
      if (n < room_.size()) NoteReceiveQueueEmpty(socket);
  }

  // How the read ended, once Done() said so: as ReadHttp's.
  const boost::system::error_code& result() const { return ec_; }

 private:
  // Whether the read took `n` bytes (false: it is over, with `read_ec` or the end of the stream).
  bool TookBytes(const boost::system::error_code& read_ec, size_t n);

  boost::beast::flat_buffer& buffer_;
  boost::beast::http::basic_parser<isRequest>& parser_;
  const ReadUntil until_;
  const size_t max_read_;
  bool at_status_line_;  // a response's parser that has taken nothing: it starts at its status line
  bool over_ = false;
  size_t head_bytes_ = 0;  // of the head, taken by the parser so far (up to kMaxHeadBytes)
  boost::system::error_code ec_;
  boost::asio::mutable_buffer room_;
};

// ReadHttp with ReadUntil::kBuffered, which never reads the socket: the same work without a
// coroutine. For a body: it does not count a head's bytes against kMaxHeadBytes.
template <bool isRequest>
boost::system::error_code ParseBuffered(boost::beast::flat_buffer& buffer,
                                        boost::beast::http::basic_parser<isRequest>& parser);

}  // namespace warden
