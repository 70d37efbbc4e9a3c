// Keeps a relayed event stream's client waiting in good faith while its first event is late.
//
// A proxy that holds a stream's head until the first event (so that a replica that dies first
// leaves the request free to go elsewhere) sends its client nothing while the replica queues the
// request; a client with a timeout on the response's head (Claude Code's is about 300 s) then
// gives up and sends the request again. After `first_after`, this sends the head and a keepalive
// (a ping event, or an SSE comment: what the client's API ignores), then one every `every`, until
// Stop(). Runs beside the relay on the same single-threaded executor; from the first keepalive on,
// the response has begun and the relay sends only body pieces.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "net/http_server.h"

namespace warden {

class StreamKeepalive {
 public:
  // What Stop() found.
  struct Result {
    bool head_sent = false;  // the response has begun: send body pieces only
    bool client_ok = true;   // every keepalive went out (false: the client is gone)
    int sent = 0;            // keepalives sent
  };

  // Starts the timer. `exchange` and `head` (the response's status line and fields, as
  // HttpExchange::StartBodyRawAtOnce takes them) must outlive Stop(); `keepalive` is static text.
  // `began`, if given, is called as the head goes out (before Stop() returns, if at all);
  // `client_gone`, as a write finds the client gone (so that what it waits for can be ended).
  StreamKeepalive(asio::any_io_executor executor, HttpExchange& exchange, std::string& head,
                  std::string_view keepalive, std::chrono::milliseconds first_after,
                  std::chrono::milliseconds every, std::function<void()> began = {},
                  std::function<void()> client_gone = {});
  // Stops, without waiting for a write in progress: call Stop() first wherever one may be.
  ~StreamKeepalive();
  StreamKeepalive(const StreamKeepalive&) = delete;
  StreamKeepalive& operator=(const StreamKeepalive&) = delete;

  // Sends no more; waits for a keepalive being written to go out whole.
  asio::awaitable<Result> Stop();

  // The keepalive for a stream on `path`: Anthropic's ping event on /v1/messages (as Anthropic's
  // API sends it), an SSE comment elsewhere (OpenAI's streams carry no events of their own for it).
  static std::string_view KeepaliveFor(std::string_view path);

 private:
  struct State;
  static asio::awaitable<void> Run(std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
};

}  // namespace warden
