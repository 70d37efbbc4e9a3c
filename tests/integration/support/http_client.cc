#include "http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <optional>
#include <stdexcept>

namespace warden::testing {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

http::request<http::string_body> MakeRequest(std::string_view method, std::string_view target,
                                             std::string_view body, const Headers& headers) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "127.0.0.1");
  bool has_type = false;
  for (const auto& [k, v] : headers) {
    req.set(k, v);
    if (beast::iequals(k, "content-type")) has_type = true;
  }
  if (!body.empty() && !has_type) req.set(http::field::content_type, "application/json");
  req.body() = std::string(body);
  if (!body.empty() || method == "POST") req.prepare_payload();
  return req;
}

void CopyHeaders(const http::fields& fields, HttpResult* r) {
  for (const auto& f : fields) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r->headers[name] = std::string(f.value());
  }
}

HttpResult Failed(std::string error) {
  HttpResult r;
  r.error = std::move(error);
  return r;
}

// A TLS connection to "localhost" at 127.0.0.1, trusting the certificates in one file only and
// checking the server's name.
struct TlsClient {
  asio::io_context io;
  asio::ssl::context context{asio::ssl::context::tls_client};
  std::optional<asio::ssl::stream<beast::tcp_stream>> stream;

  // Empty once connected; else what failed.
  std::string Connect(uint16_t port, const std::string& ca_file) {
    beast::error_code ec;
    context.set_verify_mode(asio::ssl::verify_peer);
    context.load_verify_file(ca_file, ec);
    if (ec) return "CA file: " + ec.message();
    stream.emplace(io, context);
    stream->set_verify_callback(asio::ssl::host_name_verification("localhost"));
    SSL_set_tlsext_host_name(stream->native_handle(), "localhost");
    beast::get_lowest_layer(*stream).connect(
        asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    if (!ec) stream->handshake(asio::ssl::stream_base::client, ec);
    return ec ? ec.message() : std::string();
  }
};

// One request and its whole response over a connected `stream`.
template <typename Stream>
HttpResult Exchange(Stream& stream, std::string_view method, std::string_view target,
                    std::string_view body, const Headers& headers) {
  HttpResult r;
  beast::error_code ec;
  auto req = MakeRequest(method, target, body, headers);
  http::write(stream, req, ec);
  if (ec) {
    r.error = ec.message();
    return r;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ULL << 30);
  parser.header_limit(64 * 1024);  // as the gateway's
  parser.skip(method == "HEAD");
  http::read(stream, buffer, parser, ec);
  if (ec) {
    r.error = ec.message();
    return r;
  }
  const auto& res = parser.get();
  r.status = res.result_int();
  CopyHeaders(res.base(), &r);
  r.body = res.body();
  return r;
}

}  // namespace

HttpResult HttpCall(uint16_t port, std::string_view method, std::string_view target,
                    std::string_view body, const Headers& headers) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  if (ec) return Failed(ec.message());
  return Exchange(stream, method, target, body, headers);
}

std::vector<HttpResult> HttpsCalls(uint16_t port, const std::string& ca_file, int times,
                                   std::string_view method, std::string_view target,
                                   std::string_view body, const Headers& headers) {
  TlsClient client;
  if (std::string error = client.Connect(port, ca_file); !error.empty()) return {Failed(error)};
  std::vector<HttpResult> results;
  for (int i = 0; i < times; ++i) {
    results.push_back(Exchange(*client.stream, method, target, body, headers));
    if (results.back().status == 0) break;
  }
  return results;
}

std::string HttpsEndAfterClose(uint16_t port, const std::string& ca_file, std::string_view target) {
  TlsClient client;
  if (std::string error = client.Connect(port, ca_file); !error.empty())
    return "no connection: " + error;
  const HttpResult r = Exchange(*client.stream, "GET", target, {}, {{"Connection", "close"}});
  if (r.status == 0) return "no answer: " + r.error;
  char byte;
  beast::error_code ec;
  client.stream->read_some(asio::buffer(&byte, 1), ec);
  return ec.message();
}

