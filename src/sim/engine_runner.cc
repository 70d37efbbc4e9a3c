#include "sim/engine_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace warden {
namespace asio = boost::asio;

asio::awaitable<void> TokenStream::Wait() {
  if (!events_.empty()) co_return;
  signal_.expires_at(asio::steady_timer::time_point::max());
  co_await signal_.async_wait(asio::as_tuple(asio::use_awaitable));
}

asio::awaitable<void> TokenStream::WaitAtMost(std::chrono::steady_clock::duration most) {
  if (!events_.empty()) co_return;
  signal_.expires_after(most);
  co_await signal_.async_wait(asio::as_tuple(asio::use_awaitable));
}

void TokenStream::Push(const TokenEvent& e) {
  events_.push_back(e);
  signal_.cancel();
}

EngineRunner::EngineRunner(asio::any_io_executor executor, const EngineProfile& profile,
                           const ScaledClock* clock)
    : executor_(executor),
      clock_(clock),
      engine_(profile),
      wake_(executor),
      step_timer_(executor),
      changed_(executor),
      reset_done_(executor) {
  changed_.expires_at(asio::steady_timer::time_point::max());
  reset_done_.expires_at(asio::steady_timer::time_point::max());
}

bool EngineRunner::ResetNow(bool running_too) {
  if (engine_.num_running() > 0 && !running_too) return false;
  engine_.DiscardKvCache();
  return true;
}

asio::awaitable<bool> EngineRunner::ResetPrefixCache(bool running_too) {
  if (!engine_.step_in_progress()) co_return ResetNow(running_too);
  reset_asked_ = true;
  reset_running_too_ = reset_running_too_ || running_too;
  const uint64_t before = resets_;
  while (resets_ == before) co_await reset_done_.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return last_reset_done_;
}

void EngineRunner::Start() {
  asio::co_spawn(executor_, Loop(), asio::detached);
}

EngineRunner::Submission EngineRunner::Submit(NewRequest request) {
  const RequestId id = engine_.Add(std::move(request), clock_->Now());
  auto stream = std::make_shared<TokenStream>(executor_);
  streams_.emplace(id, stream);
  wake_.cancel();
  return {id, std::move(stream)};
}

void EngineRunner::Abort(RequestId id) {
  engine_.Abort(id);
  streams_.erase(id);
  if (streams_.empty()) changed_.cancel();
}

void EngineRunner::Pause() {
  paused_ = true;
}

void EngineRunner::Resume() {
  paused_ = false;
  wake_.cancel();
  changed_.cancel();  // a Parked() waiting is done: woken
}

void EngineRunner::AbortAll() {
  for (auto& [id, stream] : streams_) {
    engine_.Abort(id);
    stream->Push({.id = id, .token = kImEnd, .finish = FinishReason::kAborted});
  }
  streams_.clear();
  changed_.cancel();
}

asio::awaitable<void> EngineRunner::Idle() {
  while (!streams_.empty()) co_await changed_.async_wait(asio::as_tuple(asio::use_awaitable));
}

asio::awaitable<void> EngineRunner::Parked() {
  while (paused_ && !parked_) co_await changed_.async_wait(asio::as_tuple(asio::use_awaitable));
}

asio::awaitable<void> EngineRunner::Loop() {
  bool waited = true;  // for work since the last step: the time in between is not lateness
  for (;;) {
    double start = 0, duration = 0;
    if (!paused_ && engine_.has_work()) {
      // Never step in the past: if the process falls behind, simulated time stretches, and the
      // stretch (the timer's late wake, the last step's tokens handed out) is the engine's loss.
      start = std::max(last_step_end_, clock_->Now());
      if (!waited) late_s_ += start - last_step_end_;
      duration = engine_.BeginStep(start);
    }
    // Paused, or nothing schedulable: wait for a new request, an abort or the end of the pause.
    if (duration <= 0) {
      parked_ = true;
      changed_.cancel();
      wake_.expires_at(asio::steady_timer::time_point::max());
      co_await wake_.async_wait(asio::as_tuple(asio::use_awaitable));
      parked_ = false;
      waited = true;
      continue;
    }
    waited = false;
    step_timer_.expires_at(clock_->RealAt(start + duration));
    co_await step_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    last_step_end_ = start + duration;
    stepped_s_ += duration;
    WarnIfLate();
    events_.clear();
    engine_.EndStep(last_step_end_, &events_);
    for (const TokenEvent& e : events_) {
      auto it = streams_.find(e.id);
      if (it == streams_.end()) continue;
      it->second->Push(e);
      if (e.finish != FinishReason::kNone) streams_.erase(it);
    }
    if (streams_.empty()) changed_.cancel();
    if (reset_asked_) {
      last_reset_done_ = ResetNow(reset_running_too_);
      reset_asked_ = reset_running_too_ = false;
      ++resets_;
      reset_done_.cancel();
    }
  }
}

void EngineRunner::WarnIfLate() {
  // Judged over a while (a minute of simulated stepping): a one-off pause is not the trend.
  // Once per process (a server's engines fall behind together).
  static std::atomic<bool> warned{false};
  if (stepped_s_ < 60 || late_s_ < 0.1 * (stepped_s_ + late_s_) || warned.exchange(true)) return;
  spdlog::warn(
      "the simulator falls behind real time at time x{:g}: its steps ended {:.0f} % late in all "
      "(warden_sim_late_seconds_total), so it serves less than the engine model says; lower "
      "--time-scale (the machine's cores are shared with what drives it)",
      clock_->scale(), 100 * late_s_ / (stepped_s_ + late_s_));
}

}  // namespace warden
