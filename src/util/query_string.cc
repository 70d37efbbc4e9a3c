#include "util/query_string.h"

#include <algorithm>

#include "util/percent_decode.h"

namespace warden {
namespace {

bool FormDecode(std::string_view text, std::string* out) {
  std::string spaced(text);
  std::replace(spaced.begin(), spaced.end(), '+', ' ');
  return PercentDecode(spaced, out);
}

}  // namespace

std::vector<std::string> QueryValues(std::string_view target, std::string_view name) {
  std::vector<std::string> values;
  const size_t mark = target.find('?');
  if (mark == std::string_view::npos) return values;
  std::string_view rest = target.substr(mark + 1);
  rest = rest.substr(0, rest.find('#'));
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    const size_t eq = pair.find('=');
    std::string key, value;
    if (!FormDecode(pair.substr(0, eq), &key) || key != name) continue;
    if (eq != std::string_view::npos && !FormDecode(pair.substr(eq + 1), &value)) continue;
    values.push_back(std::move(value));
  }
  return values;
}

}  // namespace warden
