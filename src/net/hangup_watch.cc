#include "net/hangup_watch.h"

namespace warden {
namespace asio = boost::asio;

HangupWatch::HangupWatch(asio::ip::tcp::socket& client)
    : client_(client), state_(std::make_shared<State>()) {}

void HangupWatch::Start() {
  if (started_) return;
  started_ = true;
  // A peek rather than a readiness wait: Asio registers a receive without a system call when the
  // last read emptied the socket, where a wait re-arms epoll (epoll_ctl) every time.
  client_.async_receive(asio::buffer(&state_->peeked, 1), asio::socket_base::message_peek,
                        [state = state_](const boost::system::error_code& ec, size_t n) {
                          if (state->done || ec == asio::error::operation_aborted) return;
                          // A byte to peek: the client pipelined its next request, which stays in
                          // the socket.
                          if (!ec && n > 0) return;
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
