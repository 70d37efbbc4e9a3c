// Reads an HTTP message into a Beast parser straight from a socket: Beast's async_read_header and
// async_read_some without their layers of composed operations, and without a trip through the
// scheduler when the buffer already holds what the parser needs.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>

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

// `Stream`: a tcp::socket, or TLS over one (ssl::stream<tcp::socket&>).
template <typename Stream, bool isRequest>
boost::asio::awaitable<boost::system::error_code> ReadHttp(
    Stream& socket, boost::beast::flat_buffer& buffer,
    boost::beast::http::basic_parser<isRequest>& parser, ReadUntil until,
    size_t max_read = 64 * 1024);

// ReadHttp with ReadUntil::kBuffered, which never reads the socket: the same work without a
// coroutine.
template <bool isRequest>
boost::system::error_code ParseBuffered(boost::beast::flat_buffer& buffer,
                                        boost::beast::http::basic_parser<isRequest>& parser);

}  // namespace warden
