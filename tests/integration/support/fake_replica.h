// A replica that misbehaves on purpose, for what vLLM never does but a proxy must survive: it
// answers GET /health (200, or 503 once made unhealthy), GET /metrics (200) and GET /v1/models
// (404: the gateway reads the context length there), and every other
// request with what a test's handler says, byte for byte. Plain blocking sockets, one thread per
// connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace warden::testing {

// What the fake does with one request.
struct FakeAnswer {
  std::string bytes = {};   // written as they are, in one write (none: the request is held)
  int close_after_ms = -1;  // >= 0: close the connection this long after writing
  std::string then = {};    // written after `then_after_ms` (a second write)
  int then_after_ms = 0;
};

class FakeReplica {
 public:
  // `handler` gets each request's head and body (not /health or /metrics); with
  // `answer_on_head`, the head alone: the fake answers before it reads any of the body (and a
  // close then leaves the body unread, so the kernel resets the connection).
  explicit FakeReplica(std::function<FakeAnswer(const std::string& head)> handler,
                       bool answer_on_head = false);
  ~FakeReplica();
  FakeReplica(const FakeReplica&) = delete;
  FakeReplica& operator=(const FakeReplica&) = delete;

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Requests handed to the handler so far (each copy of a resent request counts).
  int requests() const { return requests_.load(); }
  // Answers written whole (their second write included).
  int answers() const { return answers_.load(); }
  // Connections from the gateway it has open (held requests' included).
  int open_connections() {
    std::lock_guard lock(mu_);
    return static_cast<int>(open_fds_.size());
  }
  // What /health says from now on: 200, or 503 (as vLLM's does when its engine has died).
  void SetHealthy(bool healthy) { healthy_ = healthy; }
  // From now on, health checks are answered with these bytes as they are (another protocol on
  // the port, say); empty: as SetHealthy says.
  void AnswerHealthChecksWith(std::string bytes) {
    std::lock_guard lock(mu_);
    health_answer_ = std::move(bytes);
  }
  // The next `n` health checks get no answer (a server too busy to answer in time).
  void LeaveHealthChecksUnanswered(int n) { unanswered_health_checks_ = n; }
  // Health checks received so far.
  int health_checks() const { return health_checks_.load(); }
  // From now on, GET /v1/models gets no answer (a server slow to list its models).
  void HoldModelLists() { hold_model_lists_ = true; }
  // What GET /metrics answers from now on (empty by default).
  void SetMetrics(std::string text) {
    std::lock_guard lock(mu_);
    metrics_ = std::move(text);
  }

 private:
  void AcceptLoop();
  void Serve(int fd);

  std::function<FakeAnswer(const std::string&)> handler_;
  bool answer_on_head_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> hold_model_lists_{false};
  std::atomic<int> requests_{0};
  std::atomic<int> answers_{0};
  std::atomic<bool> healthy_{true};
  std::atomic<int> unanswered_health_checks_{0};
  std::atomic<int> health_checks_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> connections_;
  std::vector<int> open_fds_;
  std::string metrics_;        // guarded by mu_
  std::string health_answer_;  // guarded by mu_
};

}  // namespace warden::testing