ReadToEnd HttpsReadToEnd(uint16_t port, const std::string& ca_file, std::string_view request) {
  ReadToEnd result;
  TlsClient client;
  if (std::string error = client.Connect(port, ca_file); !error.empty()) {
    result.end = "no connection: " + error;
    return result;
  }
  beast::error_code ec;
  asio::write(*client.stream, asio::buffer(request.data(), request.size()), ec);
  char piece[4096];
  while (!ec) {
    const size_t n = client.stream->read_some(asio::buffer(piece), ec);
    result.bytes.append(piece, n);
  }
  result.end = ec.message();
  return result;
}

HttpResult HttpsCall(uint16_t port, const std::string& ca_file, std::string_view method,
                     std::string_view target, std::string_view body, const Headers& headers) {
  return HttpsCalls(port, ca_file, 1, method, target, body, headers).front();
}

namespace {

// HttpStream's request and streamed response over a connected `stream`; `close` ends the
// connection at once.
template <typename Stream>
HttpResult StreamOver(Stream& stream, const std::function<void()>& close, std::string_view target,
                      std::string_view body, const Headers& headers,
                      const std::function<bool(std::string_view)>& on_data) {
  HttpResult r;
  beast::error_code ec;
  auto req = MakeRequest("POST", target, body, headers);
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(1ULL << 30);
  http::read_header(stream, buffer, parser, ec);
  if (ec) {
    r.error = ec.message();
    return r;
  }
  r.status = parser.get().result_int();
  CopyHeaders(parser.get().base(), &r);
  char chunk[8192];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    http::read_some(stream, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      r.error = ec.message();
      break;
    }
    const size_t n = sizeof(chunk) - parser.get().body().size;
    if (n == 0) continue;
    r.body.append(chunk, n);
    if (!on_data(std::string_view(chunk, n))) {
      close();
      break;
    }
  }
  return r;
}

}  // namespace

HttpResult HttpStream(uint16_t port, std::string_view target, std::string_view body,
                      const Headers& headers,
                      const std::function<bool(std::string_view)>& on_data) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  if (ec) return Failed(ec.message());
  return StreamOver(
      stream, [&] { stream.socket().close(ec); }, target, body, headers, on_data);
}

HttpResult HttpsStream(uint16_t port, const std::string& ca_file, std::string_view target,
                       std::string_view body, const Headers& headers,
                       const std::function<bool(std::string_view)>& on_data) {
  TlsClient client;
  if (std::string error = client.Connect(port, ca_file); !error.empty()) return Failed(error);
  beast::error_code ec;
  return StreamOver(
      *client.stream, [&] { beast::get_lowest_layer(*client.stream).socket().close(ec); }, target,
      body, headers, on_data);
}

std::vector<SseEvent> ParseSse(std::string_view body) {
  std::vector<SseEvent> events;
  SseEvent current;
  bool has_data = false;
  while (!body.empty()) {
    const size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (has_data || !current.event.empty()) events.push_back(std::move(current));
      current = {};
      has_data = false;
    } else if (line.starts_with("event:")) {
      current.event = std::string(line.substr(line.find_first_not_of(' ', 6)));
    } else if (line.starts_with("data:")) {
      const size_t start = line.size() > 5 && line[5] == ' ' ? 6 : 5;
      if (has_data) current.data += '\n';
      current.data += line.substr(start);
      has_data = true;
    }
  }
  if (has_data) events.push_back(std::move(current));
  return events;
}

RawConnection::RawConnection(uint16_t port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error("RawConnection: cannot connect");
  timeval timeout{5, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawConnection::AnswerWaiting() const {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void RawConnection::Send(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed: what it answered is still readable
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

std::string RawConnection::ReadUntil(std::string_view marker, int times) {
  const auto found = [&] {
    int count = 0;
    for (size_t at = received_.find(marker); at != std::string::npos && count < times;
         at = received_.find(marker, at + marker.size()))
      ++count;
    return count >= times;
  };
  char chunk[16384];
  while (!closed_ && (marker.empty() || !found())) {
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == ECONNRESET) {
      closed_ = reset_ = true;
      break;
    }
    if (n < 0) break;  // silent for the timeout
    if (n == 0) closed_ = true;
    received_.append(chunk, static_cast<size_t>(n));
  }
  return received_;
}

}  // namespace warden::testing
