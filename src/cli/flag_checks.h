// Checks of flag values that CLI11's own validators would word badly.
#pragma once

#include <string>

namespace warden {

// For a flag whose default is a negative "not given" (e.g. the profile's latency): a negative
// value given on the command line is refused, in words ("must be 0 or more, got -1") rather than
// CLI11's range of doubles up to 1.8e308. Returns the error, or empty.
inline std::string NotNegative(const std::string& value) {
  if (!value.empty() && value.front() == '-') return "must be 0 or more, got " + value;
  return {};
}

}  // namespace warden
