#include "net/http_read.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/error.hpp>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "net/await_tuple.h"
#include "net/receive_queue.h"

namespace warden {
namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

// As Beast: at least this much room per read.
constexpr size_t kMinRead = 512;

// Parses what the buffer holds. Returns whether the read is over (`ec` then says how).
// Drops the empty lines before a request line, which a server SHOULD ignore (RFC 9112 §2.2: some
// clients send a CRLF after a POST's body). Beast takes them for a method.
void DropEmptyLines(boost::beast::flat_buffer& buffer) {
  const char* data = static_cast<const char*>(buffer.data().data());
  size_t n = 0;
  while (n < buffer.size() && (data[n] == '\r' || data[n] == '\n')) ++n;
  buffer.consume(n);
}

// `head_bytes` (if not null) counts the bytes of the head taken so far, which may not pass
// kMaxHeadBytes.
template <bool isRequest>
bool Parse(boost::beast::flat_buffer& buffer, http::basic_parser<isRequest>& parser,
           ReadUntil until, boost::system::error_code& ec, size_t* head_bytes = nullptr) {
  if (isRequest && !parser.got_some()) DropEmptyLines(buffer);
  while (buffer.size() > 0 && !parser.is_done()) {
    const bool in_head = !parser.is_header_done();  // (put stops at the head's end)
    size_t used = 0;
    try {
      used = parser.put(buffer.data(), ec);
    } catch (const std::length_error&) {  // basic_fields: a name or value over 64 KiB
      ec = http::error::bad_field;
      return true;
    }
    buffer.consume(used);
    if (in_head && head_bytes && (*head_bytes += used) > kMaxHeadBytes &&
        (!ec || ec == http::error::need_more)) {
      ec = http::error::header_limit;
      return true;
    }
    const bool progress = until == ReadUntil::kHeader    ? parser.is_header_done()
                          : until == ReadUntil::kMessage ? parser.is_done()
                                                         : used > 0;  // kProgress, kBuffered
    if (ec == http::error::need_more) {
      ec = {};
      return progress;
    }
    if (ec || progress) return true;
    if (used == 0) return false;
  }
  return parser.is_done() || (until == ReadUntil::kHeader && parser.is_header_done());
}

// Whether `held` has a LF without its CR. A chunk-size line or a trailer ends in CRLF (RFC 9112
// §7.1); Beast looks for CRLF only, and would wait for bytes that never come.
bool HoldsBareLf(std::string_view held) {
  for (size_t at = held.find('\n'); at != std::string_view::npos; at = held.find('\n', at + 1))
    if (at == 0 || held[at - 1] != '\r') return true;
  return false;
}

std::string_view Held(const boost::beast::flat_buffer& buffer) {
  return {static_cast<const char*>(buffer.data().data()), buffer.size()};
}

// Whether what a response's parser left holds framing with a LF without its CR, which it would
// wait on forever. Where it stops for more bytes it is at a chunk-size line (the chunk data it
// takes as it comes), after the CRLF that ends the chunk before: that line is framing; and at the
// last chunk ("0"), so is all that follows (the trailer), which Beast takes whole once it ends in
// CRLF CRLF.
bool ChunkFramingHoldsBareLf(const boost::beast::flat_buffer& buffer) {
  std::string_view held = Held(buffer);
  if (held.starts_with("\r\n")) held.remove_prefix(2);  // the end of the chunk before
  const size_t at = held.find('\n');
  if (at != std::string_view::npos && (at == 0 || held[at - 1] != '\r')) return true;
  const size_t digits = held.find_first_not_of('0');
  const bool last_chunk = digits > 0 && digits != std::string_view::npos &&
                          std::string_view(";\r\t ").find(held[digits]) != std::string_view::npos;
  return last_chunk && HoldsBareLf(held);
}

// Whether bytes a response's parser waits on cannot begin a status line ("HTTP/1.1 200 ..."):
// Beast looks at the line only once it has it whole, and waits for a CRLF that may never come
// (content after an interim 1xx response, which has none, say).
bool CannotBeginAStatusLine(const boost::beast::flat_buffer& buffer) {
  constexpr std::string_view kStart = "HTTP/";
  const std::string_view held(static_cast<const char*>(buffer.data().data()),
                              std::min(buffer.size(), kStart.size()));
  return held != kStart.substr(0, held.size());
}

}  // namespace

