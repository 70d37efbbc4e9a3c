// A cumulative histogram with fixed upper bounds, as Prometheus exposes them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace warden {

class Histogram {
 public:
  // REQUIRES: bounds ascending.
  explicit Histogram(std::span<const double> bounds)
      : bounds_(bounds.begin(), bounds.end()), counts_(bounds.size() + 1, 0) {}

  void Observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
  }

  const std::vector<double>& bounds() const { return bounds_; }
  // Observations <= bounds()[i], cumulative (Prometheus' "le" semantics); i == bounds().size() is
  // +Inf.
  uint64_t CumulativeCount(size_t i) const {
    uint64_t c = 0;
    for (size_t k = 0; k <= i; ++k) c += counts_[k];
    return c;
  }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// vLLM's buckets for vllm:time_to_first_token_seconds.
inline constexpr double kTtftBuckets[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};

// vLLM's buckets for vllm:e2e_request_latency_seconds.
inline constexpr double kRequestDurationBuckets[] = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace warden
