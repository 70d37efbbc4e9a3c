#include "net/http_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <utility>

#include "net/await_tuple.h"
#include "net/host_allowlist.h"
#include "net/http_read.h"
#include "net/log_safe.h"
#include "net/transfer_at_once.h"
#include "net/write_now.h"
#include "util/append_number.h"
#include "util/ascii_case.h"

namespace warden {

using namespace std::string_view_literals;  // literals appended without a strlen
using namespace boost::asio::experimental::awaitable_operators;
namespace {

// For the awaitable operators (see net/await_tuple.h).
constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

// The status code of a response head ("HTTP/1.1 200 OK\r\n..."); 0 if it has none.
int StatusOfHead(std::string_view head) {
  int status = 0;
  if (head.size() < 12 || head[8] != ' ') return 0;
  std::from_chars(head.data() + 9, head.data() + 12, status);
  return status;
}

constexpr size_t kReadBufferBytes = 16 * 1024;
// A request's header is read this much at a time (Claude Code's is under 1 KiB); what follows it
// in the same read is copied into the body, and the rest of the body is read into it directly.
constexpr size_t kHeaderReadSize = 4 * 1024;
// Spare body strings kept per server, at most this many bytes of room in all.
// A body is read into room given memory this much (or as much as it holds) at a time.
constexpr size_t kBodyReadStep = 256 * 1024;
constexpr size_t kMaxSpareBodyBytes = 32 * 1024 * 1024;
constexpr size_t kMaxSpareBodies = 256;
constexpr std::chrono::seconds kSweepPeriod{1};
constexpr std::chrono::seconds kFirstRequestGrace{1};
// At max_connections, a connection waiting for a request's head is closed for a new one only once
// it has waited this long: a client's head takes milliseconds to come, and the connection just
// accepted is never the one closed.
constexpr std::chrono::seconds kShedAfter{1};
// At max_connections with no connection waiting for a head: one still sending its request's body
// this long after its head came makes room (a client holding bodies must not lock the others
// out for the request's whole idle_timeout; found by review). An upload of a few megabytes takes
// far less.
constexpr std::chrono::seconds kShedBodyAfter{10};
// After refusing a request, what more the client sends is read and dropped before the connection
// closes (nginx's lingering close): for this long at most, and while the client pauses for no
// longer than kLingerQuiet. No byte cap: a client uploading a body far over the limit is still
// answered, and what a fast client can send in the time is only read, never kept.
constexpr std::chrono::seconds kLingerTime{10};
constexpr std::chrono::seconds kLingerQuiet{2};

// A request's Transfer-Encoding, if any, is chunked alone (RFC 9112 §6.3: anything else cannot be
// framed; nginx answers 501 too).
// `fields`: how many Transfer-Encoding fields it has; `first`: the first one's value.
bool KnownTransferCoding(size_t fields, std::string_view first) {
  if (fields == 0) return true;
  std::string_view coding = first;
  while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t'))
    coding.remove_prefix(1);
  while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t'))
    coding.remove_suffix(1);
  return fields == 1 && IEquals(coding, "chunked");
}

struct Refusal {
  http::status status;
  std::string message;
  std::string_view allow = {};  // the Allow field of a 405
};

// The bytes RFC 3986 allows in an authority (HostValueChars).
constexpr std::array<bool, 256> kHostValueChars = [] {
  std::array<bool, 256> fits{};
  for (int c = 'a'; c <= 'z'; ++c) fits[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) fits[c] = true;
  for (int c = '0'; c <= '9'; ++c) fits[c] = true;
  for (const char c : std::string_view("-._~%!$&'()*+,;=:[]"))
    fits[static_cast<unsigned char>(c)] = true;
  return fits;
}();

// Whether a Host field value is made of what RFC 3986's authority allows there (a name, an IP
// literal in brackets, a port): no '/', '@', space, quote or byte outside ASCII (RFC 9112 §3.2: a
// server answers 400 to an invalid one, whatever names it serves).
bool HostValueChars(std::string_view value) {
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return kHostValueChars[static_cast<unsigned char>(c)]; });
}

// The request target's form (RFC 9112 §3.2): origin-form ("/path?query", no fragment), or
// absolute-form (what a client talking to a proxy sends), or "*" for OPTIONS. Authority-form is
// CONNECT's, which the gateway does not do.
bool AcceptableTarget(http::verb method, std::string_view target) {
  if (target == "*") return method == http::verb::options;
  if (target.find('#') != std::string_view::npos) return false;
  if (target.starts_with('/')) return true;
  const size_t scheme = target.find("://");
  if (scheme == std::string_view::npos ||
      !(IEquals(target.substr(0, scheme), "http") || IEquals(target.substr(0, scheme), "https")))
    return false;
  // An http(s) URI names a host (RFC 9110 §4.2.1: one with an empty host is rejected as invalid),
  // and a userinfo part ("user@host", which HostValueChars refuses) is an error (§4.2.4).
  const std::string_view authority = TargetAuthority(target);
  const std::optional<std::string_view> host = HostName(authority);
  return host && !host->empty() && HostValueChars(authority);
}

// Whether an Upgrade field's value asks for a WebSocket.
bool NamesWebSocket(std::string_view upgrade) {
  for (const auto& token : http::token_list(upgrade))
    if (IEquals(token, "websocket")) return true;
  return false;
}

// What is wrong with a request's head that Beast's parser lets through, if anything.
std::optional<Refusal> CheckHead(const http::request_parser<http::string_body>::value_type& head) {
  if (head.method() == http::verb::connect) {
    return Refusal{http::status::not_implemented,
                   "CONNECT is not supported: this is an HTTP gateway, not a tunnel"};
  }
  // A TRACE passed on would come back with the fields the gateway added on the way, the
  // replicas' API key among them (nginx refuses it too).
  if (head.method() == http::verb::trace) {
    return Refusal{http::status::method_not_allowed,
                   "TRACE is not allowed: it would echo the request's fields", kAllowedMethods};
  }
  if (!AcceptableTarget(head.method(), head.target()))
    return Refusal{http::status::bad_request, "malformed HTTP request: bad request target"};
  // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host field.
  size_t hosts = 0;  // a scan of the few fields costs less than the field set's lookup
  bool host_chars = true;
  bool websocket = false;
  size_t transfer_encodings = 0;
  std::string_view first_transfer_encoding;
  for (const auto& field : head) {
    if (field.name() == http::field::upgrade)
      websocket = websocket || NamesWebSocket(field.value());
    if (field.name() == http::field::transfer_encoding && transfer_encodings++ == 0)
      first_transfer_encoding = field.value();
    if (field.name() != http::field::host) continue;
    ++hosts;
    host_chars = host_chars && HostValueChars(field.value());
  }
  // A WebSocket (vLLM's /v1/realtime) passed on as a plain request would get an answer its client
  // cannot take (found by review); other upgrades (h2c) are ignored as RFC 9110 §7.8 allows.
  if (websocket) {
    return Refusal{http::status::not_implemented,
                   "WebSocket is not supported: the gateway relays HTTP requests only (vLLM's "
                   "realtime API cannot be reached through it)"};
  }
  if (!host_chars)
    return Refusal{http::status::bad_request, "malformed HTTP request: the Host field is no host"};
  if (head.version() >= 11 && hosts != 1) {
    return Refusal{http::status::bad_request,
                   hosts == 0 ? "malformed HTTP request: no Host field"
                              : "malformed HTTP request: more than one Host field"};
  }
  // RFC 9112 §6.1: HTTP/1.0 has no Transfer-Encoding; a 1.0 recipient along the way would frame
  // the body otherwise (nginx answers 400 too).
  if (head.version() < 11 && transfer_encodings > 0) {
    return Refusal{http::status::bad_request,
                   "malformed HTTP request: Transfer-Encoding in an HTTP/1.0 request"};
  }
  if (!KnownTransferCoding(transfer_encodings, first_transfer_encoding)) {
    // Beast would take a body in another coding for none, and its bytes for the next request.
    return Refusal{http::status::not_implemented,
                   "unsupported Transfer-Encoding: only chunked is accepted"};
  }
  return std::nullopt;
}

