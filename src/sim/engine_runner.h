// Drives one simulated engine in (optionally scaled) real time on an Asio executor, and hands each
// request's generated tokens to the coroutine that serves it.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/engine/engine.h"
#include "net/scaled_clock.h"

namespace warden {

// The tokens of one request, as the engine produces them.
class TokenStream {
 public:
  explicit TokenStream(boost::asio::any_io_executor executor) : signal_(executor) {}

  // Waits until at least one event is queued (returns at once if one is).
  boost::asio::awaitable<void> Wait();
  // The same, for `most` at the longest (then there may be none).
  boost::asio::awaitable<void> WaitAtMost(std::chrono::steady_clock::duration most);
  bool has_events() const { return !events_.empty(); }
  TokenEvent Pop() {
    TokenEvent e = events_.front();
    events_.pop_front();
    return e;
  }

 private:
  friend class EngineRunner;
  void Push(const TokenEvent& e);

  std::deque<TokenEvent> events_;
  boost::asio::steady_timer signal_;
};

class EngineRunner {
 public:
  // `clock` must outlive the runner. Call Start once before submitting.
  EngineRunner(boost::asio::any_io_executor executor, const EngineProfile& profile,
               const ScaledClock* clock);
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  void Start();

  struct Submission {
    RequestId id;
    std::shared_ptr<TokenStream> stream;
  };
  Submission Submit(NewRequest request);
  // The request's client has gone: drop it from the engine.
  void Abort(RequestId id);

  // Sleep mode (vLLM's POST /sleep, /wake_up). Pause: no step begins until Resume (a step under
  // way ends first).
  void Pause();
  void Resume();
  // Ends every request the engine holds (sleep in mode abort): each stream gets a last event
  // with FinishReason::kAborted and no token.
  void AbortAll();
  // Waits until the engine holds no request (sleep in mode wait).
  boost::asio::awaitable<void> Idle();
  // Waits until, paused, no step is under way, or until resumed.
  boost::asio::awaitable<void> Parked();
  // Sleep at level 1 or 2: the KV cache is discarded (Engine::DiscardKvCache). REQUIRES: parked.
  void DiscardKvCache() { engine_.DiscardKvCache(); }
  // vLLM's reset_prefix_cache: the prefix cache emptied between two steps (at once if none is
  // under way). False, with nothing changed, while requests run, unless `running_too`: they are
  // preempted then, and computed again from their start. Resets asked during one step are done
  // together after it (running_too if any asked it).
  boost::asio::awaitable<bool> ResetPrefixCache(bool running_too);

  const Engine& engine() const { return engine_; }
  // Simulated seconds its steps ended late, in all (EngineView::late_s).
  double late_s() const { return late_s_; }

 private:
  boost::asio::awaitable<void> Loop();

  boost::asio::any_io_executor executor_;
  const ScaledClock* clock_;
  Engine engine_;
  boost::asio::steady_timer wake_;
  boost::asio::steady_timer step_timer_;
  // Cancelled whenever the engine's requests run out or the loop parks (never expires).
  boost::asio::steady_timer changed_;
  // Resets asked while a step was under way (ResetPrefixCache), done by the loop after it.
  boost::asio::steady_timer reset_done_;  // cancelled when they are done (never expires)
  bool reset_asked_ = false;
  bool reset_running_too_ = false;
  bool last_reset_done_ = false;
  uint64_t resets_ = 0;  // done by the loop so far
  bool ResetNow(bool running_too);
  bool paused_ = false;
  bool parked_ = false;  // the loop waits for work or for Resume
  std::unordered_map<RequestId, std::shared_ptr<TokenStream>> streams_;
  std::vector<TokenEvent> events_;
  double last_step_end_ = 0;
  double late_s_ = 0, stepped_s_ = 0;
  // Says once, in the log, that the process cannot keep up with its time scale.
  void WarnIfLate();
};

}  // namespace warden
