// Handing the gateway over to a new process without a moment of downtime (SIGUSR2, like nginx's
// binary upgrade): the new gateway is started from the same command line (the binary at the same
// path, so an upgraded one) with the listening socket passed to it as socket activation passes it,
// and this one drains only once the new one says it is ready. A new gateway that cannot start
// (a config error, say) leaves this one serving.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace warden {

// The command line `warden` was started with, for its successor. Call from main.
void RememberCommandLine(int argc, char** argv);

// What became of a successor: its pid once it said it is ready, or -1 and why it is not.
struct HandOverResult {
  pid_t pid = -1;
  std::string error;
  pid_t exited = -1;  // a successor that exited, waited for but not reaped: ReapSuccessor
  // Once it is ready: the pipe (non-blocking) on which to tell it this gateway's requests in
  // flight while they drain (gateway/predecessor_load.h); closing it says none are left.
  int loads_fd = -1;
};

// Reaps the successor of a failed hand-over. Call on the thread that may signal it.
void ReapSuccessor(const HandOverResult& result);

// Starts the successor with `listening_fds` (each socket once, however many descriptors of it are
// given) as its descriptors 3, 4, ... (LISTEN_FDS, LISTEN_PID,
// and WATCHDOG_PID under a systemd watchdog) and every other descriptor but 0-2 closed, then waits
// on a thread of its own (with every signal blocked) for it to say it is ready (SaySuccessorReady)
// for up to `patience`; `done` runs on that thread. A successor that does not say so in time is
// killed. `systemd_holds_sockets`: the sockets are a socket unit's, which the successor is told
// (SocketsHeldBySystemd). Returns the successor's pid, or -1 when it could not be started (`done`
// has run then).
// `handed_state`, if not empty: a file of this gateway's conversations for the successor
// (WARDEN_HAND_OVER_STATE, HandedOverState), read in place of its state file.
pid_t StartSuccessor(const std::vector<int>& listening_fds, bool systemd_holds_sockets,
                     std::chrono::seconds patience, std::function<void(HandOverResult)> done,
                     const std::string& handed_state = {});

// How a successor that was handed over to has ended, seen without reaping it: its exit status is
// left for whoever reaps it (systemd, to which it is the main process, once this process is gone
// and it is reparented there).
struct SuccessorEnd {
  bool ended = false;
  bool failed = false;  // killed by a signal, or a status other than 0
  std::string how;      // "exited with status 1", "was killed by signal 9"
};
SuccessorEnd CheckSuccessor(pid_t pid);

// Whether the listening sockets passed to this process are held by a systemd socket unit as well
// (so that connections wait in them while no gateway accepts): passed by systemd itself, or by a
// predecessor whose sockets were.
bool SocketsHeldBySystemd();

// In a successor: tells the gateway that started it that it listens (WARDEN_READY_FD). Returns
// whether this process is such a successor.
bool SaySuccessorReady();

// Whether this process is a successor, started by a hand-over (WARDEN_READY_FD is set).
bool StartedByHandOver();

// Puts this process's pid in every log line from now on (`on`), or no more: during a hand-over two
// gateways write to the same output.
void LogWithPid(bool on = true);

// In a successor: the pipe on which the gateway that started it tells its requests in flight
// (WARDEN_PREDECESSOR_FD), or -1. Call once.
int TakePredecessorLoads();

// In a successor of a gateway too old to give it that pipe: a descriptor that becomes readable
// when the gateway that started it (its parent) ends; kPredecessorEnded when it has ended
// already; -1 in any other process, or when the kernel cannot say (no pidfd_open before Linux
// 5.3). Call as the process starts, while that gateway waits for it.
inline constexpr int kPredecessorEnded = -2;
int OpenPredecessorEnd();

// In a successor: the file of conversations the gateway that started it wrote for it
// (WARDEN_HAND_OVER_STATE), or empty. Its reader removes it, and its folder.
std::string HandedOverState();

// A new private folder (mode 0700, in $RUNTIME_DIRECTORY, else the system's temporary folder) and
// the path of a file in it, for a successor's conversations; empty if none could be made.
std::string HandOverStatePath();
// Removes such a file and its folder (a hand-over that did not happen).
void RemoveHandOverState(const std::string& path);
// Removes the folders HandOverStatePath made that are older than `age`: left by a gateway killed
// in a hand-over (kill -9 before its new gateway read them). Returns how many.
int RemoveStaleHandOverStates(std::chrono::seconds age);

}  // namespace warden
