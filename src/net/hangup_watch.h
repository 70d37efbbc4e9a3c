// Notices a client that hangs up while its request is being served, so the upstream request can be
// cancelled at once (closing the upstream connection makes vLLM abort the request and free its
// slot) instead of when the next write to the client fails.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>

namespace warden {

class HangupWatch;

// Arms the hang-up watches of one io_context once they are `delay` old. Arming costs a system
// call per request (Asio tries the receive at once, and it would block); a request answered within
// the delay is never armed, and a hang-up is noticed at most `delay` late. Used from its
// io_context's thread only; must outlive the io_context's run loop. Watches still pending when it
// is destroyed are let go (they will not be armed).
class HangupWatchArmer {
 public:
  HangupWatchArmer(boost::asio::any_io_executor executor, std::chrono::microseconds delay);
  ~HangupWatchArmer();
  HangupWatchArmer(const HangupWatchArmer&) = delete;
  HangupWatchArmer& operator=(const HangupWatchArmer&) = delete;

 private:
  friend class HangupWatch;
  void Add(HangupWatch* watch);
  void Remove(HangupWatch* watch);
  void Wait();
  void ArmDue();

  boost::asio::steady_timer timer_;
  const std::chrono::microseconds delay_;
  // Watches not armed yet, oldest first (a list through the watches themselves).
  HangupWatch* oldest_ = nullptr;
  HangupWatch* newest_ = nullptr;
  bool waiting_ = false;
};

class HangupWatch {
 public:
  // `client` and `armer` must outlive the watch; use it from the client's io_context thread.
  HangupWatch(boost::asio::ip::tcp::socket& client, HangupWatchArmer& armer)
      : client_(client), armer_(armer) {}
  ~HangupWatch() { Stop(); }
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;

  // Starts watching (after the armer's delay). While watching, a hang-up closes the socket set
  // with SetUpstream.
  void Start();
  // Stops watching; required before the client connection reads its next request.
  void Stop();
  // The upstream socket to close on hang-up (nullptr: none at the moment).
  void SetUpstream(boost::asio::ip::tcp::socket* upstream);
  // The client is gone, as a failed write to it found before the watch did: as a hang-up (the
  // upstream socket closed, and from now on any set).
  void ClientGone();
  bool hung_up() const { return gone_ || (state_ && state_->hung_up); }

 private:
  friend class HangupWatchArmer;
  // Shared with the pending receive, which may complete after the watch is gone.
  struct State {
    explicit State(boost::asio::any_io_executor executor) : poll_timer(executor) {}
    boost::asio::ip::tcp::socket* upstream = nullptr;
    bool done = false;
    bool hung_up = false;
    char peeked;
    int client_fd = -1;
    // Once the client has sent more (a pipelined request), its bytes stay readable: a hang-up
    // is then looked for once a second with poll(POLLRDHUP).
    boost::asio::steady_timer poll_timer;
  };

  void Arm();
  static void HungUp(State& state);
  static void PollForHangup(std::shared_ptr<State> state);

  bool gone_ = false;  // ClientGone()
  boost::asio::ip::tcp::socket& client_;
  HangupWatchArmer& armer_;
  boost::asio::ip::tcp::socket* upstream_ = nullptr;
  std::shared_ptr<State> state_;  // set when armed
  bool pending_ = false;          // started, not armed yet
  std::chrono::steady_clock::time_point started_at_;
  HangupWatch* newer_ = nullptr;  // the armer's list
  HangupWatch* older_ = nullptr;
};

}  // namespace warden
