// A small HTTP/1.1 server on Boost.Beast and Asio coroutines: keep-alive connections, a body limit,
// whole responses and chunked streams (for server-sent events), in clear or over TLS.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <ctime>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/body_storage_pool.h"
#include "net/request_id.h"

namespace warden {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;
using HttpStreamHeader = http::response<http::empty_body>;

// A client's connection: its socket, and TLS over it when the server has a certificate.
struct ClientStream {
  explicit ClientStream(tcp::socket s) : socket(std::move(s)) {}
  ClientStream(const ClientStream&) = delete;  // `tls` refers to `socket`
  ClientStream& operator=(const ClientStream&) = delete;
  tcp::socket socket;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;  // null: in clear
};

// A connection's writes as the server's sweep sees them: one pending across sweeps for longer than
// the send timeout is a client that does not read.
struct WriteWatch {
  bool writing = false;
  uint32_t count = 0;  // writes begun
};

// One request and its response on a connection. Handlers get it by reference for the duration of
// the handler coroutine. Every write returns false if the client has gone away.
class HttpExchange {
 public:
  // `server_draining`, when given, is read as the response's head is written: a server that is
  // draining by then closes the connection after this response and says so. `writes`, when given,
  // is kept up to date for the server's send timeout.
  // `cut`, when given, says whether the server closed the connection under this exchange (its
  // drain's time ran out).
  // `client_keeps_alive`: the request's parser's keep_alive(), which reads every Connection field
  // (the request's own keep_alive() reads the first only).
  HttpExchange(ClientStream* stream, HttpRequest request, bool body_too_large,
               bool client_keeps_alive, const bool* server_draining = nullptr,
               WriteWatch* writes = nullptr, const bool* cut = nullptr)
      : stream_(stream),
        request_(std::move(request)),
        body_too_large_(body_too_large),
        server_draining_(server_draining),
        writes_(writes),
        cut_(cut),
        keep_alive_(client_keeps_alive) {}
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const HttpRequest& request() const { return request_; }
  // The request, for a proxy that forwards it with its headers adjusted.
  HttpRequest& mutable_request() { return request_; }
  // The body went over the server's limit: request() holds the headers and no body, and the
  // connection closes after the response.
  bool body_too_large() const { return body_too_large_; }
  // Room for a chunk's size line: 16 hexadecimal digits and CRLF.
  static constexpr size_t kChunkSizeLine = 18;

  // Sends a whole response (headers only for HEAD requests). Sets Content-Length.
  asio::awaitable<bool> Respond(HttpResponse response);
  // Starts a chunked response; follow with SendChunk calls and one EndStream.
  asio::awaitable<bool> StartStream(HttpStreamHeader header);
  asio::awaitable<bool> SendChunk(std::string_view data);
  asio::awaitable<bool> EndStream();

  // Relays a response body as it arrives: with a known length the bytes go out as they are, else
  // chunked. Call StartBodyRaw once, SendBody for each piece, EndBody once. `head` holds the
  // status line and the header fields, each line ending in CRLF, without framing fields
  // (Content-Length, Transfer-Encoding, Connection) and without the blank line; they are appended
  // to it. The head and `first_piece` of the body go out in one write (one system call instead of
  // two for a small response).
  // `bodiless`: a response with no body and no framing fields (204, 304).
  asio::awaitable<bool> StartBodyRaw(std::string& head, std::optional<uint64_t> content_length,
                                     std::string_view first_piece, bool bodiless = false);
  // StartBodyRaw's work with no coroutine to wait on when the client's socket takes the head and
  // the first piece at once (most answers): its result then. Nothing when the rest must wait:
  // await SendPending() then, before anything else is sent. `head` and `first_piece` must live
  // until it is done.
  std::optional<bool> StartBodyRawAtOnce(std::string& head, std::optional<uint64_t> content_length,
                                         std::string_view first_piece, bool bodiless = false);
  asio::awaitable<bool> SendBody(std::string_view data);
  // SendBody's work with no coroutine to wait on when the client's socket takes the piece at once
  // (most of a stream's events): its result then. Nothing when the rest must wait: await
  // SendPending() then. `data` must live until it is done.
  std::optional<bool> SendBodyAtOnce(std::string_view data);
  // Sends what StartBodyRawAtOnce or SendBodyAtOnce left to wait for.
  asio::awaitable<bool> SendPending();
  asio::awaitable<bool> EndBody();
  // EndBody's result when it has nothing to send (a body with a length, or a failed one), with
  // no coroutine to wait on; nothing when a last chunk is to go out (await EndBody then).
  std::optional<bool> EndBodyAtOnce() const {
    if (chunked_ && !failed_) return std::nullopt;
    return !failed_;
  }

