// Appends a number's decimal (or hexadecimal) digits to a string: for hot paths, where a format
// string would be parsed on every call.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

namespace warden {

inline void AppendNumber(std::string* out, int64_t value, int base = 10) {
  char digits[24];
  // Base 10 takes libstdc++'s own path for it; a (pointer, length) append skips the iterator
  // overload's general replace.
  const char* end = base == 10 ? std::to_chars(digits, digits + sizeof(digits), value).ptr
                               : std::to_chars(digits, digits + sizeof(digits), value, base).ptr;
  out->append(digits, static_cast<size_t>(end - digits));
}

}  // namespace warden
