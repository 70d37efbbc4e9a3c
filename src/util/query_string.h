// The values of a request target's query parameters (?level=1&tags=a&tags=b), as web frameworks
// read them: '+' is a space and %XX escapes are decoded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace warden {

// Every value given for `name` in `target`'s query string, in order; "name" alone gives "".
// A value that is not validly percent-encoded is left out.
std::vector<std::string> QueryValues(std::string_view target, std::string_view name);

}  // namespace warden