  bool responded() const { return responded_; }
  // The status of the response sent (0 if none was).
  int status() const { return status_; }
  // The request's id (net/request_id.h; at most kMaxRequestIdLength characters, cut there):
  // every response to it carries it in an x-request-id field, whatever a relayed head said there.
  // Empty: no such field is added.
  void set_request_id(std::string_view id);
  std::string_view request_id() const {
    return {request_id_line_ + kRequestIdField.size() + 2, request_id_size_};
  }
  // "x-request-id: <id>\r\n", as heads carry it (empty without an id).
  std::string_view request_id_line() const {
    return {request_id_line_, request_id_size_ ? kRequestIdField.size() + request_id_size_ + 4 : 0};
  }
  // Every response to it also carries the id in field `name` (static text): the field where the
  // clients of the request's API look for it (Anthropic's SDKs read request-id).
  void AlsoSayRequestIdAs(std::string_view name) { request_id_alias_ = name; }
  // What the handler adds to the request's access-log line (HttpServerOptions::access_log).
  std::string& note() { return note_; }
  const std::string& note() const { return note_; }
  // Closes the connection after this exchange.
  void CloseAfterResponse() { keep_alive_ = false; }
  // The response cannot be finished (a relayed body was cut short): the connection closes, and
  // over TLS without close_notify, so that a client reading to the end knows it is not whole.
  void BreakOff() {
    keep_alive_ = false;
    broken_off_ = true;
  }
  bool broken_off() const { return broken_off_; }
  // The response's body has neither a length nor chunks: its end is the connection's.
  bool ends_with_connection() const { return ends_with_connection_; }
  // The response's body goes out in chunks: its end is a last chunk, not the connection's.
  bool chunked() const { return chunked_; }
  // The client hung up (or half-closed): the connection is closed with no answer at all.
  void Abandon() {
    responded_ = true;
    keep_alive_ = false;
  }
  bool keep_alive() const { return keep_alive_ && !body_too_large_ && !failed_; }
  // The server closed the connection under this exchange: not the client's leaving.
  bool cut_short() const { return cut_ && *cut_; }
  // The connection's TCP socket (under its TLS, if it has any).
  tcp::socket& socket() { return stream_->socket; }

 private:
  // Writes `buffers` whole; false if the client has gone away. `sent`: on a plain socket, the
  // bytes SentAtOnce sent before it said the rest must wait.
  static constexpr size_t kNotSent = static_cast<size_t>(-1);
  template <typename ConstBufferSequence>
  asio::awaitable<bool> Write(const ConstBufferSequence& buffers, size_t sent = kNotSent);
  // Sends what a plain socket takes of `buffers` at once (into `sent`); true when that was all,
  // or when the write failed (failed_), false when the rest must wait for the socket (Write), or
  // over TLS (nothing sent: kNotSent).
  template <typename ConstBufferSequence>
  bool SentAtOnce(const ConstBufferSequence& buffers, size_t* sent);
  // Writes a response's head (HEAD requests) or all of it through Beast's serializer.
  template <typename Body>
  asio::awaitable<bool> WriteMessage(http::response<Body>& response, bool head_only);

