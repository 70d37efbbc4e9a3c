// A command line's comma-separated list ("4,8,16", "vllm-dp,warden").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace warden {

// The items of a comma-separated list, or why it is not one. An empty item ("4,,8", "4,", ",4",
// "") is an error rather than dropped: a list mistyped should not run as another list.
struct CommaList {
  std::vector<std::string> items;
  std::string error;  // empty when the list is good
};

CommaList SplitCommaList(std::string_view text);

}  // namespace warden
