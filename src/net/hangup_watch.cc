#include "net/hangup_watch.h"

#include <poll.h>

namespace warden {
namespace asio = boost::asio;

HangupWatchArmer::HangupWatchArmer(asio::any_io_executor executor, std::chrono::microseconds delay)
    : timer_(executor), delay_(delay) {}

// Watches can outlive the armer: the frames of coroutines still suspended when the io_context
// is destroyed go after the gateway that owns the armer.
HangupWatchArmer::~HangupWatchArmer() {
  while (oldest_) {
    HangupWatch* watch = oldest_;
    Remove(watch);
    watch->pending_ = false;
  }
}

void HangupWatchArmer::Add(HangupWatch* watch) {
  watch->older_ = newest_;
  watch->newer_ = nullptr;
  (newest_ ? newest_->newer_ : oldest_) = watch;
  newest_ = watch;
  if (!waiting_) Wait();
}

void HangupWatchArmer::Remove(HangupWatch* watch) {
  (watch->older_ ? watch->older_->newer_ : oldest_) = watch->newer_;
  (watch->newer_ ? watch->newer_->older_ : newest_) = watch->older_;
  watch->older_ = watch->newer_ = nullptr;
}

void HangupWatchArmer::Wait() {
  waiting_ = true;
  timer_.expires_after(delay_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the armer is being destroyed
    waiting_ = false;
    ArmDue();
    if (oldest_) Wait();
  });
}

void HangupWatchArmer::ArmDue() {
  const auto due = std::chrono::steady_clock::now() - delay_;
  while (oldest_ && oldest_->started_at_ <= due) {
    HangupWatch* watch = oldest_;
    Remove(watch);
    watch->pending_ = false;
    watch->Arm();
  }
}

void HangupWatch::Start() {
  if (pending_ || state_) return;
  pending_ = true;
  started_at_ = std::chrono::steady_clock::now();
  armer_.Add(this);
}

void HangupWatch::Arm() {
  state_ = std::make_shared<State>(client_.get_executor());
  state_->upstream = upstream_;
  state_->client_fd = client_.native_handle();
  // A peek rather than a readiness wait: a wait re-arms epoll (epoll_ctl) every time.
  client_.async_receive(asio::buffer(&state_->peeked, 1), asio::socket_base::message_peek,
                        [state = state_](const boost::system::error_code& ec, size_t n) {
                          if (state->done || ec == asio::error::operation_aborted) return;
                          // A byte to peek: the client pipelined its next request, which stays in
                          // the socket (and readable).
                          if (!ec && n > 0) return PollForHangup(state);
                          HungUp(*state);
                        });
}

void HangupWatch::HungUp(State& state) {
  state.hung_up = true;
  if (state.upstream) {
    boost::system::error_code ignored;
    state.upstream->close(ignored);
  }
}

void HangupWatch::PollForHangup(std::shared_ptr<State> state) {
  state->poll_timer.expires_after(std::chrono::seconds(1));
  state->poll_timer.async_wait([state](const boost::system::error_code& ec) {
    if (state->done || ec) return;
    pollfd p{state->client_fd, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
      return HungUp(*state);
    PollForHangup(state);
  });
}

void HangupWatch::Stop() {
  if (pending_) {
    armer_.Remove(this);
    pending_ = false;
  }
  if (!state_ || state_->done) return;
  state_->done = true;
  boost::system::error_code ignored;
  client_.cancel(ignored);
  state_->poll_timer.cancel();
}

void HangupWatch::ClientGone() {
  gone_ = true;
  if (state_) state_->hung_up = true;
  if (upstream_) {
    boost::system::error_code ignored;
    upstream_->close(ignored);
  }
}

void HangupWatch::SetUpstream(asio::ip::tcp::socket* upstream) {
  upstream_ = upstream;
  if (upstream && gone_) {
    boost::system::error_code ignored;
    upstream->close(ignored);
  }
  if (!state_) return;
  state_->upstream = upstream;
  if (upstream && state_->hung_up) {  // the client is already gone: do not start the request
    boost::system::error_code ignored;
    upstream->close(ignored);
  }
}

}  // namespace warden
