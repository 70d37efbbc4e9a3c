// Trimming the blanks (spaces and tabs) HTTP allows around a field's value and a list's items
// (RFC 9110's OWS).
#pragma once

#include <string_view>

namespace warden {

// `s` without its leading blanks.
inline std::string_view TrimLeftBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// `s` without its leading and trailing blanks.
inline std::string_view TrimBlanks(std::string_view s) {
  s = TrimLeftBlanks(s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace warden
