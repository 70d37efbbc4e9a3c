// The wall clock as Unix seconds, for times compared across machines (drain changes between peer
// gateways): read each time, not derived from a start time and a steady clock, which drift apart.
#pragma once

#include <chrono>

namespace warden {

inline double SystemUnixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace warden
