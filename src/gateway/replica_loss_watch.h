// Gives up the requests still waiting for a response head from a replica the scrape holds for
// lost, so that they are routed again instead of waiting for an answer that will not come.
//
// Why: a replica can take a request and never answer it. vLLM listens on its port before it has
// loaded its model (the kernel accepts connections that nobody reads for minutes), and an engine
// that dies can leave its API server's connections open. The scrape notices such a replica
// through /health (ModelState::lost); this watch then closes, once a second on their own shard,
// the connections of the requests sent there that have had no answer yet.
//
// A response being relayed (its head came) is left to run while the replica is lost (a /health
// slow under load is no reason to cut a stream that flows), unless it sends nothing for the
// watch's `lost_quiet_limit` (stall_timeout_s) from the time the replica was lost: a replica
// that is down and silent (a frozen process, a host gone) would leave its streams waiting for
// ever.
//
// It also closes the connection of a request whose replica has sent nothing for longer than the
// request's quiet limit (read_timeout_s), before the response head or in its body; and stops the
// writing of a request whose replica answered before it read the whole body (RFC 9112 §9.3: a
// replica that refuses a large body may answer at once and read no more of it).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>

namespace warden {

class ModelState;

class ReplicaLossWatch {
 public:
  // One request waiting for its response head, or relaying its body (then with a quiet limit,
  // and not given up when the replica is lost), registered for as long as it lives.
  class Waiting {
   public:
    // `socket` is closed if the scrape holds `replica` of `model` for lost first (unless not
    // `give_up_when_lost`: a response whose head came is relayed whatever the scrape says, but
    // for a replica held stalled, which does no work at all: ModelState::stalled), or
    // when nothing came for `quiet_limit` (zero: no limit) since the waiting began or since the
    // last Progress. All must outlive the waiting.
    Waiting(ReplicaLossWatch& watch, const ModelState& model, int replica,
            boost::asio::ip::tcp::socket& socket,
            std::chrono::steady_clock::duration quiet_limit = {}, bool give_up_when_lost = true);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;
    // Whether the watch closed the socket because the replica was lost (or stalled, or lost and
    // silent: lost_and_silent()).
    bool given_up() const { return given_up_; }
    // Whether it gave up a relayed response whose replica was lost and sent nothing for the
    // watch's lost_quiet_limit.
    bool lost_and_silent() const { return lost_and_silent_; }
    // Whether it closed the socket because the replica sent nothing for the quiet limit.
    bool timed_out() const { return timed_out_; }
    // Whether EndRelays closed the socket (the gateway's drain ran out of time).
    bool ended_by_stop() const { return ended_by_stop_; }
    // Something came from the replica, or the gateway waits for it again: the quiet limit counts
    // from now.
    void Progress() {
      last_progress_ = std::chrono::steady_clock::now();
      paused_ = false;
    }
    // The gateway does not wait for the replica now (it is writing to the client): the quiet
    // limit does not count until the next Progress.
    void Pause() { paused_ = true; }
    // While the gateway waits to write the rest of the request: an answer (not an interim one)
    // that came meanwhile, while the replica has taken no more of the body for kStalledWrite,
    // cancels the write, so that the answer is read instead of waiting for the replica to read
    // the body (which it may never do). A replica that answers first and reads on is left to.
    void Writing(bool writing) {
      writing_ = writing;
      acked_ = -1;
    }
    // Whether the watch cancelled the write for an answer that came first.
    bool answered_early() const { return answered_early_; }
    // Whether it gives the request up when the scrape holds the replica for lost (else only when
    // held stalled, or lost and silent for the watch's lost_quiet_limit): a stream whose head came
    // but no event yet has given its client nothing, and is better routed again.
    void GiveUpWhenLost(bool give_up) { give_up_when_lost_ = give_up; }

   private:
    friend class ReplicaLossWatch;
    ReplicaLossWatch& watch_;
    const ModelState& model_;
    int replica_;
    boost::asio::ip::tcp::socket& socket_;
    std::chrono::steady_clock::duration quiet_limit_;
    std::chrono::steady_clock::time_point last_progress_;
    bool give_up_when_lost_;
    bool paused_ = false;
    bool writing_ = false;
    bool answered_early_ = false;
    int64_t acked_ = -1;  // the body's bytes the replica had taken when last seen to take some
                          // while an answer waited (-1: none yet)
    std::chrono::steady_clock::time_point acked_at_;  // then
    bool given_up_ = false;
    bool lost_and_silent_ = false;
    bool timed_out_ = false;
    bool ended_by_stop_ = false;
    bool listed_ = false;  // false once the watch is gone (coroutine frames can outlive it)
    Waiting* prev_ = nullptr;
    Waiting* next_ = nullptr;
  };

  // How long a replica that answered a request before reading its body may take no more of it
  // before the rest of the body is given up (a pause in its reading is not the end of it).
  static constexpr std::chrono::seconds kStalledWrite{3};

  // Checks every `period` while requests wait. `lost_quiet_limit`: how long a relayed response
  // of a lost replica may send nothing before it is given up (zero: never). Used from its
  // executor's thread only.
  explicit ReplicaLossWatch(boost::asio::any_io_executor executor,
                            std::chrono::milliseconds period = std::chrono::seconds(1),
                            std::chrono::steady_clock::duration lost_quiet_limit = {});
  ~ReplicaLossWatch();
  ReplicaLossWatch(const ReplicaLossWatch&) = delete;
  ReplicaLossWatch& operator=(const ReplicaLossWatch&) = delete;

  // The gateway stops (its drain's time is up): closes the replica's side of every request still
  // waiting for its answer's head, and of every response being relayed, so that each client is
  // told (a 503 to send it again, or a stream's error event) while its connection still stands,
  // rather than cut off. So does every waiting made from then on (a request still connecting, or
  // routed again).
  void EndRelays();

 private:
  void Add(Waiting* w);
  void Remove(Waiting* w);
  void Wait();
  void Check();

  boost::asio::steady_timer timer_;
  const std::chrono::milliseconds period_;
  const std::chrono::steady_clock::duration lost_quiet_limit_;
  Waiting* first_ = nullptr;
  bool timer_waiting_ = false;
  bool ended_ = false;  // EndRelays was called: a waiting made from now on ends at once
};

}  // namespace warden
