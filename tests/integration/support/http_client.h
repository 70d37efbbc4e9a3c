// A blocking HTTP/1.1 client for integration tests (Boost.Beast, one connection per call).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace warden::testing {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpResult {
  int status = 0;                              // 0 when the request failed at the transport level
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string error;  // transport error, if any

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

HttpResult HttpCall(uint16_t port, std::string_view method, std::string_view target,
                    std::string_view body = {}, const Headers& headers = {});

// HttpCall over TLS to "localhost" at 127.0.0.1:`port`, trusting the certificates in `ca_file`
// only (and checking the server's name).
HttpResult HttpsCall(uint16_t port, const std::string& ca_file, std::string_view method,
                     std::string_view target, std::string_view body = {},
                     const Headers& headers = {});
// A GET of `target` over TLS with Connection: close, then a read past the answer: what ended the
// connection ("End of file" when the server said TLS's close_notify, "stream truncated" if not).
std::string HttpsEndAfterClose(uint16_t port, const std::string& ca_file, std::string_view target);
// Sends `request` as it is over TLS and reads until the connection ends: the bytes received, and
// what ended it (as HttpsEndAfterClose).
struct ReadToEnd {
  std::string bytes;
  std::string end;
};
ReadToEnd HttpsReadToEnd(uint16_t port, const std::string& ca_file, std::string_view request);
// The same request `times` times over one kept-alive TLS connection (fewer if one fails).
std::vector<HttpResult> HttpsCalls(uint16_t port, const std::string& ca_file, int times,
                                   std::string_view method, std::string_view target,
                                   std::string_view body = {}, const Headers& headers = {});

inline HttpResult HttpGet(uint16_t port, std::string_view target) {
  return HttpCall(port, "GET", target);
}
inline HttpResult HttpPost(uint16_t port, std::string_view target, std::string_view body,
                           const Headers& headers = {}) {
  return HttpCall(port, "POST", target, body, headers);
}

// Sends a request and hands each piece of the body to `on_data` as it arrives; when on_data returns
// false the connection is closed at once (a client going away mid-stream).
HttpResult HttpStream(uint16_t port, std::string_view target, std::string_view body,
                      const Headers& headers, const std::function<bool(std::string_view)>& on_data);
// HttpStream over TLS, as HttpsCall.
HttpResult HttpsStream(uint16_t port, const std::string& ca_file, std::string_view target,
                       std::string_view body, const Headers& headers,
                       const std::function<bool(std::string_view)>& on_data);

// Server-sent events: the `event:` name (empty when absent) and the `data:` payload.
struct SseEvent {
  std::string event;
  std::string data;
};
std::vector<SseEvent> ParseSse(std::string_view body);

// Raw bytes over one connection, for what a well-behaved client never sends. Reads give up after
// a few seconds of silence.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  void Send(std::string_view bytes);
  // Reads until what was received (since the connection opened) contains `marker` `times` times,
  // or the server closes, or it falls silent. Returns everything received so far.
  std::string ReadUntil(std::string_view marker, int times = 1);
  // Reads until the server closes the connection (or falls silent).
  std::string ReadToClose() { return ReadUntil({}); }
  bool closed() const { return closed_; }
  // Whether the server has sent anything not yet read (or closed), without waiting.
  bool AnswerWaiting() const;
  // The server reset the connection rather than closing it.
  bool reset() const { return reset_; }

 private:
  int fd_ = -1;
  std::string received_;
  bool closed_ = false;
  bool reset_ = false;
};

}  // namespace warden::testing
