// Prompt tokens per replica over the last hour, split into read from the prefix cache and
// computed, in fixed time buckets: what the panel's chart plots. Not thread-safe; time passed in.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace warden {

class TokenHistory {
 public:
  // REQUIRES: num_replicas >= 1, bucket_s > 0, buckets >= 1.
  TokenHistory(int num_replicas, double bucket_s = 10, int buckets = 360);

  // Counts a finished request's prompt tokens in the bucket of `now`. Times before 0 are kept
  // too: a restarted gateway's clock starts at 0, and the hour before it comes from its state file.
  void Add(int replica, int64_t cached, int64_t computed, double now);
  // Counts changed by Add since construction: whether there is something new to save.
  uint64_t version() const { return version_; }

  struct Bucket {
    double start_s;                 // on the same clock as `now`
    std::vector<int64_t> cached;    // per replica
    std::vector<int64_t> computed;  // per replica
  };
  // The buckets of the window ending at `now`, oldest first (empty buckets included).
  std::vector<Bucket> Window(double now) const;
  double bucket_s() const { return bucket_s_; }
  double window_s() const { return bucket_s_ * static_cast<double>(ring_.size()); }

 private:
  struct Slot {
    int64_t index = kNoBucket;  // which bucket (floor(now / bucket_s)) the slot holds
    std::vector<int64_t> cached, computed;
  };
  static constexpr int64_t kNoBucket = std::numeric_limits<int64_t>::min();
  int64_t IndexOf(double now) const;
  const Slot& SlotAt(int64_t index) const;
  Slot& SlotFor(int64_t index);

  const int num_replicas_;
  const double bucket_s_;
  std::vector<Slot> ring_;
  uint64_t version_ = 0;
};

}  // namespace warden
