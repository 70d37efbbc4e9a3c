#include "child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace warden::testing {

std::unique_ptr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& argv,
                                                  const std::vector<int>& pass_fds) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  const pid_t pid = fork();
  if (pid < 0) return nullptr;
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    // Out of the way first, so that no descriptor to pass is written over before it is moved.
    std::vector<int> moved;
    for (int fd : pass_fds) moved.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 100));
    for (size_t i = 0; i < moved.size(); ++i) dup2(moved[i], 3 + static_cast<int>(i));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, fds[0]));
}

ChildProcess::~ChildProcess() {
  Stop();
  close(stdout_fd_);
}

bool ChildProcess::ReadLine(std::string* line, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      *line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      lines_.push_back(*line);
      return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char chunk[4096];
    const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

bool ChildProcess::WaitForLine(const std::regex& pattern, std::smatch* match,
                               std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  static thread_local std::string line;  // match refers into it
  while (ReadLine(&line, deadline)) {
    if (std::regex_search(line, *match, pattern)) return true;
  }
  return false;
}

int ChildProcess::Stop() {
  if (exited_) return status_;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 500; ++i) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return status_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  return -1;
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!exited_ && std::chrono::steady_clock::now() < deadline) {
    // Keep draining stdout so the child never blocks on a full pipe.
    std::string line;
    ReadLine(&line, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
  }
  if (!exited_) Kill();
  return status_;
}

void ChildProcess::Kill() {
  if (exited_) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  exited_ = true;
  status_ = -1;
}

std::unique_ptr<ChildProcess> StartWarden(const std::vector<std::string>& args,
                                          std::vector<uint16_t>* ports, int expected_listeners,
                                          int file_limit) {
  std::vector<std::string> argv = {WARDEN_BIN};
  if (file_limit > 0) {  // the shell sets the limit, then becomes warden (same process)
    argv = {"/bin/sh", "-c", "ulimit -n " + std::to_string(file_limit) + " && exec \"$0\" \"$@\"",
            WARDEN_BIN};
  }
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = ChildProcess::Start(argv);
  if (!child) {
    ADD_FAILURE() << "cannot start " << WARDEN_BIN;
    return nullptr;
  }
  const std::regex listening(R"(listening https?://[0-9.]+:([0-9]+))");
  for (int i = 0; i < expected_listeners; ++i) {
    std::smatch m;
    if (!child->WaitForLine(listening, &m)) {
      ADD_FAILURE() << "warden did not report listener " << i + 1 << " of " << expected_listeners;
      return nullptr;
    }
    ports->push_back(static_cast<uint16_t>(std::stoi(m[1].str())));
  }
  return child;
}

std::unique_ptr<ChildProcess> StartWardenWithSockets(const std::vector<std::string>& args,
                                                     const std::vector<int>& sockets,
                                                     const std::vector<std::string>& env,
                                                     std::vector<uint16_t>* ports) {
  // The shell sets LISTEN_PID to its own pid, which exec keeps for warden.
  std::string script = "export LISTEN_PID=$$ LISTEN_FDS=" + std::to_string(sockets.size());
  for (const std::string& e : env) script += " " + e;
  script += "; exec \"$0\" \"$@\"";
  std::vector<std::string> argv = {"/bin/sh", "-c", script, WARDEN_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = ChildProcess::Start(argv, sockets);
  if (!child) {
    ADD_FAILURE() << "cannot start " << WARDEN_BIN;
    return nullptr;
  }
  if (!ports) return child;
  std::smatch m;
  if (!child->WaitForLine(std::regex(R"(listening https?://[0-9.]+:([0-9]+))"), &m)) {
    ADD_FAILURE() << "warden did not report its listener";
    return nullptr;
  }
  ports->push_back(static_cast<uint16_t>(std::stoi(m[1].str())));
  return child;
}

uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool PortListening(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return connected;
}

}  // namespace warden::testing
