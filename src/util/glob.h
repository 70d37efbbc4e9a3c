// Shell-style wildcard matching ('*' any run, '?' any one character), for header names and model
// aliases.
#pragma once

#include <string_view>

namespace warden {

bool GlobMatch(std::string_view pattern, std::string_view text, bool ignore_case);

}  // namespace warden
