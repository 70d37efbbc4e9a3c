#include "cli/hand_over.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
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

// On a thread of its own: waits for the successor's ready byte (or the end of the pipe: it exited)
// for up to `patience`, then says what became of it. Signals are blocked here, so that none cuts
// a wait short; an interrupted one is waited again.
void WaitForSuccessor(pid_t pid, int read_end, int loads_fd, std::chrono::seconds patience,
                      std::function<void(HandOverResult)> done) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const auto give_up = std::chrono::steady_clock::now() + patience;
  int polled;
  do {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    pollfd p{read_end, POLLIN, 0};
    polled = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
  } while (polled < 0 && errno == EINTR);
  char byte = 0;
  const bool said_ready = polled > 0 && ::read(read_end, &byte, 1) == 1;
  ::close(read_end);
  if (said_ready) return done({pid, "", -1, loads_fd});
  ::close(loads_fd);
  if (polled <= 0) ::kill(pid, SIGKILL);  // hung in its start: nothing of it to drain
  // Waited for, not reaped: its pid stays its own until the caller reaps it (ReapSuccessor), so
  // that a signal the caller sends it meanwhile cannot reach another process.
  siginfo_t info{};
  while (::waitid(P_PID, pid, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  std::string why =
      polled <= 0 ? fmt::format("it did not say it was ready within {} s", patience.count())
      : info.si_code == CLD_EXITED ? fmt::format("it exited with status {}", info.si_status)
                                   : fmt::format("it was killed by signal {}", info.si_status);
  done({-1, "the new gateway did not start: " + why, pid});
}

}  // namespace

void ReapSuccessor(const HandOverResult& result) {
  if (result.exited > 0) ::waitpid(result.exited, nullptr, WNOHANG);
}

SuccessorEnd CheckSuccessor(pid_t pid) {
  siginfo_t info{};
  if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != pid)
    return {};
  if (info.si_code == CLD_EXITED) {
    return {true, info.si_status != 0, fmt::format("exited with status {}", info.si_status)};
  }
  return {true, true, fmt::format("was killed by signal {}", info.si_status)};
}

void RememberCommandLine(int argc, char** argv) {
  CommandLine().assign(argv, argv + argc);
}

// The names HandOverStatePath gives (a folder's prefix, the file).
constexpr std::string_view kHandOverStateFolder = "warden-hand-over-";
constexpr std::string_view kHandOverStateFile = "conversations.json";

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

bool StartedByHandOver() {
  return std::getenv("WARDEN_READY_FD") != nullptr;
}

void LogWithPid(bool on) {
  spdlog::set_pattern(on ? "[%Y-%m-%d %H:%M:%S.%e] [pid %P] [%^%l%$] %v" : "%+");
}

int TakePredecessorLoads() {
  const char* fd_text = std::getenv("WARDEN_PREDECESSOR_FD");
  if (!fd_text) return -1;
  const int fd = std::atoi(fd_text);
  if (fd < 3 || ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return -1;
  return fd;
}

int OpenPredecessorEnd() {
  if (!StartedByHandOver() || std::getenv("WARDEN_PREDECESSOR_FD")) return -1;
  // (Reparented once the parent ends: to init, or to a subreaper such as systemd's manager.)
  const pid_t parent = ::getppid();
  if (parent <= 1) return kPredecessorEnded;
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, parent, 0));
  if (fd < 0) return errno == ESRCH ? kPredecessorEnded : -1;
  // (The parent may have ended, and its pid been reused, just before the descriptor was opened.)
  if (::getppid() != parent) {
    ::close(fd);
    return kPredecessorEnded;
  }
  if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string HandedOverState() {
  const char* path = std::getenv("WARDEN_HAND_OVER_STATE");
  // Its reader removes it: only a successor's, and only a file HandOverStatePath names (never
  // whatever a stray variable in someone's environment says).
  if (!path || !StartedByHandOver()) return {};
  const std::filesystem::path file(path);
  if (file.filename() != kHandOverStateFile ||
      !file.parent_path().filename().string().starts_with(kHandOverStateFolder))
    return {};
  return path;
}

