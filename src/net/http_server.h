// A small HTTP/1.1 server on Boost.Beast and Asio coroutines: keep-alive connections, a body limit,
// whole responses and chunked streams (for server-sent events).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace warden {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;
using HttpStreamHeader = http::response<http::empty_body>;

// One request and its response on a connection. Handlers get it by reference for the duration of
// the handler coroutine. Every write returns false if the client has gone away.
class HttpExchange {
 public:
  HttpExchange(beast::tcp_stream* stream, HttpRequest request, bool body_too_large)
      : stream_(stream), request_(std::move(request)), body_too_large_(body_too_large) {}
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const HttpRequest& request() const { return request_; }
  // The request, for a proxy that forwards it with its headers adjusted.
  HttpRequest& mutable_request() { return request_; }
  // The body went over the server's limit: request() holds the headers and no body, and the
  // connection closes after the response.
  bool body_too_large() const { return body_too_large_; }

  // Sends a whole response (headers only for HEAD requests). Sets Content-Length.
  asio::awaitable<bool> Respond(HttpResponse response);
  // Starts a chunked response; follow with SendChunk calls and one EndStream.
  asio::awaitable<bool> StartStream(HttpStreamHeader header);
  asio::awaitable<bool> SendChunk(std::string_view data);
  asio::awaitable<bool> EndStream();

  // Relays a response body as it arrives: with a known length the bytes go out as they are, else
  // chunked. Call StartBodyRaw once, SendBody for each piece, EndBody once. `head` holds the
  // status line and the header fields, each line ending in CRLF, without framing fields
  // (Content-Length, Transfer-Encoding, Connection) and without the blank line. The head and
  // `first_piece` of the body go out in one write (one system call instead of two for a small
  // response).
  asio::awaitable<bool> StartBodyRaw(std::string head, std::optional<uint64_t> content_length,
                                     std::string_view first_piece);
  asio::awaitable<bool> SendBody(std::string_view data);
  asio::awaitable<bool> EndBody();

  bool responded() const { return responded_; }
  // Closes the connection after this exchange (e.g. a relayed body was cut short).
  void CloseAfterResponse() { keep_alive_ = false; }
  bool keep_alive() const { return keep_alive_ && !body_too_large_ && !failed_; }
  beast::tcp_stream& stream() { return *stream_; }

 private:
  beast::tcp_stream* stream_;
  HttpRequest request_;
  bool body_too_large_;
  bool responded_ = false;
  bool keep_alive_ = true;
  bool failed_ = false;
  bool chunked_ = false;
};

using HttpHandler = std::function<asio::awaitable<void>(HttpExchange&)>;

// Bytes reserved past every request body: simdjson reads up to 64 bytes beyond a document.
inline constexpr size_t kBodyPadding = 64;

struct HttpServerOptions {
  size_t body_limit = 32 * 1024 * 1024;
  std::chrono::seconds idle_timeout{300};  // keep-alive connections idle longer are closed
  std::string server_name = "warden";
  // Several servers (one per thread, each on its own io_context) may listen on one port; the
  // kernel spreads connections between them.
  bool reuse_port = false;
  // Run each connection on its own strand: needed when several threads run the io_context.
  bool strand_per_connection = false;
};

// Accepts connections and runs `handler` for each request. The server must outlive the executor's
// run loop. Not thread-safe: use it from its executor's thread.
class HttpServer {
 public:
  HttpServer(asio::any_io_executor executor, HttpHandler handler, HttpServerOptions options = {});
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds address:port and starts accepting. Returns the bound port (port 0 picks a free one).
  // Throws boost::system::system_error when the address cannot be bound.
  uint16_t Listen(const std::string& address, uint16_t port);
  void Close();

 private:
  asio::awaitable<void> AcceptLoop();
  asio::awaitable<void> Serve(tcp::socket socket);

  asio::any_io_executor executor_;
  HttpHandler handler_;
  HttpServerOptions options_;
  tcp::acceptor acceptor_;
};

// A response with a body and content type, ready to Respond with.
HttpResponse MakeResponse(const HttpRequest& request, http::status status, std::string body,
                          std::string_view content_type = "application/json");

// The path of a request target without its query string.
std::string_view TargetPath(std::string_view target);

}  // namespace warden
