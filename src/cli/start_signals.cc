#include "cli/start_signals.h"

#include <signal.h>

namespace warden {
namespace {

volatile sig_atomic_t hangup_held = 0;
volatile sig_atomic_t hand_over_held = 0;

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
  volatile sig_atomic_t* held = signal == SIGHUP ? &hangup_held : &hand_over_held;
  const bool came = *held != 0;
  *held = 0;
  return came;
}

}  // namespace warden