  // Clears keep-alive if the server began draining.
  void CloseIfDraining() {
    if (server_draining_ && *server_draining_) keep_alive_ = false;
  }

  // Marks a write in progress for the send timeout, for the scope of one write.
  struct Writing {
    explicit Writing(WriteWatch* w) : watch(w) {
      if (watch) {
        watch->writing = true;
        ++watch->count;
      }
    }
    ~Writing() {
      if (watch) watch->writing = false;
    }
    WriteWatch* watch;
  };

  ClientStream* stream_;
  HttpRequest request_;
  bool body_too_large_;
  const bool* server_draining_;
  WriteWatch* writes_;
  const bool* cut_;
  bool responded_ = false;
  int status_ = 0;
  std::string note_;
  char request_id_line_[kRequestIdField.size() + kMaxRequestIdLength + 4];
  size_t request_id_size_ = 0;
  std::string_view request_id_alias_;  // AlsoSayRequestIdAs
  bool keep_alive_ = true;
  bool broken_off_ = false;
  bool failed_ = false;
  bool chunked_ = false;
  // What StartBodyRawAtOnce or SendBodyAtOnce began to send, and how much of it went out; the
  // size line of the chunk it is.
  std::array<asio::const_buffer, 3> pending_{};
  size_t pending_sent_ = 0;
  char size_line_[kChunkSizeLine];
  bool ends_with_connection_ = false;
};

using HttpHandler = std::function<asio::awaitable<void>(HttpExchange&)>;

struct HttpServerOptions {
  size_t body_limit = 32 * 1024 * 1024;
  // Connections that take longer to send a request (from its first byte awaited to its last byte)
  // are closed; checked about once a second.
  std::chrono::seconds idle_timeout{300};
  // The same for a request's head alone (so for an idle kept-alive connection too): slow or silent
  // clients do not hold a connection for the whole idle_timeout.
  std::chrono::seconds header_timeout{60};
  // A write to a client that stays pending this long (the client reads nothing) closes the
  // connection, which ends its request upstream (nginx's send_timeout). Checked about once a
  // second.
  std::chrono::seconds send_timeout{60};
  std::string server_name = "warden";
  // One log line (spdlog, info) per request once answered: method, target, status (499 when the
  // client left unanswered), time taken and the handler's note.
  bool access_log = false;
  // When set, every request gets an id (net/request_id.h): the client's usable X-Request-Id, else
  // one made here. Every response to it says it (x-request-id), and so does its access-log line.
  // Must outlive the server.
  RequestIdSource* request_ids = nullptr;
  // Requests to these paths (the target without its query) get no access-log line: a peer
  // gateway's sync, several a second, would bury the clients' requests.
  std::vector<std::string> unlogged_paths = {};
  // Several servers (one per thread, each on its own io_context) may listen on one port; the
  // kernel spreads connections between them.
  bool reuse_port = false;
  // The body and content type of the answer to a request that cannot be read (400, or 501 for a
  // transfer coding other than chunked), given its target (empty if the request line was not
  // read), the status and what was wrong; plain text when unset.
  std::function<std::pair<std::string, std::string>(std::string_view target, int status,
                                                    std::string_view message)>
      malformed_body = {};
  // The field (static text), besides x-request-id, in which an answer given from a request's head
  // alone (answer_head's) says its id too; empty: none. (A handler says it for the rest:
  // HttpExchange::AlsoSayRequestIdAs.)
  std::function<std::string_view(const HttpRequest& head)> request_id_alias = {};
  // Told of each request refused before it could be read (a malformed or unacceptable head or
  // body), with its target and status; not of a head its client cut off (the connection ended in
  // the middle of it: a probe, or a client gone, which the answer most likely never reaches).
  std::function<void(std::string_view target, int status)> refused = {};
  // An answer the head alone decides (a request without a valid key, say): when it gives one for
  // a request with a body, the body is not read (nor a 100 Continue sent), the answer goes out
  // and the connection closes, what the client still sends being drained for a while first.
  // Requests without a body go to the handler as usual.
  std::function<std::optional<HttpResponse>(const HttpRequest& head)> answer_head = {};
  // When set, clients speak TLS (https): the handshake is timed as the first request's head.
  std::shared_ptr<asio::ssl::context> tls = {};
  // The most connections this server keeps open (0: no limit). At it, a client that comes closes
  // the connection that has waited longest (a second at least) for a request's head: one that
  // never sent a whole request first (a client holding connections with half a head, say), then a
  // kept-alive one between requests; or waits in the kernel's queue while there is none.
  size_t max_connections = 0;
};

// Accepts connections and runs `handler` for each request. The server must outlive the executor's
// run loop. Not thread-safe: one thread runs its executor (Close excepted).
class HttpServer {
 public:
  HttpServer(asio::any_io_executor executor, HttpHandler handler, HttpServerOptions options = {});
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds address:port and starts accepting. Returns the bound port (port 0 picks a free one).
  // Throws boost::system::system_error when the address cannot be bound.
  uint16_t Listen(const std::string& address, uint16_t port);
  // Starts accepting on `fd`, a socket already listening (socket activation: systemd holds it,
  // so connections queue there while no gateway runs), beside any it accepts on already; the
  // server owns `fd` from then on. Returns its port. Throws boost::system::system_error when `fd`
  // is no TCP socket.
  uint16_t Adopt(int fd);
  // The listening sockets' descriptors (none once closed). Call on the server's thread.
  std::vector<int> listening_fds();
  // Stops accepting. Safe to call from any thread.
  void Close();
  // The TLS context for connections accepted from now on (a renewed certificate), for a server
  // that speaks TLS. Call on the server's thread.
  void SetTls(std::shared_ptr<asio::ssl::context> tls) { options_.tls = std::move(tls); }
  // The access log on or off from the next request answered (call on the server's thread).
  void SetAccessLog(bool on) { options_.access_log = on; }
  // From now on every response says Connection: close and its connection closes after it, while
  // the server still accepts (a stop's delay: clients with kept-alive connections come back
  // through the load balancer, which has taken this gateway out). Safe to call from any thread.
  void CloseConnectionsAfterAnswers();
  // Stops accepting and lets the requests on their way finish: connections with no byte of a
  // next request close now; the others close after the response to what they have sent (which
  // says so if its head goes out after the drain began; a request pipelined behind a response
  // that did not say so is answered too, as HTTP/1.1 has the client retry any after one that
  // did). Safe to call from any thread.
  void Drain();
  // Closes every open connection under the request it has on its way (a drain whose time is up):
  // their handlers see the client gone and end, and their access-log lines say "cut: drain time
  // up". The connections close after `grace`, in which a handler may still end its response in
  // its own words (a stream's error event). Safe to call from any thread.
  void CutShort(std::chrono::milliseconds grace = {});
  // Whether Drain has taken effect (it runs on the server's thread). Safe from any thread.
  bool draining() const { return drain_done_.load(std::memory_order_acquire); }
  // Connections accepted and not yet closed: once draining, those with a request on its way.
  // Safe to read from any thread.
  int open_connections() const { return open_connections_.load(std::memory_order_relaxed); }
  // Connections whose TLS handshake failed (a client speaking plain HTTP to an https listener,
  // one that does not trust the certificate, a scanner). Safe to read from any thread.
  int64_t tls_handshake_failures() const {
    return tls_handshake_failures_.load(std::memory_order_relaxed);
  }
  // Connections closed to make room at max_connections. Safe to read from any thread.
  int64_t connections_shed() const { return connections_shed_.load(std::memory_order_relaxed); }

