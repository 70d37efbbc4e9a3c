// Checks of flag values that CLI11's own validators would word badly.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace warden {

// For a flag whose default is a negative "not given" (e.g. the profile's latency): a negative
// value given on the command line is refused, in words ("must be 0 or more, got -1") rather than
// CLI11's range of doubles up to 1.8e308. Returns the error, or empty.
inline std::string NotNegative(const std::string& value) {
  if (!value.empty() && value.front() == '-') return "must be 0 or more, got " + value;
  return {};
}

// A flag whose value is missing does not take the next flag for it: "--alias --check" or
// "--lora-modules --port 8001" is refused in words ("a value is missing: '--port' is a flag"),
// rather than run with an alias "--check" or adapters named "--port" and "8001". Only the
// command's own flags are taken for flags: a key or a description may start with "--". Call once
// the command's options are all added.
inline void RefuseFlagsAsValues(CLI::App* cmd) {
  for (CLI::Option* option : cmd->get_options()) {
    if (option->get_items_expected_min() == 0) continue;  // a switch
    option->check(
        [cmd](const std::string& value) {
          if (!value.starts_with("--")) return std::string();
          const std::string name = value.substr(0, value.find('='));
          return cmd->get_option_no_throw(name) != nullptr
                     ? "a value is missing: '" + value + "' is a flag"
                     : std::string();
        },
        "", "");
  }
}

}  // namespace warden
