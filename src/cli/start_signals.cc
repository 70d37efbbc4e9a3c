#include "cli/start_signals.h"

#include <signal.h>

#include <atomic>

namespace warden {
namespace {

// (Lock-free, so safe in a handler, which may run on any thread.)
std::atomic<int> hangup_held{0};
std::atomic<int> hand_over_held{0};
static_assert(std::atomic<int>::is_always_lock_free);

void NoteSignal(int signal) {
  if (signal == SIGHUP) hangup_held = 1;
  if (signal == SIGUSR2) hand_over_held = 1;
}

}  // namespace

void HoldStartSignals() {
  struct sigaction action {};
  action.sa_handler = NoteSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &action, nullptr);
  sigaction(SIGUSR2, &action, nullptr);
}

bool TakeHeldSignal(int signal) {
  std::atomic<int>& held = signal == SIGHUP ? hangup_held : hand_over_held;
  return held.exchange(0) != 0;
}

}  // namespace warden
