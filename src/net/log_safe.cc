#include "net/log_safe.h"

#include <algorithm>

namespace warden {
namespace {

bool Printable(unsigned char c) {
  return c >= 0x20 && c < 0x7f;
}

}  // namespace

std::string_view LogSafe(std::string_view text, std::string& scratch) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return Printable(c); })) return text;
  static constexpr char kHex[] = "0123456789abcdef";
  scratch.clear();
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (Printable(byte)) {
      scratch += c;
    } else {
      scratch += "\\x";
      scratch += kHex[byte >> 4];
      scratch += kHex[byte & 0xf];
    }
  }
  return scratch;
}

}  // namespace warden
