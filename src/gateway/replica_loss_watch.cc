#include "gateway/replica_loss_watch.h"

#include <utility>

namespace warden {

ReplicaLossWatch::Waiting::Waiting(ReplicaLossWatch& watch, void* model, int replica,
                                   boost::asio::ip::tcp::socket& socket)
    : watch_(watch), model_(model), replica_(replica), socket_(socket) {
  watch_.Add(this);
}

ReplicaLossWatch::Waiting::~Waiting() {
  watch_.Remove(this);
}

ReplicaLossWatch::ReplicaLossWatch(boost::asio::any_io_executor executor,
                                   StillHealthy still_healthy, std::chrono::milliseconds period)
    : timer_(std::move(executor)), still_healthy_(std::move(still_healthy)), period_(period) {}

// Requests can outlive the watch (coroutine frames destroyed after the gateway): let them go.
ReplicaLossWatch::~ReplicaLossWatch() {
  while (first_) Remove(first_);
}

void ReplicaLossWatch::Add(Waiting* w) {
  w->next_ = first_;
  if (first_) first_->prev_ = w;
  first_ = w;
  // The timer is left running when the list empties, so a steady trickle of requests arms it at
  // most once a period.
  if (!timer_waiting_) Wait();
}

void ReplicaLossWatch::Remove(Waiting* w) {
  if (w->prev_) {
    w->prev_->next_ = w->next_;
  } else if (first_ == w) {
    first_ = w->next_;
  } else {
    return;  // not listed (the watch went first)
  }
  if (w->next_) w->next_->prev_ = w->prev_;
  w->prev_ = w->next_ = nullptr;
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

void ReplicaLossWatch::Check() {
  for (Waiting* w = first_; w; w = w->next_) {
    if (w->given_up_ || still_healthy_(w->model_, w->replica_)) continue;
    w->given_up_ = true;
    boost::system::error_code ignored;
    w->socket_.close(ignored);
  }
}

}  // namespace warden
