#include "net/http_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

namespace warden {
namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kReadBufferBytes = 16 * 1024;
constexpr size_t kMaxReadBufferBytes = 1024 * 1024;

}  // namespace

asio::awaitable<bool> HttpExchange::Respond(HttpResponse response) {
  responded_ = true;
  keep_alive_ = keep_alive_ && response.keep_alive() && request_.keep_alive();
  response.keep_alive(keep_alive());
  response.prepare_payload();
  boost::system::error_code ec;
  if (request_.method() == http::verb::head) {
    http::response_serializer<http::string_body> sr(response);
    std::tie(ec, std::ignore) = co_await http::async_write_header(*stream_, sr, kUseTuple);
  } else {
    std::tie(ec, std::ignore) = co_await http::async_write(*stream_, response, kUseTuple);
  }
  if (ec) failed_ = true;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::StartStream(HttpStreamHeader header) {
  responded_ = true;
  chunked_ = true;
  header.chunked(true);
  keep_alive_ = keep_alive_ && request_.keep_alive();
  header.keep_alive(keep_alive());
  http::response_serializer<http::empty_body> sr(header);
  auto [ec, n] = co_await http::async_write_header(*stream_, sr, kUseTuple);
  if (ec) failed_ = true;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::SendChunk(std::string_view data) {
  if (failed_) co_return false;
  if (data.empty()) co_return true;  // an empty chunk would end the stream
  auto [ec, n] = co_await asio::async_write(
      *stream_, http::make_chunk(asio::const_buffer(data.data(), data.size())), kUseTuple);
  if (ec) failed_ = true;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::EndStream() {
  if (failed_) co_return false;
  auto [ec, n] = co_await asio::async_write(*stream_, http::make_chunk_last(), kUseTuple);
  if (ec) failed_ = true;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::StartBodyRaw(std::string head,
                                                 std::optional<uint64_t> content_length,
                                                 std::string_view first_piece) {
  responded_ = true;
  chunked_ = !content_length.has_value();
  keep_alive_ = keep_alive_ && request_.keep_alive();
  if (chunked_) {
    head += "Transfer-Encoding: chunked\r\n";
  } else {
    fmt::format_to(std::back_inserter(head), "Content-Length: {}\r\n", *content_length);
  }
  if (!keep_alive()) head += "Connection: close\r\n";
  head += "\r\n";
  if (chunked_ && !first_piece.empty())
    fmt::format_to(std::back_inserter(head), "{:x}\r\n", first_piece.size());
  const std::array<asio::const_buffer, 3> buffers = {
      asio::buffer(head), asio::buffer(first_piece.data(), first_piece.size()),
      asio::buffer(chunked_ && !first_piece.empty() ? std::string_view("\r\n")
                                                    : std::string_view())};
  auto [ec, n] = co_await asio::async_write(*stream_, buffers, kUseTuple);
  if (ec) failed_ = true;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::SendBody(std::string_view data) {
  if (chunked_) {
    const bool ok = co_await SendChunk(data);
    co_return ok;
  }
  if (failed_) co_return false;
  auto [ec, n] =
      co_await asio::async_write(*stream_, asio::const_buffer(data.data(), data.size()), kUseTuple);
  if (ec) failed_ = true;
  co_return !ec;
}

asio::awaitable<bool> HttpExchange::EndBody() {
  if (chunked_) {
    const bool ok = co_await EndStream();
    co_return ok;
  }
  co_return !failed_;
}

HttpServer::HttpServer(asio::any_io_executor executor, HttpHandler handler,
                       HttpServerOptions options)
    : executor_(executor),
      handler_(std::move(handler)),
      options_(std::move(options)),
      acceptor_(executor) {}

uint16_t HttpServer::Listen(const std::string& address, uint16_t port) {
  const tcp::endpoint endpoint(asio::ip::make_address(address), port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  if (options_.reuse_port) {
    const int one = 1;
    ::setsockopt(acceptor_.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  }
  acceptor_.bind(endpoint);
  acceptor_.listen(asio::socket_base::max_listen_connections);
  asio::co_spawn(executor_, AcceptLoop(), asio::detached);
  return acceptor_.local_endpoint().port();
}

void HttpServer::Close() {
  boost::system::error_code ec;
  acceptor_.close(ec);
}

asio::awaitable<void> HttpServer::AcceptLoop() {
  while (acceptor_.is_open()) {
    // With a strand per connection, its coroutines never run concurrently, whatever the number of
    // threads running the io_context.
    asio::any_io_executor strand = options_.strand_per_connection
                                       ? asio::any_io_executor(asio::make_strand(executor_))
                                       : executor_;
    auto [ec, socket] = co_await acceptor_.async_accept(strand, kUseTuple);
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      spdlog::warn("accept failed: {}", ec.message());
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(strand, Serve(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> HttpServer::Serve(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  // Beast reads at most the buffer's free capacity at a time: an empty buffer means 512-byte reads.
  beast::flat_buffer buffer;
  buffer.reserve(kReadBufferBytes);
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(options_.body_limit);
    parser.header_limit(256 * 1024);
    stream.expires_after(options_.idle_timeout);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, kUseTuple);
    if (!ec && !parser.is_done()) {
      const auto& header = parser.get();
      if (beast::iequals(header[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, header.version()};
        std::tie(ec, std::ignore) = co_await http::async_write(stream, go_on, kUseTuple);
      }
      // Room past the body for parsers that read a little beyond it (simdjson's padding), so the
      // body can be parsed where it lies.
      if (const auto length = parser.content_length(); length && *length <= options_.body_limit) {
        parser.get().body().reserve(*length + kBodyPadding);
        buffer.reserve(std::min<size_t>(*length + buffer.size(), kMaxReadBufferBytes));
      }
      if (!ec)
        std::tie(ec, std::ignore) = co_await http::async_read(stream, buffer, parser, kUseTuple);
    }
    stream.expires_never();
    const bool too_large = ec == http::error::body_limit;
    if (ec && !too_large) {
      if (ec != http::error::end_of_stream && ec != asio::error::eof &&
          ec != beast::error::timeout && ec != asio::error::connection_reset) {
        HttpRequest bad;
        auto res =
            MakeResponse(bad, http::status::bad_request,
                         fmt::format("malformed HTTP request: {}\n", ec.message()), "text/plain");
        res.keep_alive(false);
        res.prepare_payload();
        co_await http::async_write(stream, res, kUseTuple);
      }
      break;
    }
    HttpExchange exchange(&stream, parser.release(), too_large);
    bool handler_failed = false;
    try {
      co_await handler_(exchange);
    } catch (const std::exception& e) {
      spdlog::error("handler failed on {}: {}", std::string(exchange.request().target()), e.what());
      handler_failed = true;
    }
    if (handler_failed) {
      if (!exchange.responded()) {
        HttpResponse res = MakeResponse(exchange.request(), http::status::internal_server_error,
                                        "internal error\n", "text/plain");
        co_await exchange.Respond(std::move(res));
      }
      break;
    }
    if (!exchange.responded()) {
      HttpResponse res = MakeResponse(exchange.request(), http::status::internal_server_error,
                                      "no response\n", "text/plain");
      co_await exchange.Respond(std::move(res));
    }
    if (!exchange.keep_alive()) break;
    if (buffer.capacity() > kReadBufferBytes && buffer.size() == 0) {
      buffer.shrink_to_fit();  // a large body's room is not kept for an idle connection
      buffer.reserve(kReadBufferBytes);
    }
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

HttpResponse MakeResponse(const HttpRequest& request, http::status status, std::string body,
                          std::string_view content_type) {
  HttpResponse res{status, request.version() ? request.version() : 11};
  res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  return res;
}

std::string_view TargetPath(std::string_view target) {
  return target.substr(0, target.find('?'));
}

}  // namespace warden
