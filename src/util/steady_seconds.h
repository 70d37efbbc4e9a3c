// Seconds, the unit of the config, the flags and the engine model, as the steady clock's duration
// for timers and deadlines.
#pragma once

#include <algorithm>
#include <chrono>

namespace warden {

// `seconds` as a steady-clock duration: a negative one as zero, and one past about 95 years (an
// infinite one, say) as 95 years, where the clock's nanoseconds would overflow.
inline std::chrono::steady_clock::duration SteadySeconds(double seconds) {
  constexpr double kLongest = 3.0e9;
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::clamp(seconds, 0.0, kLongest)));
}

}  // namespace warden
