// A child process for integration tests: started with its stdout captured, stopped on destruction.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace warden::testing {

class ChildProcess {
 public:
  // Starts argv[0] with the arguments; stdout is captured, stderr goes to the test's stderr.
  // Returns nullptr if the program cannot be started.
  // `pass_fds` become the program's descriptors 3, 4, ... (as systemd passes sockets).
  static std::unique_ptr<ChildProcess> Start(const std::vector<std::string>& argv,
                                             const std::vector<int>& pass_fds = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads stdout until a line matches `pattern`; fills `match` from that line. False on timeout or
  // when the process closes its stdout first.
  bool WaitForLine(const std::regex& pattern, std::smatch* match,
                   std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Every stdout line read so far.
  const std::vector<std::string>& lines() const { return lines_; }

  // SIGTERM, then SIGKILL if it has not exited in 5 s. Returns the exit status (-1 if killed).
  int Stop();
  // Waits for the process to exit by itself; returns its exit status, or -1 (and kills it) when it
  // has not exited within `timeout`.
  int Wait(std::chrono::milliseconds timeout);
  void Kill();
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  bool ReadLine(std::string* line, std::chrono::steady_clock::time_point deadline);

  pid_t pid_;
  int stdout_fd_;
  std::string buffer_;
  std::vector<std::string> lines_;
  bool exited_ = false;
  int status_ = 0;
};

// Starts `warden` with the arguments and waits for every "listening http://host:port" line it
// prints (one per server); fills `ports`. Fails the current test when it does not come up.
// `file_limit`: the process may open no more files than that (soft and hard limit, so it cannot
// raise it); 0: the test's own limits.
std::unique_ptr<ChildProcess> StartWarden(const std::vector<std::string>& args,
                                          std::vector<uint16_t>* ports, int expected_listeners = 1,
                                          int file_limit = 0);
// StartWarden as systemd's socket activation starts it: `sockets` passed as descriptors 3, 4, ...
// with LISTEN_FDS and LISTEN_PID, and `env` ("NAME=value", shell-quoted as needed) set as well.
std::unique_ptr<ChildProcess> StartWardenWithSockets(const std::vector<std::string>& args,
                                                     const std::vector<int>& sockets,
                                                     const std::vector<std::string>& env,
                                                     std::vector<uint16_t>* ports);

// A loopback port nothing listens on now, for processes that must know each other's address
// before they start (peer gateways).
uint16_t FreePort();
// Whether something listens on 127.0.0.1:`port` (a connection to it is made, then closed).
bool PortListening(uint16_t port);

}  // namespace warden::testing
