#include "cli/hand_over.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace warden {
namespace {

std::vector<std::string>& CommandLine() {
  static std::vector<std::string> argv;
  return argv;
}

// The program to run: argv[0] when it names a path, else found on PATH, as the shell found it.
std::string ProgramPath(const std::string& argv0) {
  if (argv0.find('/') != std::string::npos) return argv0;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string candidate = fmt::format("{}/{}", dirs.substr(0, colon), argv0);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return argv0;
}

bool Named(std::string_view entry, std::string_view name) {
  return entry.size() > name.size() && entry.substr(0, name.size()) == name &&
         entry[name.size()] == '=';
}

// Writes `value` in decimal over the spaces at the end of `entry` ("NAME=" and room). Only
// async-signal-safe work: it runs between fork and exec.
void WriteNumber(char* entry, long value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  char* at = std::strchr(entry, '=') + 1;
  while (n > 0) *at++ = digits[--n];
  *at = '\0';
}

constexpr int kReadyFd = 4;

}  // namespace

void RememberCommandLine(int argc, char** argv) {
  CommandLine().assign(argv, argv + argc);
}

bool SaySuccessorReady() {
  const char* fd_text = std::getenv("WARDEN_READY_FD");
  if (!fd_text) return false;
  // Left in the environment (other threads may be reading it); a hand-over from this gateway
  // gives its own successor a fresh one.
  const int fd = std::atoi(fd_text);
  const char ready = '1';
  const bool said = ::write(fd, &ready, 1) == 1;
  ::close(fd);
  return said;
}

void StartSuccessor(int listening_fd, std::chrono::seconds patience,
                    std::function<void(HandOverResult)> done) {
  if (CommandLine().empty()) return done({-1, "the command line is not known"});
  // Everything the child needs is made before the fork: between fork and exec only
  // async-signal-safe calls.
  const std::string program = ProgramPath(CommandLine()[0]);
  std::vector<char*> argv;
  for (std::string& a : CommandLine()) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view entry = *e;
    if (Named(entry, "LISTEN_FDS") || Named(entry, "LISTEN_PID") ||
        Named(entry, "LISTEN_FDNAMES") || Named(entry, "WATCHDOG_PID") ||
        Named(entry, "WARDEN_READY_FD")) {
      continue;
    }
    env.emplace_back(entry);
  }
  const bool watchdog = std::getenv("WATCHDOG_USEC") != nullptr;
  const std::string room(24, ' ');
  env.push_back("LISTEN_FDS=1");
  env.push_back(fmt::format("WARDEN_READY_FD={}", kReadyFd));
  const size_t listen_pid = env.size();
  env.push_back("LISTEN_PID=" + room);
  const size_t watchdog_pid = env.size();
  if (watchdog) env.push_back("WATCHDOG_PID=" + room);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0)
    return done({-1, fmt::format("no pipe: {}", std::strerror(errno))});
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    return done({-1, fmt::format("cannot fork: {}", std::strerror(errno))});
  }
  if (pid == 0) {
    const long self = ::getpid();
    WriteNumber(envp[listen_pid], self);
    if (watchdog) WriteNumber(envp[watchdog_pid], self);
    // Out of the way first, then into place: 3 the listener, 4 the ready pipe, nothing else open.
    const int listener = ::fcntl(listening_fd, F_DUPFD_CLOEXEC, kReadyFd + 1);
    const int ready_write = ::fcntl(ready[1], F_DUPFD_CLOEXEC, kReadyFd + 1);
    if (listener < 0 || ready_write < 0 || ::dup2(listener, 3) < 0 ||
        ::dup2(ready_write, kReadyFd) < 0) {
      _exit(126);
    }
    ::close_range(kReadyFd + 1, ~0U, 0);
    ::execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  ::close(ready[1]);
  std::thread([pid, read_end = ready[0], patience, done = std::move(done)] {
    pollfd p{read_end, POLLIN, 0};
    const int polled = ::poll(&p, 1, static_cast<int>(patience.count() * 1000));
    char byte = 0;
    const bool said_ready = polled > 0 && ::read(read_end, &byte, 1) == 1;
    ::close(read_end);
    if (said_ready) return done({pid, ""});
    if (polled == 0) ::kill(pid, SIGKILL);  // hung in its start: nothing of it to drain
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::string why =
        polled == 0 ? fmt::format("it did not say it was ready within {} s", patience.count())
        : WIFEXITED(status) ? fmt::format("it exited with status {}", WEXITSTATUS(status))
                            : fmt::format("it was killed by signal {}", WTERMSIG(status));
    done({-1, "the new gateway did not start: " + why});
  }).detach();
}

}  // namespace warden