// The request line at the start of `raw`, without its line ending; empty if it has none yet.
std::string_view RequestLine(std::string_view raw, bool* crlf) {
  const size_t end = raw.find('\n');
  if (end == std::string_view::npos) return {};
  std::string_view line = raw.substr(0, end);
  *crlf = line.ends_with('\r');
  if (*crlf) line.remove_suffix(1);
  return line;
}

// The second word of the request line at the start of `raw` (its target), if there is one; of a
// line cut at the header limit, what came of it.
std::string_view TargetInRequestLine(std::string_view raw) {
  bool crlf = false;
  std::string_view line = RequestLine(raw, &crlf);
  if (line.empty() && raw.find('\n') == std::string_view::npos) line = raw;
  const size_t first = line.find(' ');
  if (first == std::string_view::npos) return {};
  line.remove_prefix(first + 1);
  return line.substr(0, line.find(' '));
}

// Whether a request line Beast refused for its version is well formed with a version other than
// 1.0 and 1.1 (505, as HTTP/2's preface "PRI * HTTP/2.0"), rather than malformed (400: a bare LF
// line ending, a lower-case "http/1.1", …).
bool WellFormedOtherVersion(std::string_view raw) {
  bool crlf = false;
  const std::string_view line = RequestLine(raw, &crlf);
  // method SP target SP version: a space in the target (a client that did not encode it) makes
  // more parts, and a version of 1.0 or 1.1 with them is no other version.
  if (!crlf || std::count(line.begin(), line.end(), ' ') != 2) return false;
  const size_t first = line.find(' '), last = line.rfind(' ');
  if (first == 0 || last == first + 1) return false;  // no method, or no target
  const std::string_view version = line.substr(last + 1);
  return version.size() == 8 && version.starts_with("HTTP/") && std::isdigit(version[5]) &&
         version[6] == '.' && std::isdigit(version[7]) && version != "HTTP/1.0" &&
         version != "HTTP/1.1";
}

// The answer to a request that could not be read (`head`: what of its head was parsed; `raw`:
// the bytes not yet parsed).
Refusal ReadRefusal(const boost::system::error_code& ec,
                    const http::request_parser<http::string_body>::value_type& head,
                    std::string_view raw) {
  if (ec == http::error::header_limit) {
    // Beast takes the request line, then each field, as each is whole.
    if (head.target().empty())
      return {http::status::uri_too_long, "the request line is over the 64 KiB header limit"};
    return {http::status::request_header_fields_too_large,
            "the request's header is over the 64 KiB limit"};
  }
  if (ec == http::error::bad_version && WellFormedOtherVersion(raw)) {
    return {http::status::http_version_not_supported,
            "HTTP version not supported: this server speaks HTTP/1.1 (and 1.0)"};
  }
  if (ec == http::error::bad_version)
    return {http::status::bad_request, "malformed HTTP request: bad request line"};
  if (ec == http::error::buffer_overflow) {
    return {http::status::bad_request,
            fmt::format("malformed HTTP request: a chunk-size line (with its extensions) or the "
                        "trailer of the chunked body is over {} KiB",
                        kMaxPendingBodyBytes / 1024)};
  }
  return {http::status::bad_request, "malformed HTTP request: " + ec.message()};
}

// `header_done`: the request's head was read whole. A client that closes in the middle of the body
// that follows is let go (partial_message; as with a body of known length, which ends in a plain
// end of file); one whose head is cut off is told it is malformed, if it still reads.
bool QuietReadError(const boost::system::error_code& ec, bool header_done) {
  return ec == http::error::end_of_stream || (ec == http::error::partial_message && header_done) ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor;
}

// Nothing of a next request is here yet: not in `buffer`, not in the kernel, not held by TLS
// (decrypted, or a record read from the socket with the previous one and not yet decrypted).
bool NothingReceived(ClientStream& stream, const beast::flat_buffer& buffer) {
  boost::system::error_code unused;
  // (Empty lines left after a body are no request: ReadHttp drops them.)
  const std::string_view held(static_cast<const char*>(buffer.data().data()), buffer.size());
  if (held.find_first_not_of("\r\n") != std::string_view::npos) return false;
  if (stream.socket.available(unused) > 0) return false;
  if (!stream.tls) return true;
  SSL* ssl = stream.tls->native_handle();
  return SSL_has_pending(ssl) == 0 && BIO_ctrl_pending(SSL_get_rbio(ssl)) == 0;
}

// Writes a small message (a refusal, a 100 Continue) through Beast's serializer.
template <typename Message>
asio::awaitable<boost::system::error_code> WriteWhole(ClientStream& stream, Message& message) {
  boost::system::error_code ec;
  if (stream.tls) {
    std::tie(ec, std::ignore) = co_await http::async_write(*stream.tls, message, kAwaitTuple);
  } else {
    std::tie(ec, std::ignore) = co_await http::async_write(stream.socket, message, kAwaitTuple);
  }
  co_return ec;
}

// Over TLS each buffer of a sequence would be a record, and a system call, of its own: pieces
// this small go out as one.
constexpr size_t kTlsCoalesceBytes = 16 * 1024;
constexpr int64_t kLoggedTlsFailures = 10;
constexpr std::chrono::milliseconds kTlsCloseWait{200};
// The first byte a TLS client sends: a handshake record's content type.
constexpr char kTlsHandshakeRecord = 0x16;

}  // namespace

template <typename ConstBufferSequence>
bool HttpExchange::SentAtOnce(const ConstBufferSequence& buffers, size_t* sent) {
  *sent = kNotSent;
  if (stream_->tls) return false;
  boost::system::error_code ec;
  *sent = WriteNow(stream_->socket, buffers, ec);
  if (ec == asio::error::would_block) return false;
  if (ec) failed_ = true;
  return true;
}

