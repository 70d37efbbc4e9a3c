// Comma-separated field values (RFC 9110 §5.6.1), as the Connection field holds.
#pragma once

#include <string_view>

#include "util/ascii_case.h"

namespace warden {

// Whether `a` equals `lower` in any case: ASCII, `lower` written in lower case (a field name, a
// token). Inline and without a table, unlike boost::beast::iequals: it runs for every field.
inline bool EqualsLower(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] + ('a' - 'A')) : a[i];
    if (c != lower[i]) return false;
  }
  return true;
}

// Calls `f` with each token of a comma-separated field value (trimmed, not empty).
template <typename F>
void ForEachToken(std::string_view list, F&& f) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view token = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
      token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty()) f(token);
  }
}

// Whether the list holds `name` (any case).
inline bool ListHas(std::string_view list, std::string_view name) {
  bool found = false;
  ForEachToken(list, [&](std::string_view token) { found = found || IEquals(token, name); });
  return found;
}

// Whether a Connection field names fields besides its own options (keep-alive, close): those are
// hop-by-hop too (RFC 9110 §7.6.1).
inline bool NamesFields(std::string_view connection) {
  bool names = false;
  ForEachToken(connection, [&](std::string_view token) {
    names = names || !(EqualsLower(token, "keep-alive") || EqualsLower(token, "close"));
  });
  return names;
}

}  // namespace warden
