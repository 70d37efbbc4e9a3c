#include "net/host_allowlist.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>

#include "util/glob.h"

namespace warden {

namespace {

bool IsLoopback(std::string_view host) {
  boost::system::error_code bad;
  const boost::asio::ip::address address = boost::asio::ip::make_address(std::string(host), bad);
  return !bad && address.is_loopback();
}

bool IsIpLiteral(std::string_view name) {
  boost::system::error_code bad;
  boost::asio::ip::make_address(std::string(name), bad);
  return !bad;
}

bool IsLocalhost(std::string_view name) {
  constexpr std::string_view kLocal = "localhost";
  if (name.size() < kLocal.size()) return false;
  const std::string_view tail = name.substr(name.size() - kLocal.size());
  if (!std::equal(tail.begin(), tail.end(), kLocal.begin(), kLocal.end(),
                  [](char a, char b) { return (a | 0x20) == b; }))
    return false;
  return name.size() == kLocal.size() || name[name.size() - kLocal.size() - 1] == '.';
}

}  // namespace

HostAllowlist::HostAllowlist(std::string_view listen_host, std::vector<std::string> patterns)
    : patterns_(std::move(patterns)) {
  const bool any = std::find(patterns_.begin(), patterns_.end(), "*") != patterns_.end();
  open_ = any || (patterns_.empty() && !IsLoopback(listen_host));
}

std::string_view HostName(std::string_view field) {
  if (field.starts_with('[')) {
    const size_t close = field.find(']');
    return close == std::string_view::npos ? field : field.substr(1, close - 1);
  }
  const size_t colon = field.rfind(':');
  if (colon != std::string_view::npos) field = field.substr(0, colon);
  if (field.ends_with('.')) field.remove_suffix(1);
  return field;
}

bool HostAllowlist::Allows(std::string_view host_field) const {
  if (open_ || host_field.empty()) return true;
  const std::string_view name = HostName(host_field);
  if (IsLocalhost(name) || IsIpLiteral(name)) return true;
  return std::any_of(patterns_.begin(), patterns_.end(), [&](const std::string& pattern) {
    return GlobMatch(pattern, name, /*ignore_case=*/true);
  });
}

std::string HostAllowlist::Describe() const {
  if (open_) return "any";
  std::string names;
  for (const std::string& pattern : patterns_) names += pattern + ", ";
  return names + "localhost, *.localhost and IP addresses";
}

std::string CheckHostPattern(std::string_view pattern) {
  if (pattern.empty()) return "is empty";
  for (const char c : pattern) {
    const bool name_char = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
    if (!name_char && c != '*' && c != '?') {
      return fmt::format(
          "'{}' is not a host name (letters, digits, '-', '.', '_', and * or ? "
          "as wildcards; no port, no scheme)",
          pattern);
    }
  }
  return {};
}

}  // namespace warden
