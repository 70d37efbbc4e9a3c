#include "util/comma_list.h"

namespace warden {

CommaList SplitCommaList(std::string_view text) {
  CommaList list;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma - start);
    if (item.empty()) {
      list.items.clear();
      list.error = text.empty() ? "an empty list" : "an empty item in '" + std::string(text) + "'";
      return list;
    }
    list.items.emplace_back(item);
    if (comma == std::string_view::npos) return list;
    start = comma + 1;
  }
}

}  // namespace warden
