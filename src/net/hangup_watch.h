// Notices a client that hangs up while its request is being served, so the upstream request can be
// cancelled at once (closing the upstream connection makes vLLM abort the request and free its
// slot) instead of when the next write to the client fails.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <memory>

namespace warden {

class HangupWatch {
 public:
  // `client` must outlive the watch; Start and Stop must be called on the client's strand.
  explicit HangupWatch(boost::asio::ip::tcp::socket& client);
  ~HangupWatch() { Stop(); }
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;

  // Starts watching. While watching, a hang-up closes the socket set with SetUpstream.
  void Start();
  // Stops watching; required before the client connection reads its next request.
  void Stop();
  // The upstream socket to close on hang-up (nullptr: none at the moment).
  void SetUpstream(boost::asio::ip::tcp::socket* upstream);
  bool hung_up() const { return state_->hung_up; }

 private:
  struct State {
    boost::asio::ip::tcp::socket* upstream = nullptr;
    bool done = false;
    bool hung_up = false;
    char peeked;
  };

  boost::asio::ip::tcp::socket& client_;
  std::shared_ptr<State> state_;
  bool started_ = false;
};

}  // namespace warden
