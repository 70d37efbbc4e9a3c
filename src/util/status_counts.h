// Counts of HTTP error statuses (400-599), safe to add to from several threads at once.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace warden {

class StatusCounts {
 public:
  static constexpr int kFirst = 400;
  static constexpr int kLast = 599;

  // Statuses outside [kFirst, kLast] are not counted.
  void Add(int status) {
    if (status >= kFirst && status <= kLast)
      counts_[status - kFirst].fetch_add(1, std::memory_order_relaxed);
  }
  int64_t count(int status) const {
    if (status < kFirst || status > kLast) return 0;
    return counts_[status - kFirst].load(std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<int64_t>, kLast - kFirst + 1> counts_{};
};

}  // namespace warden