template <typename ConstBufferSequence>
asio::awaitable<bool> HttpExchange::Write(const ConstBufferSequence& buffers, size_t sent) {
  if (sent == kNotSent && SentAtOnce(buffers, &sent)) co_return !failed_;
  const Writing writing(writes_);
  boost::system::error_code ec;
  if (stream_->tls) {
    const size_t total = asio::buffer_size(buffers);
    // (Empty buffers do not count: a piece alone in SendPending's three is written as it is.)
    const auto pieces =
        std::count_if(asio::buffer_sequence_begin(buffers), asio::buffer_sequence_end(buffers),
                      [](const auto& buffer) { return buffer.size() > 0; });
    if (total <= kTlsCoalesceBytes && pieces > 1) {
      std::string joined(total, '\0');
      asio::buffer_copy(asio::buffer(joined), buffers);
      std::tie(ec, std::ignore) =
          co_await asio::async_write(*stream_->tls, asio::buffer(joined), kAwaitTuple);
    } else {
      std::tie(ec, std::ignore) = co_await asio::async_write(*stream_->tls, buffers, kAwaitTuple);
    }
  } else {
    ec = co_await WriteRest(stream_->socket, buffers, sent);
  }
  if (ec) failed_ = true;
  co_return !ec;
}

template <typename Body>
asio::awaitable<bool> HttpExchange::WriteMessage(http::response<Body>& response, bool head_only) {
  const Writing writing(writes_);
  boost::system::error_code ec;
  http::response_serializer<Body> sr(response);
  if (stream_->tls && head_only) {
    std::tie(ec, std::ignore) = co_await http::async_write_header(*stream_->tls, sr, kAwaitTuple);
  } else if (stream_->tls) {
    std::tie(ec, std::ignore) = co_await http::async_write(*stream_->tls, sr, kAwaitTuple);
  } else if (head_only) {
    std::tie(ec, std::ignore) = co_await http::async_write_header(stream_->socket, sr, kAwaitTuple);
  } else {
    std::tie(ec, std::ignore) = co_await http::async_write(stream_->socket, sr, kAwaitTuple);
  }
  if (ec) failed_ = true;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::Respond(HttpResponse response) {
  responded_ = true;
  status_ = response.result_int();
  CloseIfDraining();
  // A handler closes with Connection: close. An HTTP/1.0 answer says nothing by default (1.0's
  // default is to close): it is kept alive when its request asked, as a relayed answer is.
  const bool handler_keeps =
      response.version() >= 11
          ? response.keep_alive()
          : !http::token_list(response[http::field::connection]).exists("close");
  keep_alive_ = keep_alive_ && handler_keeps;
  response.keep_alive(keep_alive());
  if (request_id_size_) response.set(kRequestIdField, request_id());
  if (request_id_size_ && !request_id_alias_.empty()) response.set(request_id_alias_, request_id());
  response.prepare_payload();
  const bool ok = co_await WriteMessage(response, request_.method() == http::verb::head);
  co_return ok;
}

void HttpExchange::set_request_id(std::string_view id) {
  id = id.substr(0, kMaxRequestIdLength);
  char* at = std::copy(kRequestIdField.begin(), kRequestIdField.end(), request_id_line_);
  *at++ = ':';
  *at++ = ' ';
  at = std::copy(id.begin(), id.end(), at);
  *at++ = '\r';
  *at = '\n';
  request_id_size_ = id.size();
}

asio::awaitable<bool> HttpExchange::StartStream(HttpStreamHeader header) {
  responded_ = true;
  status_ = header.result_int();
  CloseIfDraining();
  chunked_ = request_.version() >= 11;  // HTTP/1.0 knows no chunks: the stream ends the connection
  header.chunked(chunked_);
  keep_alive_ = keep_alive_ && chunked_;
  header.keep_alive(keep_alive());
  if (request_id_size_) header.set(kRequestIdField, request_id());
  if (request_id_size_ && !request_id_alias_.empty()) header.set(request_id_alias_, request_id());
  const bool ok = co_await WriteMessage(header, /*head_only=*/true);
  co_return ok;
}

namespace {

constexpr size_t kChunkSizeLine = HttpExchange::kChunkSizeLine;

// `data` as one chunk of a chunked body: its size line (written into `size_line`), the data, and
// the CRLF that ends it. (Beast's chunk_body says the same through a view of five buffers, whose
// iteration cost a relayed stream a tenth of its instructions.)
std::array<asio::const_buffer, 3> ChunkBuffers(std::string_view data,
                                               char (&size_line)[kChunkSizeLine]) {
  char* end = std::to_chars(size_line, size_line + 16, data.size(), 16).ptr;
  *end++ = '\r';
  *end++ = '\n';
  return {asio::const_buffer(size_line, static_cast<size_t>(end - size_line)),
          asio::const_buffer(data.data(), data.size()), asio::const_buffer("\r\n", 2)};
}

}  // namespace

asio::awaitable<bool> HttpExchange::SendChunk(std::string_view data) {
  if (failed_) co_return false;
  if (data.empty()) co_return true;  // an empty chunk would end the stream
  if (!chunked_) {
    const asio::const_buffer buffer(data.data(), data.size());
    const bool ok = co_await Write(buffer);
    co_return ok;
  }
  char size_line[kChunkSizeLine];
  const std::array<asio::const_buffer, 3> buffers = ChunkBuffers(data, size_line);
  const bool ok = co_await Write(buffers);
  co_return ok;
}

asio::awaitable<bool> HttpExchange::EndStream() {
  if (failed_) co_return false;
  if (!chunked_) co_return true;
  const auto last = http::make_chunk_last();
  const bool ok = co_await Write(last);
  co_return ok;
}

std::optional<bool> HttpExchange::StartBodyRawAtOnce(std::string& head,
                                                     std::optional<uint64_t> content_length,
                                                     std::string_view first_piece, bool bodiless) {
  responded_ = true;
  status_ = StatusOfHead(head);
  CloseIfDraining();
  // An HTTP/1.0 client knows no chunks: a body of unknown length ends with the connection.
  const bool until_close = !bodiless && !content_length && request_.version() < 11;
  ends_with_connection_ = until_close;
  chunked_ = !bodiless && !content_length && !until_close;
  keep_alive_ = keep_alive_ && !until_close;
  head += request_id_line();
  if (request_id_size_ && !request_id_alias_.empty())
    head.append(request_id_alias_).append(": "sv).append(request_id()).append("\r\n"sv);
  if (chunked_) {
    head += "Transfer-Encoding: chunked\r\n"sv;
  } else if (content_length && !bodiless) {
    head += "Content-Length: "sv;
    AppendNumber(&head, static_cast<int64_t>(*content_length));
    head += "\r\n"sv;
  }
  if (!keep_alive()) {
    head += "Connection: close\r\n"sv;
  } else if (request_.version() < 11) {
    head += "Connection: keep-alive\r\n"sv;  // an HTTP/1.0 connection closes unless this is said
  }
  head += "\r\n"sv;
  if (chunked_ && !first_piece.empty()) {
    AppendNumber(&head, static_cast<int64_t>(first_piece.size()), 16);
    head += "\r\n"sv;
  }
  pending_ = {asio::buffer(head), asio::buffer(first_piece.data(), first_piece.size()),
              asio::buffer(chunked_ && !first_piece.empty() ? std::string_view("\r\n")
                                                            : std::string_view())};
  if (SentAtOnce(pending_, &pending_sent_)) return !failed_;
  return std::nullopt;
}

asio::awaitable<bool> HttpExchange::SendPending() {
  const bool ok = co_await Write(pending_, pending_sent_);
  co_return ok;
}

asio::awaitable<bool> HttpExchange::StartBodyRaw(std::string& head,
                                                 std::optional<uint64_t> content_length,
                                                 std::string_view first_piece, bool bodiless) {
  if (std::optional<bool> started = StartBodyRawAtOnce(head, content_length, first_piece, bodiless))
    co_return *started;
  const bool ok = co_await SendPending();
  co_return ok;
}

std::optional<bool> HttpExchange::SendBodyAtOnce(std::string_view data) {
  if (failed_) return false;
  if (!chunked_) {
    pending_ = {asio::const_buffer(data.data(), data.size()), asio::const_buffer(),
                asio::const_buffer()};
  } else if (data.empty()) {
    return true;  // an empty chunk would end the body
  } else {
    pending_ = ChunkBuffers(data, size_line_);
  }
  if (SentAtOnce(pending_, &pending_sent_)) return !failed_;
  return std::nullopt;
}

asio::awaitable<bool> HttpExchange::SendBody(std::string_view data) {
  if (std::optional<bool> sent = SendBodyAtOnce(data)) co_return *sent;
  const bool ok = co_await SendPending();
  co_return ok;
}

asio::awaitable<bool> HttpExchange::EndBody() {
  if (std::optional<bool> ended = EndBodyAtOnce()) co_return *ended;
  const asio::const_buffer last("0\r\n\r\n", 5);
  size_t sent;
  if (SentAtOnce(last, &sent)) co_return !failed_;
  const bool ok = co_await Write(last, sent);
  co_return ok;
}

HttpServer::HttpServer(asio::any_io_executor executor, HttpHandler handler,
                       HttpServerOptions options)
    : executor_(executor),
      handler_(std::move(handler)),
      options_(std::move(options)),
      sweep_timer_(executor),
      bodies_(kMaxSpareBodies, kMaxSpareBodyBytes),
      first_request_grace_(executor),
      cut_timer_(executor) {}

uint16_t HttpServer::Listen(const std::string& address, uint16_t port) {
  const tcp::endpoint endpoint(asio::ip::make_address(address), port);
  auto acceptor = std::make_unique<tcp::acceptor>(executor_);
  acceptor->open(endpoint.protocol());
  acceptor->set_option(asio::socket_base::reuse_address(true));
  if (options_.reuse_port) {
    const int one = 1;
    ::setsockopt(acceptor->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  }
  acceptor->bind(endpoint);
  acceptor->listen(asio::socket_base::max_listen_connections);
  return StartAccepting(std::move(acceptor));
}

uint16_t HttpServer::StartAccepting(std::unique_ptr<tcp::acceptor> acceptor) {
  acceptors_.push_back(std::move(acceptor));
  tcp::acceptor& a = *acceptors_.back();
  asio::co_spawn(executor_, AcceptLoop(a), asio::detached);
  if (!sweeping_) StartSweep();
  return a.local_endpoint().port();
}

bool HttpServer::accepting() const {
  return std::any_of(acceptors_.begin(), acceptors_.end(),
                     [](const auto& a) { return a->is_open(); });
}

std::vector<int> HttpServer::listening_fds() {
  std::vector<int> fds;
  for (const auto& a : acceptors_) {
    if (a->is_open()) fds.push_back(a->native_handle());
  }
  return fds;
}

uint16_t HttpServer::Adopt(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    throw boost::system::system_error(error, boost::system::system_category(), "getsockname");
  }
  auto acceptor = std::make_unique<tcp::acceptor>(executor_);
  acceptor->assign(address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd);
  return StartAccepting(std::move(acceptor));
}

void HttpServer::StartSweep() {
  sweeping_ = true;
  asio::co_spawn(executor_, SweepLoop(), asio::detached);
}

void CheckPortFree(const std::string& address, uint16_t port) {
  if (port == 0) return;  // the kernel picks a free one
  asio::io_context io;
  tcp::acceptor probe(io);
  const tcp::endpoint endpoint(asio::ip::make_address(address), port);
  probe.open(endpoint.protocol());
  probe.set_option(asio::socket_base::reuse_address(true));  // TIME_WAIT is not "in use"
  probe.bind(endpoint);  // without SO_REUSEPORT: fails if anyone listens there
}

void HttpServer::Close() {
  asio::dispatch(executor_, [this] {
    closed_ = true;
    boost::system::error_code ec;
    for (auto& a : acceptors_) a->close(ec);
    sweep_timer_.cancel();
    first_request_grace_.cancel();
    cut_timer_.cancel();
  });
}

void HttpServer::Drain() {
  asio::dispatch(executor_, [this] {
    boost::system::error_code ec;
    TakeQueuedConnections();
    for (auto& a : acceptors_) a->close(ec);
    draining_ = true;
    closing_ = true;
    // The sweep goes on while connections are open: a client that sends half a request or reads
    // nothing is still cut off in time, not left to hold the drain until its end.
    if (open_connections_.load(std::memory_order_relaxed) == 0) sweep_timer_.cancel();
    // A kept-alive connection has had its answer and may be closed between requests (its
    // client retries); a new one is given a moment for its first request.
    CancelIdleReads(/*fresh_too=*/false);
    first_request_grace_.expires_after(kFirstRequestGrace);
    first_request_grace_.async_wait([this](const boost::system::error_code& error) {
      if (!error) CancelIdleReads(/*fresh_too=*/true);
    });
    drain_done_.store(true, std::memory_order_release);
  });
}

void HttpServer::CloseConnectionsAfterAnswers() {
  asio::dispatch(executor_, [this] { closing_ = true; });
}

void HttpServer::CutShort(std::chrono::milliseconds grace) {
  asio::dispatch(executor_, [this, grace] {
    for (Connection& c : connections_) c.cut = true;
    const auto shut = [this] {
      boost::system::error_code ec;
      for (Connection& c : connections_) c.socket->shutdown(tcp::socket::shutdown_both, ec);
    };
    if (grace.count() <= 0) return shut();
    cut_timer_.expires_after(grace);
    cut_timer_.async_wait([shut](const boost::system::error_code& error) {
      if (!error) shut();
    });
  });
}

void HttpServer::TakeQueuedConnections() {
  for (auto& a : acceptors_) {
    boost::system::error_code ec;
    a->non_blocking(true, ec);
    while (!ec && a->is_open()) {
      tcp::socket socket(executor_);
      a->accept(socket, ec);  // would_block once the queue is empty
      if (!ec) ServeAccepted(std::move(socket));
    }
  }
}

void HttpServer::ServeAccepted(tcp::socket socket) {
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  // Counted before Serve runs, so that a drain starting meanwhile waits for it.
  open_connections_.fetch_add(1, std::memory_order_relaxed);
  // A connection whose accept completed as the drain began, after the sweep ended for want of
  // connections: the sweep starts again for it.
  if (!sweeping_) StartSweep();
  asio::co_spawn(executor_, Serve(std::move(socket)), asio::detached);
}

void HttpServer::CancelIdleReads(bool fresh_too) {
  boost::system::error_code ec;
  const auto now = std::chrono::steady_clock::now();
  for (Connection& c : connections_) {
    if (c.grace_until && now < *c.grace_until) continue;  // the sweep ends its wait
    // Idle: nothing of a next request has come. Its read is cancelled rather than its socket
    // closed, so that bytes a completed read has taken from the socket are still answered.
    if (c.awaiting_header && (c.served || fresh_too) && NothingReceived(*c.stream, *c.buffer))
      c.socket->cancel(ec);
  }
}

bool HttpServer::RoomForAnother() {
  const int open = open_connections_.load(std::memory_order_relaxed);
  if (options_.max_connections == 0 ||
      open - being_shed_ < static_cast<int64_t>(options_.max_connections))
    return true;
  // Waiting for a request's head for a while: one that never sent a whole request first (half a
  // head, or none), then a kept-alive one between requests with nothing of the next come (its
  // client sends that again on a new connection). Not one whose next request has begun to come.
  const auto now = std::chrono::steady_clock::now();
  Connection* chosen = nullptr;
  for (Connection& c : connections_) {
    if (c.shed || !c.awaiting_header || !c.reading || now - c.reading_since < kShedAfter) continue;
    if (c.served && !NothingReceived(*c.stream, *c.buffer)) continue;
    if (!chosen || (chosen->served && !c.served) ||
        (chosen->served == c.served && c.reading_since < chosen->reading_since))
      chosen = &c;
  }
  // Else the one sending a body for longest, past kShedBodyAfter since its head came (not since
  // the wait for it began: a kept-alive connection may have waited long; found by review).
  Connection* slowest_body = nullptr;
  for (Connection& c : connections_) {
    if (chosen || c.shed || c.awaiting_header || !c.reading || now - c.body_since < kShedBodyAfter)
      continue;
    if (!slowest_body || c.body_since < slowest_body->body_since) slowest_body = &c;
  }
  if (!chosen) chosen = slowest_body;
  if (now - shed_warned_ >= std::chrono::minutes(1)) {
    shed_warned_ = now;
    spdlog::warn(
        "{} open connections, the most this thread keeps (max_connections): {} (more in the "
        "next minute not logged)",
        open,
        chosen ? "closing those that have waited longest for a request"
               : "new ones wait in the listen queue meanwhile");
  }
  if (!chosen) return false;
  chosen->shed = true;
  ++being_shed_;
  connections_shed_.fetch_add(1, std::memory_order_relaxed);
  boost::system::error_code ec;
  chosen->socket->close(ec);
  return true;
}

asio::awaitable<void> HttpServer::AcceptLoop(tcp::acceptor& acceptor) {
  asio::steady_timer backoff(executor_);
  bool accept_failing = false;
  while (acceptor.is_open()) {
    if (options_.max_connections > 0) {
      // Room is made only for a client that has come (found by review: made ahead, it closed a
      // connection for nobody, and the one just accepted could be the one closed).
      auto [waited] = co_await acceptor.async_wait(tcp::acceptor::wait_read, kAwaitTuple);
      if (waited == asio::error::operation_aborted) co_return;
      if (!waited && !RoomForAnother()) {  // nothing to close yet: it waits in the queue
        backoff.expires_after(std::chrono::milliseconds(100));
        co_await backoff.async_wait(kAwaitTuple);
        continue;
      }
    }
    auto [ec, socket] = co_await acceptor.async_accept(kAwaitTuple);
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      // Out of file descriptors, say: the connection stays queued, so wait rather than spin.
      if (!accept_failing) spdlog::warn("accept failed: {}; retrying every 100 ms", ec.message());
      accept_failing = true;
      backoff.expires_after(std::chrono::milliseconds(100));
      co_await backoff.async_wait(kAwaitTuple);
      continue;
    }
    if (accept_failing) spdlog::info("accepting connections again");
    accept_failing = false;
    ServeAccepted(std::move(socket));
  }
}