namespace {

// Where hand-over folders are made, in order of preference.
std::vector<std::filesystem::path> HandOverBases() {
  std::vector<std::filesystem::path> bases;
  // systemd's, private to the unit (the first, when RuntimeDirectory= names several)
  if (const char* runtime = std::getenv("RUNTIME_DIRECTORY"); runtime && *runtime) {
    const std::string_view first = std::string_view(runtime).substr(0, std::strcspn(runtime, ":"));
    if (!first.empty()) bases.emplace_back(first);
  }
  std::error_code ec;
  if (std::filesystem::path temp = std::filesystem::temp_directory_path(ec); !ec)
    bases.push_back(std::move(temp));
  return bases;
}

// Whether `folder` is a hand-over folder as HandOverStatePath makes them (this user's, 0700, a
// mkdtemp name, holding nothing but the conversations' file and its writer's temporary files),
// last written before `before` (Unix seconds).
bool IsHandOverFolderFrom(const std::filesystem::path& folder, time_t before) {
  const std::string name = folder.filename().string();
  if (!name.starts_with(kHandOverStateFolder) || name.size() != kHandOverStateFolder.size() + 6)
    return false;
  struct stat st {};
  if (::lstat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 07777) != 0700 || st.st_mtime >= before)
    return false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (!entry.path().filename().string().starts_with(kHandOverStateFile)) return false;
  }
  return !ec;
}

}  // namespace

int RemoveStaleHandOverStates(std::chrono::seconds age) {
  const time_t before = ::time(nullptr) - static_cast<time_t>(age.count());
  int removed = 0;
  for (const std::filesystem::path& base : HandOverBases()) {
    std::error_code ec;
    std::vector<std::filesystem::path> stale;
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      if (IsHandOverFolderFrom(entry.path(), before)) stale.push_back(entry.path());
    }
    for (const std::filesystem::path& folder : stale) {
      if (std::filesystem::remove_all(folder, ec) != static_cast<std::uintmax_t>(-1) && !ec)
        ++removed;
    }
  }
  return removed;
}

std::string HandOverStatePath() {
  for (const std::filesystem::path& base : HandOverBases()) {
    std::string folder = (base / (std::string(kHandOverStateFolder) + "XXXXXX")).string();
    if (::mkdtemp(folder.data()))  // made 0700: the keys in it are no one else's
      return (std::filesystem::path(folder) / kHandOverStateFile).string();
  }
  return {};
}

void RemoveHandOverState(const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::filesystem::remove(std::filesystem::path(path).parent_path(), ec);
}

bool SocketsHeldBySystemd() {
  return std::getenv("LISTEN_FDS") &&
         (!std::getenv("WARDEN_READY_FD") || std::getenv("WARDEN_SOCKETS_HELD"));
}

namespace {

// The environment for the successor: this one's without the variables of socket activation and
// of a hand-over, then those of its own. LISTEN_PID and WATCHDOG_PID are left with room for the
// successor's pid, written in once it is known (`pid_entries`).
std::vector<std::string> SuccessorEnvironment(size_t sockets, bool held,
                                              const std::string& handed_state,
                                              std::vector<size_t>* pid_entries) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view entry = *e;
    if (Named(entry, "LISTEN_FDS") || Named(entry, "LISTEN_PID") ||
        Named(entry, "LISTEN_FDNAMES") || Named(entry, "WATCHDOG_PID") ||
        Named(entry, "WARDEN_READY_FD") || Named(entry, "WARDEN_SOCKETS_HELD") ||
        Named(entry, "WARDEN_PREDECESSOR_FD") || Named(entry, "WARDEN_HAND_OVER_STATE")) {
      continue;
    }
    env.emplace_back(entry);
  }
  const std::string room(24, ' ');
  env.push_back(fmt::format("LISTEN_FDS={}", sockets));
  env.push_back(fmt::format("WARDEN_READY_FD={}", 3 + sockets));
  env.push_back(fmt::format("WARDEN_PREDECESSOR_FD={}", 4 + sockets));
  if (held) env.push_back("WARDEN_SOCKETS_HELD=1");
  if (!handed_state.empty()) env.push_back("WARDEN_HAND_OVER_STATE=" + handed_state);
  pid_entries->push_back(env.size());
  env.push_back("LISTEN_PID=" + room);
  if (std::getenv("WATCHDOG_USEC")) {
    pid_entries->push_back(env.size());
    env.push_back("WATCHDOG_PID=" + room);
  }
  return env;
}

// In the child, between fork and exec: `fds` to 3, 4, ..., nothing else open past them. Closing
// the rest matters: asio opens sockets without close-on-exec, and a client's or a listener's
// socket held by the successor would outlive the old gateway's close. Returns false on failure.
// Each socket once: the shards' descriptors of one socket (socket activation's, shared by every
// shard) are duplicates of one another.
std::vector<int> DistinctSockets(const std::vector<int>& fds) {
  std::vector<int> distinct;
  std::vector<std::pair<dev_t, ino_t>> seen;
  for (int fd : fds) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) continue;
    const std::pair<dev_t, ino_t> id(st.st_dev, st.st_ino);
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    distinct.push_back(fd);
  }
  return distinct;
}

