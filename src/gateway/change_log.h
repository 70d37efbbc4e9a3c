// What changed in a model's routing while the gateway ran, and when: an operator's setting (a
// PATCH, a SIGHUP, a peer's), a replica drained or back, a replica down or healthy again. The
// panel marks them on its chart, so that a change in the cached share can be read against what
// caused it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

namespace warden {

class ChangeLog {
 public:
  struct Change {
    double unix = 0;   // when (Unix time)
    std::string what;  // "affinity off", "replica 2 draining", "replica 1 down: ..."
    std::string by;    // "admin API", "SIGHUP", "a peer", "health checks"
    bool operator==(const Change&) const = default;
  };

  // Keeps the `capacity` most recent changes.
  explicit ChangeLog(size_t capacity = 200) : capacity_(capacity) {}

  // Thread-safe. An empty `what` is not noted. In time order, though noted later than one after
  // it (a peer's change, told at its next message).
  void Note(double unix, std::string what, std::string by) {
    if (what.empty()) return;
    std::lock_guard lock(mu_);
    auto at = changes_.end();
    while (at != changes_.begin() && std::prev(at)->unix > unix) --at;
    changes_.insert(at, {unix, std::move(what), std::move(by)});
    if (changes_.size() > capacity_) changes_.pop_front();
    ++noted_;
  }

  // Puts the changes a state file kept (oldest first) among those noted since the start, in time
  // order, so that a restart does not wipe the chart's markers. Thread-safe.
  void Restore(const std::vector<Change>& saved) {
    std::lock_guard lock(mu_);
    changes_.insert(changes_.begin(), saved.begin(), saved.end());
    std::stable_sort(changes_.begin(), changes_.end(),
                     [](const Change& a, const Change& b) { return a.unix < b.unix; });
    while (changes_.size() > capacity_) changes_.pop_front();
  }

  // How many changes were noted since the start (the state file is saved when it moves).
  uint64_t noted() const {
    std::lock_guard lock(mu_);
    return noted_;
  }

  // The changes made at or after `since` (Unix time), oldest first. Thread-safe.
  std::vector<Change> Since(double since) const {
    std::lock_guard lock(mu_);
    std::vector<Change> out;
    for (const Change& c : changes_)
      if (c.unix >= since) out.push_back(c);
    return out;
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<Change> changes_;  // oldest first
  uint64_t noted_ = 0;
};

}  // namespace warden