// One timer per server instead of one per read: a request in progress costs a clock reading.
asio::awaitable<void> HttpServer::SweepLoop() {
  struct Ended {
    bool& sweeping;
    ~Ended() { sweeping = false; }
  } ended{sweeping_};
  while (accepting() || open_connections_.load(std::memory_order_relaxed) > 0) {
    sweep_timer_.expires_after(kSweepPeriod);
    auto [ec] = co_await sweep_timer_.async_wait(kAwaitTuple);
    if (closed_) co_return;
    // Cancelled as the last connection went in a drain: whether one came in meanwhile (its accept
    // completed as the drain began) is the loop's condition's to say.
    if (ec) continue;
    const auto now = std::chrono::steady_clock::now();
    const auto deadline = now - options_.idle_timeout;
    const auto header_deadline = now - options_.header_timeout;
    for (Connection& c : connections_) {
      if (c.reading && c.reading_since < (c.awaiting_header ? header_deadline : deadline)) {
        // A body that stopped coming is answered 408, as nginx does (client_body_timeout): its
        // read is cancelled rather than its connection closed.
        if (c.awaiting_header) {
          c.socket->close(ec);
        } else {
          c.body_timed_out = true;
          c.socket->cancel(ec);
        }
      }
      if (GraceEnded(c, now)) c.socket->cancel(ec);
      CheckSendTimeout(c);
    }
    bodies_.Sweep();
  }
}

