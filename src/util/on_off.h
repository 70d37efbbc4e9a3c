#pragma once

#include <optional>
#include <string_view>

namespace warden {

// A switch as a config file or a flag spells it: on/off, true/false or yes/no, in any case
// (YAML's own booleans include True and ON). Nothing for anything else.
inline std::optional<bool> ParseOnOff(std::string_view text) {
  const auto is = [text](std::string_view word) {
    if (text.size() != word.size()) return false;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i] >= 'A' && text[i] <= 'Z' ? char(text[i] - 'A' + 'a') : text[i];
      if (c != word[i]) return false;
    }
    return true;
  };
  if (is("on") || is("true") || is("yes")) return true;
  if (is("off") || is("false") || is("no")) return false;
  return std::nullopt;
}

}  // namespace warden
