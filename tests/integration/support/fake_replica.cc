#include "fake_replica.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace warden::testing {
namespace {

void WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// Reads one request (head, and a Content-Length body unless `head_only`) from `fd` into `head`,
// with what came past it left in `rest`. False when the connection ends first.
bool ReadRequest(int fd, std::string& rest, std::string* head, bool head_only) {
  for (;;) {
    const size_t end = rest.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t length = 0;
      std::string lower = rest.substr(0, end);
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (const size_t at = lower.find("content-length:"); at != std::string::npos)
        length = std::stoul(lower.substr(at + 15));
      if (head_only) length = 0;
      if (rest.size() >= end + 4 + length) {
        *head = rest.substr(0, end + 4 + length);
        rest.erase(0, end + 4 + length);
        return true;
      }
    }
    char buffer[65536];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return false;
    rest.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace

FakeReplica::FakeReplica(std::function<FakeAnswer(const std::string&)> handler, bool answer_on_head)
    : handler_(std::move(handler)), answer_on_head_(answer_on_head) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("fake replica: cannot listen");
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FakeReplica::~FakeReplica() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  {
    std::lock_guard lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : connections_) t.join();
}

void FakeReplica::AcceptLoop() {
  while (!stopping_) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    std::lock_guard lock(mu_);
    open_fds_.push_back(fd);
    connections_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeReplica::Serve(int fd) {
  std::string rest, request;
  while (!stopping_ && ReadRequest(fd, rest, &request, answer_on_head_)) {
    if (request.starts_with("GET /health ")) {
      ++health_checks_;
      int left = unanswered_health_checks_.load();
      while (left > 0 && !unanswered_health_checks_.compare_exchange_weak(left, left - 1)) {
      }
      if (left > 0) continue;  // read on: the gateway gives up and closes the connection
    }
    if (request.starts_with("GET /health ")) {
      std::string bytes;
      {
        std::lock_guard lock(mu_);
        bytes = health_answer_;
      }
      if (!bytes.empty()) {
        WriteAll(fd, bytes);
        continue;
      }
    }
    if (request.starts_with("GET /health ") && !healthy_) {
      WriteAll(fd, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
      continue;
    }
    if (request.starts_with("GET /metrics ")) {
      std::string metrics;
      {
        std::lock_guard lock(mu_);
        metrics = metrics_;
      }
      WriteAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(metrics.size()) +
                       "\r\n\r\n" + metrics);
      continue;
    }
    if (request.starts_with("GET /health ")) {
      WriteAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
      continue;
    }
    if (request.starts_with("GET /v1/models ")) {  // the gateway asks for the context length
      if (!hold_model_lists_) WriteAll(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
      continue;
    }
    ++requests_;
    const FakeAnswer answer = handler_(request);
    WriteAll(fd, answer.bytes);
    if (!answer.then.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(answer.then_after_ms));
      WriteAll(fd, answer.then);
    }
    ++answers_;
    if (answer.close_after_ms >= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(answer.close_after_ms));
      break;
    }
  }
  std::lock_guard lock(mu_);
  open_fds_.erase(std::find(open_fds_.begin(), open_fds_.end(), fd));
  ::close(fd);
}

}  // namespace warden::testing
