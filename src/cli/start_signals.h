// SIGHUP and SIGUSR2 that come while the gateway starts. Until ServeLoop handles them, their
// default action would end the process: a config deploy's reload during a restart's start (the
// state file read, the peers' homes pulled: seconds) took the gateway down (found by review).
// From HoldStartSignals on they are noted instead, and ServeLoop acts on them once it serves.
#pragma once

namespace warden {

// Notes SIGHUP and SIGUSR2 from now on, until a handler of their own replaces this one. Call first
// thing, on the main thread.
void HoldStartSignals();

// Whether `signal` (SIGHUP or SIGUSR2) came while held; true once.
bool TakeHeldSignal(int signal);

}  // namespace warden