 private:
  // A connection as the idle sweep sees it.
  struct Connection {
    tcp::socket* socket;
    ClientStream* stream;
    beast::flat_buffer* buffer;
    bool reading = false;
    std::chrono::steady_clock::time_point reading_since{};
    bool awaiting_header = false;  // reading a request's header (or waiting for one)
    // When the request's head had come, while its body is read (reading, not awaiting_header).
    std::chrono::steady_clock::time_point body_since{};
    bool served = false;  // has answered a request
    WriteWatch writes{};
    uint32_t swept_writes = 0;    // writes.count at the sweep that first saw the pending write
    int stalled_sweeps = 0;       // sweeps that saw that write still pending
    bool cut = false;             // closed under its request by CutShort
    bool shed = false;            // closed to make room (max_connections)
    bool body_timed_out = false;  // its body's read cut by idle_timeout: a 408 is its answer
    // Draining: until when it waits for a request its client may send after an answer that
    // promised keep-alive before the drain began.
    std::optional<std::chrono::steady_clock::time_point> grace_until = {};
  };

  asio::awaitable<void> AcceptLoop(tcp::acceptor& acceptor);
  // Keeps `acceptor` (listening) and accepts on it. Returns its port.
  uint16_t StartAccepting(std::unique_ptr<tcp::acceptor> acceptor);
  // Whether some acceptor is still open.
  bool accepting() const;
  // Draining: accepts the connections the kernel has queued for the listener (closing it would
  // reset them), to be served like any other.
  void TakeQueuedConnections();
  void ServeAccepted(tcp::socket socket);
  // At max_connections (those being shed not counted): closes a connection that has waited a
  // while for a request's head (HttpServerOptions::max_connections), else one still sending a
  // request's body long after its head came. Returns false when there is no room to make.
  bool RoomForAnother();
  void StartSweep();
  asio::awaitable<void> SweepLoop();
  // Whether a draining connection's wait for one more request (Connection::grace_until) is over
  // with nothing come: its read is then cancelled.
  static bool GraceEnded(Connection& c, std::chrono::steady_clock::time_point now);
  // Cancels the pending write of a client that has read nothing for the send timeout.
  void CheckSendTimeout(Connection& c);
  // Draining: cancels the reads of connections waiting for a request with no byte of it come
  // (those that have answered one; with `fresh_too`, new ones as well).
  void CancelIdleReads(bool fresh_too);
  asio::awaitable<void> Serve(tcp::socket accepted);
  // Sets up TLS over the connection; the sweep times the handshake as a request's head. False:
  // it failed, and the connection is closed.
  asio::awaitable<bool> Handshake(ClientStream& stream, Connection& connection);
  // Sends TLS's close_notify before the connection closes.
  asio::awaitable<void> SayTlsClose(ClientStream& stream);
  // The 500 for a request whose handler gave no answer (`failed`: it threw).
  asio::awaitable<void> RespondForHandler(HttpExchange& exchange, bool failed);
  // Sends `response` to a request whose body stays unread, logs it and closes the connection.
  asio::awaitable<void> AnswerHead(ClientStream& stream, HttpRequest head, HttpResponse response,
                                   Connection& connection);
  // Answers a request that cannot be read (in the handler's error shape if it has one) and logs
  // it; the connection is closed after. `method` and `target`: as far as they were read (empty if
  // not). `allow`: the Allow field of a 405. `head_cut_off`: the client ended its side in the
  // middle of the head (answered, in case it still reads, and not told to `refused`).
  struct Refused {
    std::string_view method;
    std::string_view target;
    http::status status;
    std::string message;
    std::string_view allow = {};
    bool head_cut_off = false;
  };
  // (By reference, from a named object: GCC 12 destroyed the one made in the co_await twice.)
  asio::awaitable<void> RefuseRequest(ClientStream& stream, const Refused& refused);
  asio::awaitable<void> LingeringClose(tcp::socket& socket);
  void LogAccess(const HttpExchange& exchange, std::chrono::steady_clock::time_point began) const;
  // The access log's line for a request whose client left in the middle of its body: 499, as
  // for one that left before its answer (nothing was sent anywhere).
  void LogLeftMidBody(const HttpRequest& head, std::chrono::steady_clock::time_point began) const;
  // The request's id onto the exchange (HttpServerOptions::request_ids).
  void GiveRequestId(HttpExchange& exchange);
  // Reads a request body after its header into a reused string, straight from the socket past
  // what the read buffer already holds. REQUIRES: the header is parsed and a body follows.
  asio::awaitable<boost::system::error_code> ReadBody(
      ClientStream& stream, beast::flat_buffer& buffer,
      http::request_parser<http::string_body>& parser);
  // ReadBody's work when the head gave the body's length and `buffer` holds all of it already, as
  // it mostly does: then true, with no coroutine to wait on.
  bool BodyFromBuffer(beast::flat_buffer& buffer, http::request_parser<http::string_body>& parser);

