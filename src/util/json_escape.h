// Writing JSON strings by hand on hot paths, where building a DOM would cost more than the text.
#pragma once

#include <string>
#include <string_view>

namespace warden {

// Appends `s` as a quoted JSON string (RFC 8259 escapes; bytes >= 0x80 pass through as UTF-8).
void AppendJsonString(std::string* out, std::string_view s);

inline std::string JsonString(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

}  // namespace warden
