// A comma-separated list option ("--stages 4,8,16") whose every item must be given.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "util/comma_list.h"

namespace warden {

// Adds `name` to `cmd`, writing its items into `*out` (which must outlive parsing; what it holds
// is the default shown in --help). Unlike CLI11's delimiter(','), which drops empty items, an
// empty item is an error, as is an item that is not a T.
template <typename T>
CLI::Option* AddListOption(CLI::App* cmd, const std::string& name, std::vector<T>* out,
                           const std::string& description) {
  std::string shown;
  for (const T& item : *out) shown += (shown.empty() ? "" : ",") + CLI::detail::to_string(item);
  CLI::callback_t parse = [name, out](const CLI::results_t& results) {
    out->clear();
    for (const std::string& text : results) {
      const CommaList list = SplitCommaList(text);
      if (!list.error.empty()) throw CLI::ValidationError(name, list.error);
      for (const std::string& item : list.items) {
        T value;
        if (!CLI::detail::lexical_cast(item, value))
          throw CLI::ConversionError(name + ": '" + item + "' in '" + text + "': expected " +
                                     CLI::detail::type_name<T>());
        out->push_back(std::move(value));
      }
    }
    return true;
  };
  return cmd->add_option(name, parse, description)
      ->type_name("LIST")
      ->default_str(shown)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

}  // namespace warden
