// Comparing ASCII text without regard to case, as HTTP field names, tokens and schemes are
// compared. boost::beast::iequals is not used: Boost 1.81's reads one byte past the end of both
// strings when they differ in case (a view that ends where its buffer does is over-read).
#pragma once

#include <string_view>

namespace warden {

// `c` in lower case, if an ASCII capital (std::tolower consults the locale for every character).
inline char AsciiLower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// Whether `a` and `b` are equal but for the case of ASCII letters.
inline bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace warden
