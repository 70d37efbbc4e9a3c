// Small statistics helpers.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace warden {

// The p-th percentile (0..100) with linear interpolation between closest ranks; NaN when empty.
inline double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace warden
