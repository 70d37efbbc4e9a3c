#include "net/hangup_watch.h"

#include <sys/socket.h>

#include <cerrno>

namespace warden {
namespace asio = boost::asio;

HangupWatch::HangupWatch(asio::ip::tcp::socket& client)
    : client_(client), state_(std::make_shared<State>()) {}

void HangupWatch::Start() {
  if (started_) return;
  started_ = true;
  Arm(client_, state_);
}

void HangupWatch::Arm(asio::ip::tcp::socket& client, std::shared_ptr<State> state) {
  client.async_wait(
      asio::socket_base::wait_read, [state, &client](const boost::system::error_code& ec) {
        if (state->done || ec == asio::error::operation_aborted) return;
        if (!ec) {
          // Readable: the peer closed (a peek reads 0 bytes), pipelined its next request (which
          // stays in the socket for the connection's next read), or the reactor reported a
          // readiness that an earlier read already consumed (the peek would block: watch again).
          char byte;
          const ssize_t n = ::recv(client.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n > 0) return;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            Arm(client, state);
            return;
          }
        }
        state->hung_up = true;
        if (state->upstream) {
          boost::system::error_code ignored;
          state->upstream->close(ignored);
        }
      });
}

void HangupWatch::Stop() {
  if (!started_ || state_->done) return;
  state_->done = true;
  boost::system::error_code ignored;
  client_.cancel(ignored);
}

void HangupWatch::SetUpstream(asio::ip::tcp::socket* upstream) {
  state_->upstream = upstream;
}

}  // namespace warden
