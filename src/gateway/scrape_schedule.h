// When a model's servers are scraped: each on its interval, by its scrape loop on the first shard,
// or at once when a request through the gateway changed what the scrape reads (a sleep or wake
// sent to every server), so that its answer can wait until routing knows.
#pragma once

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>

namespace warden {

class ScrapeSchedule {
 public:
  explicit ScrapeSchedule(size_t servers)
      : asked_(std::make_unique<std::atomic<bool>[]>(servers)),
        begun_(std::make_unique<std::atomic<uint64_t>[]>(servers)),
        done_(std::make_unique<std::atomic<uint64_t>[]>(servers)),
        timers_(std::make_unique<boost::asio::steady_timer*[]>(servers)) {}

  // The scrape loop's side (on the first shard only): the timer its pause between rounds waits
  // on (null once the loop ended), and each round's start and end.
  void Attach(size_t server, boost::asio::steady_timer* timer) { timers_[server] = timer; }
  // Returns the round's number (from 1).
  uint64_t Begin(size_t server) { return begun_[server].fetch_add(1) + 1; }
  void End(size_t server) { done_[server].fetch_add(1); }
  // Whether a round was asked for since the last call: the pause ends then.
  bool TakeAsked(size_t server) { return asked_[server].exchange(false); }

  // The asker's side, from any thread: the rounds begun so far (read before asking)...
  uint64_t begun(size_t server) const { return begun_[server].load(); }
  // ... whether a round begun after that number has ended ...
  bool DoneSince(size_t server, uint64_t begun_before) const {
    return done_[server].load() > begun_before;
  }
  // ... and the ask itself. Then Wake, on the first shard, ends a pause under way.
  void Ask(size_t server) { asked_[server].store(true); }
  void Wake(size_t server) {
    if (timers_[server]) timers_[server]->cancel();
  }

 private:
  std::unique_ptr<std::atomic<bool>[]> asked_;
  std::unique_ptr<std::atomic<uint64_t>[]> begun_, done_;
  std::unique_ptr<boost::asio::steady_timer*[]> timers_;  // first shard only
};

}  // namespace warden
