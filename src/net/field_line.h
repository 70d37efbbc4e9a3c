// A header field's whole line, for a head written out again field by field.
#pragma once

#include <string_view>

namespace warden {

// "Name: value\r\n" as one piece, where `name` and `value` are views into the line as it was read
// (Beast's parser hands them so) or as Beast's field container keeps it: one append instead of
// four. Empty where the line is laid out otherwise (not one space after the colon, whitespace
// trimmed after the value, a value folded over lines and copied elsewhere). Only for such views
// (Beast's parser and field container hold the line's CRLF past the value): the two bytes past
// the value are read once the value is found right after the name's ": " in the same buffer.
inline std::string_view WholeFieldLine(std::string_view name, std::string_view value) {
  const char* const colon = name.data() + name.size();
  if (value.data() != colon + 2 || colon[0] != ':' || colon[1] != ' ') return {};
  const char* const end = value.data() + value.size();
  if (end[0] != '\r' || end[1] != '\n') return {};
  return {name.data(), static_cast<size_t>(end + 2 - name.data())};
}

}  // namespace warden
