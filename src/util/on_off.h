#pragma once

#include <optional>
#include <string_view>

#include "util/ascii_case.h"

namespace warden {

// A switch as a config file or a flag spells it: on/off, true/false or yes/no, in any case
// (YAML's own booleans include True and ON). Nothing for anything else.
inline std::optional<bool> ParseOnOff(std::string_view text) {
  const auto is = [text](std::string_view word) { return IEquals(text, word); };
  if (is("on") || is("true") || is("yes")) return true;
  if (is("off") || is("false") || is("no")) return false;
  return std::nullopt;
}

}  // namespace warden