  asio::any_io_executor executor_;
  HttpHandler handler_;
  HttpServerOptions options_;
  // One from Listen, or one per Adopt: the server accepts on each.
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  asio::steady_timer sweep_timer_;
  std::list<Connection> connections_;
  BodyStoragePool bodies_;
  bool draining_ = false;  // on the executor's thread
  bool closing_ = false;   // responses say Connection: close (draining, or about to); ditto
  bool sweeping_ = false;  // SweepLoop runs (on the executor's thread)
  bool closed_ = false;    // Close was called (on the executor's thread)
  // A connection accepted just before the drain gets this long for its first request.
  asio::steady_timer first_request_grace_;
  asio::steady_timer cut_timer_;  // CutShort's grace
  std::atomic<bool> drain_done_{false};
  std::atomic<int> open_connections_{0};
  std::atomic<int64_t> tls_handshake_failures_{0};
  std::atomic<int64_t> connections_shed_{0};
  int being_shed_ = 0;  // connections closed by RoomForAnother whose coroutine has not ended
  std::chrono::steady_clock::time_point shed_warned_{};  // when shedding was last logged
};

// Throws boost::system::system_error (address in use) when a socket already listens on
// address:port. Servers that share a port (HttpServerOptions::reuse_port) call it before the first
// binds: SO_REUSEPORT would otherwise let them share it with another process as well.
void CheckPortFree(const std::string& address, uint16_t port);

// `now` as an HTTP date ("Sun, 06 Nov 1994 08:49:37 GMT"), formatted once a second per thread.
std::string_view HttpDate(std::time_t now);

// A response with a body and content type, and the Date an origin server sends (RFC 9110 §6.6.1),
// ready to Respond with.
HttpResponse MakeResponse(const HttpRequest& request, http::status status, std::string body,
                          std::string_view content_type = "application/json");

// A request target in origin form (path and query): an absolute-form target
// ("http://host/v1/messages", RFC 9112 §3.2.2, which servers must accept) loses its scheme and
// authority. One with no path ("http://host?q") gives "?q": its path is "/".
std::string_view OriginForm(std::string_view target);

// The path of a request target (origin form) without its query string.
std::string_view TargetPath(std::string_view target);

// The methods the gateway and the APIs behind it take: the Allow field of a TRACE's 405 and of
// OPTIONS *.
inline constexpr std::string_view kAllowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

// The value of the request's first field `name`; empty if it has none. A scan of the few fields a
// request has, which costs less than the field set's case-insensitive search (operator[]).
// REQUIRES: `name` is not http::field::unknown.
std::string_view FirstFieldValue(const HttpRequest& request, http::field name);

// Whether the request's body is JSON by its Content-Type (media type "application/json", any
// parameters), as vLLM's routes want it.
bool IsJsonContentType(const HttpRequest& request);

}  // namespace warden