bool HttpServer::GraceEnded(Connection& c, std::chrono::steady_clock::time_point now) {
  return c.grace_until && now >= *c.grace_until && c.awaiting_header &&
         NothingReceived(*c.stream, *c.buffer);
}

void HttpServer::CheckSendTimeout(Connection& c) {
  if (!c.writes.writing || c.writes.count != c.swept_writes) {  // no write, or a new one
    c.swept_writes = c.writes.count;
    c.stalled_sweeps = 0;
    return;
  }
  if (++c.stalled_sweeps * kSweepPeriod < options_.send_timeout) return;
  boost::system::error_code ignored;
  c.socket->cancel(ignored);  // the write fails: the handler ends the request
  c.stalled_sweeps = 0;
}

bool HttpServer::BodyFromBuffer(beast::flat_buffer& buffer,
                                http::request_parser<http::string_body>& parser) {
  const auto length = parser.content_length();
  if (!length || buffer.size() < *length) return false;
  std::string body = bodies_.Take(*length);
  body.resize(*length);
  if (*length > 0) std::memcpy(body.data(), buffer.data().data(), *length);
  buffer.consume(*length);
  parser.get().body() = std::move(body);
  return true;
}

asio::awaitable<boost::system::error_code> HttpServer::ReadBody(
    ClientStream& stream, beast::flat_buffer& buffer,
    http::request_parser<http::string_body>& parser) {
  boost::system::error_code ec;
  const auto length = parser.content_length();
  if (!length) {  // chunked: Beast's parser decodes it
    auto& fields = parser.get();
    const auto header_fields = std::distance(fields.begin(), fields.end());
    if (stream.tls) {
      ec = co_await ReadHttp(*stream.tls, buffer, parser, ReadUntil::kMessage);
    } else {
      ec = co_await ReadHttp(stream.socket, buffer, parser, ReadUntil::kMessage);
    }
    // Beast adds the trailer's fields to the header's: they are not the client's request header
    // (RFC 9110 §6.5.1), and are dropped rather than passed on as such.
    auto trailer = fields.begin();
    std::advance(trailer, std::min(header_fields, std::distance(fields.begin(), fields.end())));
    while (trailer != fields.end()) trailer = fields.erase(trailer);
    co_return ec;
  }
  std::string body = bodies_.Take(*length);
  size_t filled = std::min<size_t>(*length, buffer.size());
  if (body.size() < filled) body.resize(filled);
  std::memcpy(body.data(), buffer.data().data(), filled);
  buffer.consume(filled);
  // The room is reserved for the whole body, but only written (and so given memory) as bytes
  // come: a client announcing 32 MiB and sending one byte does not cost 32 MiB. A reused string's
  // bytes are read over as they are (growing it zero-fills).
  while (filled < *length && !ec) {
    const size_t end = std::min<size_t>(*length, std::max(2 * filled, filled + kBodyReadStep));
    if (body.size() < end) body.resize(end);
    const auto rest = asio::buffer(body.data() + filled, end - filled);
    if (stream.tls) {
      std::tie(ec, std::ignore) =
          co_await asio::async_read(*stream.tls, rest, TransferAtOnce(), kAwaitTuple);
    } else {
      std::tie(ec, std::ignore) =
          co_await asio::async_read(stream.socket, rest, TransferAtOnce(), kAwaitTuple);
    }
    filled = end;
  }
  body.resize(*length);
  parser.get().body() = std::move(body);
  co_return ec;
}