// In the child, between fork and exec: every handled signal back to its default action (ignored
// ones stay ignored, as exec would leave them).
void DefaultSignalHandlers() {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction now {};
    if (sig == SIGKILL || sig == SIGSTOP || ::sigaction(sig, nullptr, &now) != 0) continue;
    if (now.sa_handler != SIG_IGN && now.sa_handler != SIG_DFL)
      ::sigaction(sig, &default_action, nullptr);
  }
}

// `moved` has room for as many as `fds` (allocated before the fork).
bool ArrangeDescriptors(const std::vector<int>& fds, std::vector<int>& moved, int max_fd) {
  const int first_free = 3 + static_cast<int>(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    moved[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, first_free);
    if (moved[i] < 0) return false;
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    if (::dup2(moved[i], 3 + static_cast<int>(i)) < 0) return false;
  }
  if (::close_range(first_free, ~0U, 0) == 0) return true;
  for (int fd = first_free; fd < max_fd; ++fd) ::close(fd);  // a kernel without close_range
  return true;
}

}  // namespace

pid_t StartSuccessor(const std::vector<int>& listening_fds, bool systemd_holds_sockets,
                     std::chrono::seconds patience, std::function<void(HandOverResult)> done,
                     const std::string& handed_state) {
  if (CommandLine().empty()) return done({-1, "the command line is not known"}), -1;
  const std::vector<int> sockets = DistinctSockets(listening_fds);
  if (sockets.empty()) return done({-1, "no listening socket"}), -1;
  // Everything the child needs is made before the fork: between fork and exec only
  // async-signal-safe calls.
  const std::string program = ProgramPath(CommandLine()[0]);
  if (::access(program.c_str(), X_OK) != 0) {  // (moved away in an upgrade, say)
    return done({-1, fmt::format("cannot run {}: {}", program, std::strerror(errno))}), -1;
  }
  std::vector<char*> argv;
  for (std::string& a : CommandLine()) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<size_t> pid_entries;
  std::vector<std::string> env =
      SuccessorEnvironment(sockets.size(), systemd_holds_sockets, handed_state, &pid_entries);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const int max_fd = static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 20));

  int ready[2], loads[2];
  if (::pipe2(ready, O_CLOEXEC) != 0)
    return done({-1, fmt::format("no pipe: {}", std::strerror(errno))}), -1;
  if (::pipe2(loads, O_CLOEXEC) != 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    return done({-1, fmt::format("no pipe: {}", std::strerror(errno))}), -1;
  }
  // (A successor that reads no more must not hold this gateway's loop up.)
  ::fcntl(loads[1], F_SETFL, ::fcntl(loads[1], F_GETFL) | O_NONBLOCK);
  std::vector<int> fds = sockets;
  fds.push_back(ready[1]);  // then WARDEN_READY_FD
  fds.push_back(loads[0]);  // and WARDEN_PREDECESSOR_FD
  std::vector<int> moved(fds.size());
  // Signals stay blocked across the fork: the child has this process's handlers (asio's, which
  // write to a pipe this process reads) until it sets them back to the default, and a SIGTERM
  // meant for the child must end it, not reach this process as a signal of its own.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = ::fork();
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    for (int fd : {ready[0], ready[1], loads[0], loads[1]}) ::close(fd);
    return done({-1, fmt::format("cannot fork: {}", std::strerror(errno))}), -1;
  }
  if (pid == 0) {
    DefaultSignalHandlers();
    // A reload or a hand-over asked for before the new program holds them (HoldStartSignals) is
    // ignored, not the end of it: a signal to the unit's every process during a hand-over killed
    // the new gateway in that moment. (Ignored, not blocked: a program that does not unblock them,
    // an older release in a rollback, would never hear them.)
    ::signal(SIGHUP, SIG_IGN);
    ::signal(SIGUSR2, SIG_IGN);
    pthread_sigmask(SIG_SETMASK, &before, nullptr);  // a pending SIGTERM ends the child here
    const long self = ::getpid();
    for (size_t entry : pid_entries) WriteNumber(envp[entry], self);
    if (!ArrangeDescriptors(fds, moved, max_fd)) _exit(126);
    ::execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  ::close(ready[1]);
  ::close(loads[0]);
  std::thread(WaitForSuccessor, pid, ready[0], loads[1], patience, std::move(done)).detach();
  return pid;
}

}  // namespace warden
