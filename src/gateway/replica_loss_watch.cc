#include "gateway/replica_loss_watch.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <utility>

#include "gateway/model_state.h"
#include "net/tcp_progress.h"

namespace warden {

ReplicaLossWatch::Waiting::Waiting(ReplicaLossWatch& watch, const ModelState& model, int replica,
                                   boost::asio::ip::tcp::socket& socket,
                                   std::chrono::steady_clock::duration quiet_limit,
                                   bool give_up_when_lost)
    : watch_(watch),
      model_(model),
      replica_(replica),
      socket_(socket),
      quiet_limit_(quiet_limit),
      give_up_when_lost_(give_up_when_lost) {
  if (quiet_limit_.count() > 0) Progress();
  watch_.Add(this);
  if (watch_.ended_) {  // a request that came to its replica after EndRelays: ended at once too
    ended_by_stop_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
  }
}

ReplicaLossWatch::Waiting::~Waiting() {
  if (listed_) watch_.Remove(this);
}

ReplicaLossWatch::ReplicaLossWatch(boost::asio::any_io_executor executor,
                                   std::chrono::milliseconds period,
                                   std::chrono::steady_clock::duration lost_quiet_limit)
    : timer_(std::move(executor)), period_(period), lost_quiet_limit_(lost_quiet_limit) {}

ReplicaLossWatch::~ReplicaLossWatch() {
  while (first_) Remove(first_);
}

void ReplicaLossWatch::Add(Waiting* w) {
  w->listed_ = true;
  w->next_ = first_;
  if (first_) first_->prev_ = w;
  first_ = w;
  // The timer is left running when the list empties, so a steady trickle of requests arms it at
  // most once a period.
  if (!timer_waiting_) Wait();
}

void ReplicaLossWatch::Remove(Waiting* w) {
  (w->prev_ ? w->prev_->next_ : first_) = w->next_;
  if (w->next_) w->next_->prev_ = w->prev_;
  w->prev_ = w->next_ = nullptr;
  w->listed_ = false;
}

void ReplicaLossWatch::Wait() {
  timer_waiting_ = true;
  timer_.expires_after(period_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the watch is being destroyed
    timer_waiting_ = false;
    Check();
    if (first_) Wait();
  });
}

namespace {

// Whether the bytes waiting on `socket` begin an answer that is not an interim one ("HTTP/1.1
// 1xx"), without taking them. The start of what may yet be an interim one is not.
bool AnswerWaits(boost::asio::ip::tcp::socket& socket) {
  constexpr std::string_view kInterim = "HTTP/#.# 1";  // '#': any digit
  char start[kInterim.size()];
  const ssize_t n = ::recv(socket.native_handle(), start, sizeof start, MSG_PEEK | MSG_DONTWAIT);
  if (n <= 0) return false;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    const bool fits = kInterim[i] == '#' ? std::isdigit(static_cast<unsigned char>(start[i]))
                                         : start[i] == kInterim[i];
    if (!fits) return true;
  }
  return false;  // an interim answer, or the start of one
}

// Whether a write on `socket`, with an answer waiting, has had no byte of it taken for
// kStalledWrite (`*acked` bytes were, at `*acked_at`): the replica reads no more. (Kernels that
// do not say count as reading.)
bool StoppedReading(boost::asio::ip::tcp::socket& socket, int64_t* acked,
                    std::chrono::steady_clock::time_point* acked_at,
                    std::chrono::steady_clock::time_point now) {
  const int64_t taken = BytesAcknowledged(socket.native_handle());
  if (taken < 0) return false;
  if (taken != *acked) {
    *acked = taken;
    *acked_at = now;
    return false;
  }
  return now - *acked_at >= ReplicaLossWatch::kStalledWrite;
}

}  // namespace

void ReplicaLossWatch::EndRelays() {
  ended_ = true;
  for (Waiting* w = first_; w; w = w->next_) {
    if (w->given_up_ || w->timed_out_ || w->ended_by_stop_) continue;
    w->ended_by_stop_ = true;
    boost::system::error_code ignored;
    w->socket_.close(ignored);
  }
}

// Closing a socket only cancels the read waiting on it: its completion runs later, so no waiting
// leaves the list while it is walked.
void ReplicaLossWatch::Check() {
  const auto now = std::chrono::steady_clock::now();
  for (Waiting* w = first_; w; w = w->next_) {
    if (w->given_up_ || w->timed_out_ || w->ended_by_stop_) continue;
    if (w->writing_ && !w->answered_early_ && AnswerWaits(w->socket_)) {
      if (StoppedReading(w->socket_, &w->acked_, &w->acked_at_, now)) {
        w->answered_early_ = true;
        boost::system::error_code ignored;
        w->socket_.cancel(ignored);  // the write ends; what came is read next
      }
      continue;
    }
    if (w->give_up_when_lost_ ? w->model_.lost(w->replica_) : w->model_.stalled(w->replica_)) {
      w->given_up_ = true;
    } else if (!w->give_up_when_lost_ && lost_quiet_limit_.count() > 0 && !w->paused_ &&
               w->model_.lost(w->replica_) &&
               now - std::max(w->last_progress_, w->model_.lost_since(w->replica_)) >
                   lost_quiet_limit_) {  // (silent for the limit since it was lost)
      w->given_up_ = w->lost_and_silent_ = true;
    } else if (w->quiet_limit_.count() > 0 && !w->paused_ &&
               now - w->last_progress_ > w->quiet_limit_) {
      w->timed_out_ = true;
    } else {
      continue;
    }
    boost::system::error_code ignored;
    w->socket_.close(ignored);
  }
}

}  // namespace warden