template <bool isRequest>
bool HttpReadStep<isRequest>::Done() {
  if (over_) return true;
  over_ = true;
  const size_t held = buffer_.size();
  if (Parse(buffer_, parser_, until_, ec_, &head_bytes_)) return true;
  at_status_line_ = at_status_line_ && buffer_.size() == held;
  if (until_ == ReadUntil::kBuffered) return true;
  if (parser_.is_header_done() && buffer_.size() >= kMaxPendingBodyBytes) {
    ec_ = http::error::buffer_overflow;
    return true;
  }
  // A request's parser takes chunk data as it comes, so what it leaves is framing; a relayed
  // response's data may be left whole for the relay, LFs and all.
  if (isRequest && parser_.is_header_done() && parser_.chunked() && HoldsBareLf(Held(buffer_))) {
    ec_ = http::error::bad_chunk;
    return true;
  }
  if (!isRequest && parser_.is_header_done() && parser_.chunked() &&
      ChunkFramingHoldsBareLf(buffer_)) {
    ec_ = http::error::bad_chunk;
    return true;
  }
  if (at_status_line_ && CannotBeginAStatusLine(buffer_)) {
    ec_ = http::error::bad_version;
    return true;
  }
  const size_t room =
      std::clamp(buffer_.capacity() - buffer_.size(), kMinRead, std::max(kMinRead, max_read_));
  room_ = buffer_.prepare(room);
  over_ = false;
  return false;
}

template <bool isRequest>
bool HttpReadStep<isRequest>::TookBytes(const boost::system::error_code& read_ec, size_t n) {
  if (read_ec == asio::error::eof || read_ec == asio::ssl::error::stream_truncated) {
    over_ = true;
    if (!parser_.got_some()) {
      ec_ = http::error::end_of_stream;
    } else if (read_ec != asio::error::eof) {
      // Over TLS, a peer that closes without close_notify may have been cut off by someone else:
      // a body that ends with the connection is whole only after one (RFC 9112 §9.8).
      ec_ = http::error::partial_message;
    } else {
      parser_.put_eof(ec_);  // a body that ends with the connection
    }
    return false;
  }
  if (read_ec) {
    over_ = true;
    ec_ = read_ec;
    return false;
  }
  buffer_.commit(n);
  return true;
}

template class HttpReadStep<true>;
template class HttpReadStep<false>;

template <typename Stream, bool isRequest>
asio::awaitable<boost::system::error_code> ReadHttp(Stream& socket,
                                                    boost::beast::flat_buffer& buffer,
                                                    http::basic_parser<isRequest>& parser,
                                                    ReadUntil until, size_t max_read) {
  HttpReadStep<isRequest> step(buffer, parser, until, max_read);
  while (!step.Done()) {
    const auto bytes = co_await step.ReadSome(socket);
    step.Took(bytes, socket);
  }
  co_return step.result();
}

template <bool isRequest>
boost::system::error_code ParseBuffered(boost::beast::flat_buffer& buffer,
                                        http::basic_parser<isRequest>& parser) {
  boost::system::error_code ec;
  Parse(buffer, parser, ReadUntil::kBuffered, ec);
  return ec;
}

template boost::system::error_code ParseBuffered(boost::beast::flat_buffer&,
                                                 http::basic_parser<true>&);
template boost::system::error_code ParseBuffered(boost::beast::flat_buffer&,
                                                 http::basic_parser<false>&);

using Tls = asio::ssl::stream<asio::ip::tcp::socket&>;
template asio::awaitable<boost::system::error_code> ReadHttp(asio::ip::tcp::socket&,
                                                             boost::beast::flat_buffer&,
                                                             http::basic_parser<true>&, ReadUntil,
                                                             size_t);
template asio::awaitable<boost::system::error_code> ReadHttp(asio::ip::tcp::socket&,
                                                             boost::beast::flat_buffer&,
                                                             http::basic_parser<false>&, ReadUntil,
                                                             size_t);
template asio::awaitable<boost::system::error_code> ReadHttp(Tls&, boost::beast::flat_buffer&,
                                                             http::basic_parser<false>&, ReadUntil,
                                                             size_t);
template asio::awaitable<boost::system::error_code> ReadHttp(Tls&, boost::beast::flat_buffer&,
                                                             http::basic_parser<true>&, ReadUntil,
                                                             size_t);

}  // namespace warden