asio::awaitable<void> HttpServer::Serve(tcp::socket accepted) {
  ClientStream stream(std::move(accepted));
  tcp::socket& socket = stream.socket;
  // Beast reads at most the buffer's free capacity at a time: an empty buffer means 512-byte reads.
  beast::flat_buffer buffer;
  buffer.reserve(kReadBufferBytes);
  const auto self = connections_.insert(
      connections_.end(), Connection{.socket = &socket, .stream = &stream, .buffer = &buffer});
  // However the coroutine ends, the idle sweep must not see this socket again.
  // The last one gone from a draining server ends the sweep.
  struct Forget {
    HttpServer& server;
    std::list<Connection>::iterator it;
    ~Forget() {
      if (it->shed) --server.being_shed_;
      server.connections_.erase(it);
      if (server.open_connections_.fetch_sub(1, std::memory_order_relaxed) == 1 && server.draining_)
        server.sweep_timer_.cancel();
    }
  } forget{*this, self};
  if (options_.tls && !co_await Handshake(stream, *self)) co_return;
  for (;;) {
    // Draining: a request already sent (buffered here or still in the kernel) is answered. So is
    // one sent within a moment: the answer before it went out before the drain began, promising
    // keep-alive, and its client may be sending its next request on this connection right now
    // (closed at once, that request would fail). The sweep ends the wait (GraceEnded).
    if (draining_ && self->served && !self->grace_until && NothingReceived(stream, buffer))
      self->grace_until = std::chrono::steady_clock::now() + kFirstRequestGrace;
    http::request_parser<http::string_body> parser;
    parser.body_limit(options_.body_limit);
    parser.header_limit(64 * 1024);  // so no field outgrows Beast's 64 KiB field container
    if (!self->reading) {            // (still reading after a TLS handshake: its time counts too)
      self->reading = true;
      self->reading_since = std::chrono::steady_clock::now();
    }
    self->body_timed_out = false;
    self->awaiting_header = true;
    boost::system::error_code ec;
    if (stream.tls) {
      ec = co_await ReadHttp(*stream.tls, buffer, parser, ReadUntil::kHeader, kHeaderReadSize);
    } else {  // (without ReadHttp's coroutine frame)
      HttpReadStep<true> step(buffer, parser, ReadUntil::kHeader, kHeaderReadSize);
      while (!step.Done()) {
        const auto bytes = co_await step.ReadSome(socket);
        step.Took(bytes, socket);
      }
      ec = step.result();
    }
    self->awaiting_header = false;
    self->body_since = std::chrono::steady_clock::now();
    if (!ec) {
      if (std::optional<Refusal> refusal = CheckHead(parser.get())) {
        const Refused refused{parser.get().method_string(), parser.get().target(), refusal->status,
                              refusal->message, refusal->allow};
        co_await RefuseRequest(stream, refused);
        break;
      }
    }
    if (!ec && !parser.is_done() && options_.answer_head) {
      if (std::optional<HttpResponse> answer = options_.answer_head(parser.get())) {
        self->reading = false;
        co_await AnswerHead(stream, parser.release(), std::move(*answer), *self);
        break;
      }
    }
    if (!ec && !parser.is_done()) {
      const auto& header = parser.get();
      if (header.version() >= 11 &&
          IEquals(FirstFieldValue(header, http::field::expect), "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, header.version()};
        ec = co_await WriteWhole(stream, go_on);
      }
      if (!ec && !BodyFromBuffer(buffer, parser)) ec = co_await ReadBody(stream, buffer, parser);
    }
    self->reading = false;
    const bool too_large = ec == http::error::body_limit;
    if (ec && !too_large && self->body_timed_out && parser.is_header_done()) {
      const std::string message = fmt::format(
          "the request's body did not come whole within {} s",
          std::chrono::duration_cast<std::chrono::seconds>(options_.idle_timeout).count());
      const Refused refused{parser.get().method_string(), parser.get().target(),
                            http::status::request_timeout, message};
      co_await RefuseRequest(stream, refused);
      break;
    }
    if (ec && !too_large) {
      if (!QuietReadError(ec, parser.is_header_done())) {
        const std::string_view raw(static_cast<const char*>(buffer.data().data()), buffer.size());
        const Refusal refusal = ReadRefusal(ec, parser.get(), raw);
        // A request line Beast refused still names the API whose error shape the answer takes.
        std::string_view target = parser.get().target();
        if (target.empty()) target = TargetInRequestLine(raw);
        const bool head_cut_off = ec == http::error::partial_message && !parser.is_header_done();
        const Refused refused{parser.get().method_string(),
                              target,
                              refusal.status,
                              refusal.message,
                              {},
                              head_cut_off};
        co_await RefuseRequest(stream, refused);
      } else if (options_.access_log && parser.is_header_done()) {
        LogLeftMidBody(parser.get(), self->reading_since);
      }
      break;
    }
    const bool client_keeps_alive = parser.keep_alive();
    HttpExchange exchange(&stream, parser.release(), too_large, client_keeps_alive, &closing_,
                          &self->writes, &self->cut);
    GiveRequestId(exchange);
    const auto began = std::chrono::steady_clock::now();
    // (The handler is awaited here rather than in a coroutine of its own: one frame less.)
    bool handler_failed = false;
    try {
      co_await handler_(exchange);
    } catch (const std::exception& e) {
      spdlog::error("handler failed on {}: {}", std::string(exchange.request().target()), e.what());
      handler_failed = true;
    }
    if (!exchange.responded()) co_await RespondForHandler(exchange, handler_failed);
    const bool keep_alive = !handler_failed && exchange.keep_alive();
    if (options_.access_log) LogAccess(exchange, began);
    if (self->cut) break;
    self->served = true;
    bodies_.GiveBack(std::move(exchange.mutable_request().body()));
    if (too_large) {  // answered (413) with the rest of its body unread: not reset under the client
      co_await LingeringClose(socket);
      break;
    }
    if (!keep_alive) {
      // TLS says its end too, so that a body ending with the connection is known whole.
      if (stream.tls && !exchange.broken_off()) co_await SayTlsClose(stream);
      if (!stream.tls && exchange.broken_off() && exchange.ends_with_connection()) {
        // Reset, not closed: a body that ends with the connection (an HTTP/1.0 client's) would
        // look whole after a plain close (found by review). (A length or chunks say it is not.)
        // What the kernel still holds of the body is dropped with it: the client has an error
        // either way.
        boost::system::error_code ignored;
        socket.set_option(asio::socket_base::linger(true, 0), ignored);
        socket.close(ignored);
        co_return;
      }
      break;
    }
    if (buffer.capacity() > kReadBufferBytes && buffer.size() == 0) {
      buffer.shrink_to_fit();  // a large header's room is not kept for an idle connection
      buffer.reserve(kReadBufferBytes);
    }
  }
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> HttpServer::SayTlsClose(ClientStream& stream) {
  // The client's close_notify in answer is waited for a moment at most: most clients just close.
  asio::steady_timer give_up(stream.socket.get_executor(), kTlsCloseWait);
  co_await (stream.tls->async_shutdown(kUseTuple) || give_up.async_wait(kUseTuple));
}

asio::awaitable<bool> HttpServer::Handshake(ClientStream& stream, Connection& connection) {
  connection.reading = true;
  connection.reading_since = std::chrono::steady_clock::now();
  connection.awaiting_header = true;
  // A client speaking plain HTTP here is told so in HTTP, as nginx does, rather than cut off.
  auto [ec] = co_await stream.socket.async_wait(tcp::socket::wait_read, kAwaitTuple);
  char first = 0;
  if (ec || ::recv(stream.socket.native_handle(), &first, 1, MSG_PEEK | MSG_DONTWAIT) != 1) {
    boost::system::error_code ignored;  // gone (or timed out) before its first byte: no failure
    stream.socket.close(ignored);
    co_return false;
  }
  if (first != kTlsHandshakeRecord) {
    connection.reading = connection.awaiting_header = false;
    tls_handshake_failures_.fetch_add(1, std::memory_order_relaxed);
    // The request line's target, as far as it has come, so that the answer has its API's shape.
    std::array<char, 1024> opening;
    const ssize_t n = ::recv(stream.socket.native_handle(), opening.data(), opening.size(),
                             MSG_PEEK | MSG_DONTWAIT);
    std::string_view line(opening.data(), n > 0 ? static_cast<size_t>(n) : 0);
    line = line.substr(0, line.find_first_of("\r\n"));
    const size_t start = line.find(' ');
    const std::string_view target =
        start == std::string_view::npos
            ? std::string_view()
            : line.substr(start + 1, line.find(' ', start + 1) - start - 1);
    const Refused refused{line.substr(0, start == std::string_view::npos ? 0 : start), target,
                          http::status::bad_request,
                          "this listener speaks TLS: use https:// (the request came in plain "
                          "http)"};
    co_await RefuseRequest(stream, refused);
    co_return false;
  }
  stream.tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(stream.socket, *options_.tls);
  std::tie(ec) = co_await stream.tls->async_handshake(asio::ssl::stream_base::server, kAwaitTuple);
  if (!ec) co_return true;  // still reading: the first request's head has the rest of the time
  connection.reading = false;
  connection.awaiting_header = false;
  // Cut by the header timeout or a drain, or gone: no failure of the handshake's own. The first
  // few failures are logged; the count is in the gateway's metrics.
  if (ec != asio::error::operation_aborted && ec != asio::error::eof &&
      ec != asio::error::connection_reset &&
      tls_handshake_failures_.fetch_add(1, std::memory_order_relaxed) < kLoggedTlsFailures) {
    spdlog::info(
        "a client's TLS handshake failed ({}): a client speaking http to this https "
        "listener, or one that does not trust its certificate?",
        ec.message());
  }
  boost::system::error_code ignored;
  stream.socket.close(ignored);
  co_return false;
}

asio::awaitable<void> HttpServer::AnswerHead(ClientStream& stream, HttpRequest head,
                                             HttpResponse response, Connection& connection) {
  HttpExchange exchange(&stream, std::move(head), false, false, &closing_, &connection.writes);
  GiveRequestId(exchange);
  if (options_.request_id_alias)
    exchange.AlsoSayRequestIdAs(options_.request_id_alias(exchange.request()));
  exchange.CloseAfterResponse();
  const auto began = std::chrono::steady_clock::now();
  const bool sent = co_await exchange.Respond(std::move(response));
  if (options_.access_log) LogAccess(exchange, began);
  if (sent) co_await LingeringClose(stream.socket);
}

asio::awaitable<void> HttpServer::RefuseRequest(ClientStream& stream, const Refused& refused) {
  const int status = static_cast<int>(refused.status);
  HttpRequest bad;
  auto [text, type] =
      options_.malformed_body
          ? options_.malformed_body(refused.target, status, refused.message)
          : std::pair<std::string, std::string>(refused.message + "\n", "text/plain");
  if (options_.refused && !refused.head_cut_off) options_.refused(refused.target, status);
  auto res = MakeResponse(bad, refused.status, std::move(text), type);
  res.keep_alive(false);
  if (!refused.allow.empty()) res.set(http::field::allow, refused.allow);
  RequestIdSource::Id id{};
  if (options_.request_ids) {  // (a request that cannot be read: its own id is not trusted)
    id = options_.request_ids->Next();
    res.set(kRequestIdField, std::string_view(id.data(), id.size()));
  }
  res.prepare_payload();
  if (options_.access_log) {
    std::string method, target, message;  // (escaped, where the client's bytes need it)
    spdlog::info("{} {} {} 0.0ms{}{} refused: {}{}",
                 refused.method.empty() ? "-" : LogSafe(refused.method, method),
                 refused.target.empty() ? "-" : LogSafe(refused.target, target), status,
                 options_.request_ids ? " id=" : "",
                 options_.request_ids ? std::string_view(id.data(), id.size()) : "",
                 LogSafe(refused.message, message),
                 refused.head_cut_off ? " (the client cut its head off)" : "");
  }
  const boost::system::error_code ec = co_await WriteWhole(stream, res);
  if (!ec) co_await LingeringClose(stream.socket);
}

// A connection closed with bytes still unread is reset, and a client still sending its body may
// then lose the answer it was sent: the sending side is shut, and what still comes is dropped for
// a while first.
asio::awaitable<void> HttpServer::LingeringClose(tcp::socket& socket) {
  boost::system::error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  // The timer's handler may already be queued when the reads end: it finds the socket through
  // a pointer cleared first, never the socket itself (gone by then).
  const auto target = std::make_shared<tcp::socket*>(&socket);
  const auto give_up = std::chrono::steady_clock::now() + kLingerTime;
  asio::steady_timer quiet(socket.get_executor());
  std::array<char, 16384> scratch;
  // The time is checked here too: a read that finds bytes waiting completes at once, and the
  // timer's cancel may never find one pending.
  while (!ec && !draining_ && std::chrono::steady_clock::now() < give_up) {
    quiet.expires_at(std::min(give_up, std::chrono::steady_clock::now() + kLingerQuiet));
    quiet.async_wait([target](const boost::system::error_code& e) {
      boost::system::error_code ignored;
      if (!e && *target) (*target)->cancel(ignored);
    });
    std::tie(ec, std::ignore) = co_await socket.async_read_some(asio::buffer(scratch), kAwaitTuple);
  }
  *target = nullptr;
  quiet.cancel();
}

asio::awaitable<void> HttpServer::RespondForHandler(HttpExchange& exchange, bool failed) {
  HttpResponse res = MakeResponse(exchange.request(), http::status::internal_server_error,
                                  failed ? "internal error\n" : "no response\n", "text/plain");
  co_await exchange.Respond(std::move(res));
}

void HttpServer::GiveRequestId(HttpExchange& exchange) {
  if (!options_.request_ids) return;
  for (const auto& f : exchange.request()) {
    if (f.name() == http::field::unknown && IEquals(f.name_string(), kRequestIdField) &&
        UsableRequestId(f.value())) {
      exchange.set_request_id(f.value());
      return;
    }
  }
  const RequestIdSource::Id id = options_.request_ids->Next();
  exchange.set_request_id(std::string_view(id.data(), id.size()));
}

void HttpServer::LogAccess(const HttpExchange& exchange,
                           std::chrono::steady_clock::time_point began) const {
  const std::string_view target = exchange.request().target();
  const std::string_view path = target.substr(0, target.find('?'));
  for (const std::string& unlogged : options_.unlogged_paths)
    if (path == unlogged) return;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  // 499, as nginx logs it: the client left before it had an answer; 444 (nginx's too): the
  // server closed the connection with no answer (the drain's time ran out).
  const int status = exchange.status() ? exchange.status() : exchange.cut_short() ? 444 : 499;
  std::string method, safe_target, note;  // (escaped, where the client's bytes need it)
  spdlog::info("{} {} {} {:.1f}ms{}{}{}{}{}", LogSafe(exchange.request().method_string(), method),
               LogSafe(target, safe_target), status, ms,
               exchange.request_id().empty() ? "" : " id=", exchange.request_id(),
               exchange.note().empty() ? "" : " ", LogSafe(exchange.note(), note),
               exchange.cut_short() ? " cut: drain time up" : "");
}

void HttpServer::LogLeftMidBody(const HttpRequest& head,
                                std::chrono::steady_clock::time_point began) const {
  const std::string_view target = head.target();
  const std::string_view path = target.substr(0, target.find('?'));
  for (const std::string& unlogged : options_.unlogged_paths)
    if (path == unlogged) return;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  std::string method, safe_target;
  spdlog::info("{} {} 499 {:.1f}ms left in the middle of its body",
               LogSafe(head.method_string(), method), LogSafe(target, safe_target), ms);
}

std::string_view HttpDate(std::time_t now) {
  thread_local std::time_t formatted_at = -1;
  thread_local char text[40];
  if (now != formatted_at) {
    std::tm utc;
    gmtime_r(&now, &utc);
    // IMF-fixdate (RFC 9110 §5.6.7); strftime's %a and %b are the C locale's English names.
    std::strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &utc);
    formatted_at = now;
  }
  return text;
}

HttpResponse MakeResponse(const HttpRequest& request, http::status status, std::string body,
                          std::string_view content_type) {
  HttpResponse res{status, request.version() ? request.version() : 11};
  res.set(http::field::date, HttpDate(std::time(nullptr)));
  res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  return res;
}

std::string_view OriginForm(std::string_view target) {
  if (target.starts_with('/')) return target;
  // scheme "://" authority, the scheme a letter then letters, digits, '+', '-' or '.'
  const size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos || scheme_end == 0 ||
      !std::isalpha(static_cast<unsigned char>(target[0])))
    return target;  // "*" (OPTIONS), or not a URL: left as it is
  for (char c : target.substr(0, scheme_end)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.')
      return target;
  }
  const size_t rest = target.find_first_of("/?#", scheme_end + 3);
  if (rest == std::string_view::npos || target[rest] == '#') return "/";
  return target.substr(rest);  // the path, or "?query" when there is none (the path is then "/")
}

std::string_view FirstFieldValue(const HttpRequest& request, http::field name) {
  for (const auto& field : request) {
    if (field.name() == name) return field.value();
  }
  return {};
}

bool IsJsonContentType(const HttpRequest& request) {
  std::string_view type = FirstFieldValue(request, http::field::content_type);
  type = type.substr(0, type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  return IEquals(type, "application/json");
}

std::string_view TargetPath(std::string_view target) {
  target = OriginForm(target);
  return target.substr(0, target.find('?'));
}

}  // namespace warden
