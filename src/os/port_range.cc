#include "os/port_range.h"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace warden {

bool ParsePortRange(std::string_view text, uint16_t* low, uint16_t* high) {
  const auto number = [&](size_t* at, uint16_t* out) {
    while (*at < text.size() && (text[*at] == ' ' || text[*at] == '\t')) ++*at;
    const auto [end, ec] = std::from_chars(text.data() + *at, text.data() + text.size(), *out);
    if (ec != std::errc() || end == text.data() + *at) return false;
    *at = end - text.data();
    return true;
  };
  size_t at = 0;
  return number(&at, low) && number(&at, high) && *low <= *high;
}

std::string EphemeralPortHint(uint16_t port) {
  std::ifstream file("/proc/sys/net/ipv4/ip_local_port_range");
  std::stringstream text;
  text << file.rdbuf();
  uint16_t low, high;
  if (!ParsePortRange(text.str(), &low, &high) || port < low || port > high) return {};
  return fmt::format(
      " (port {} is in this machine's range for outgoing connections, {}-{}: one of them may "
      "hold it; a port below {} avoids that)",
      port, low, high, low);
}

}  // namespace warden
