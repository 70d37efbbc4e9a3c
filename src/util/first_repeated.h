// The first value a list names twice: flags that list names (policies, variants, URLs) refuse a
// repeat, whose rows or figures could not be told apart.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace warden {

// The first element of `values` equal to an earlier one; nullopt if all differ.
inline std::optional<std::string> FirstRepeated(const std::vector<std::string>& values) {
  std::set<std::string> seen;
  for (const std::string& v : values) {
    if (!seen.insert(v).second) return v;
  }
  return std::nullopt;
}

}  // namespace warden
