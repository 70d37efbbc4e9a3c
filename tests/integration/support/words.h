// Prompt text for integration tests: `n` distinct one-token words ("prefix0 prefix1 ..."), so a
// test knows exactly how many tokens the simulator will count.
#pragma once

#include <string>

namespace warden::testing {

inline std::string Words(const std::string& prefix, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? " " : "") + prefix + std::to_string(i);
  return s;
}

}  // namespace warden::testing
