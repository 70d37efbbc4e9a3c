// Real time, optionally sped up: simulated seconds since start = real seconds x scale.
#pragma once

#include <chrono>

#include "util/steady_seconds.h"

namespace warden {

class ScaledClock {
 public:
  using RealTime = std::chrono::steady_clock::time_point;

  // REQUIRES: scale > 0.
  explicit ScaledClock(double scale) : scale_(scale), start_(std::chrono::steady_clock::now()) {}

  // Simulated seconds since the clock was made.
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() *
           scale_;
  }
  // The real instant at which simulated time reaches sim_s.
  RealTime RealAt(double sim_s) const { return start_ + SteadySeconds(sim_s / scale_); }
  // A simulated duration as real time.
  std::chrono::steady_clock::duration Real(double sim_seconds) const {
    return SteadySeconds(sim_seconds / scale_);
  }
  double scale() const { return scale_; }

 private:
  double scale_;
  RealTime start_;
};

}  // namespace warden
