#include "util/glob.h"

#include "util/ascii_case.h"

namespace warden {

bool GlobMatch(std::string_view pattern, std::string_view text, bool ignore_case) {
  auto same = [ignore_case](char a, char b) {
    return ignore_case ? AsciiLower(a) == AsciiLower(b) : a == b;
  };
  // Iterative match, backtracking to the last '*'.
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() &&
        (pattern[p] == '?' || (pattern[p] != '*' && same(pattern[p], text[t])))) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace warden
