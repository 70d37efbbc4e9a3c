#include "net/host_allowlist.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "util/glob.h"

namespace warden {

namespace {

// An IPv4 or IPv6 address in text, read without allocating (a zone id, "%eth0", is not one).
bool ParseAddress(std::string_view text, in6_addr* v6, in_addr* v4, bool* is_v4) {
  char buffer[INET6_ADDRSTRLEN + 1];
  if (text.empty() || text.size() >= sizeof(buffer)) return false;
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  *is_v4 = inet_pton(AF_INET, buffer, v4) == 1;
  return *is_v4 || inet_pton(AF_INET6, buffer, v6) == 1;
}

bool IsIpLiteral(std::string_view name) {
  in6_addr v6;
  in_addr v4;
  bool is_v4;
  return ParseAddress(name, &v6, &v4, &is_v4);
}

// Whether `name` is `domain` or a name under it, in any case (`domain` in lower case).
bool InDomain(std::string_view name, std::string_view domain) {
  if (name.size() < domain.size()) return false;
  const std::string_view tail = name.substr(name.size() - domain.size());
  if (!std::equal(tail.begin(), tail.end(), domain.begin(), domain.end(),
                  [](char a, char b) { return (a | 0x20) == b; }))
    return false;
  return name.size() == domain.size() || name[name.size() - domain.size() - 1] == '.';
}

// Names no one can point at an address through public DNS: localhost's (RFC 6761), the local
// network's (mDNS's .local, and .internal, which ICANN keeps for private use: Docker's
// host.docker.internal). A rebinding page needs a name whose DNS it answers.
bool IsPrivateName(std::string_view name) {
  return InDomain(name, "localhost") || InDomain(name, "local") || InDomain(name, "internal");
}

std::string MachineName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return {};
  return name;
}

bool AllDigits(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool IsLoopbackAddress(std::string_view address) {
  in6_addr v6;
  in_addr v4;
  bool is_v4;
  if (!ParseAddress(address, &v6, &v4, &is_v4)) return false;
  if (is_v4) return (ntohl(v4.s_addr) >> 24) == 127;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;  // ::ffff:127.x.y.z
}

HostAllowlist::HostAllowlist(std::string_view listen_host, std::vector<std::string> patterns)
    : patterns_(std::move(patterns)), machine_(MachineName()) {
  const bool any = std::find(patterns_.begin(), patterns_.end(), "*") != patterns_.end();
  open_ = any || (patterns_.empty() && !IsLoopbackAddress(listen_host));
}

std::optional<std::string_view> HostName(std::string_view field) {
  std::string_view port;
  if (field.starts_with('[')) {
    const size_t close = field.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view rest = field.substr(close + 1);
    if (!rest.empty() && !rest.starts_with(':')) return std::nullopt;
    port = rest.empty() ? rest : rest.substr(1);
    field = field.substr(1, close - 1);
  } else if (const size_t colon = field.rfind(':'); colon != std::string_view::npos) {
    port = field.substr(colon + 1);
    field = field.substr(0, colon);
  }
  if (!AllDigits(port)) return std::nullopt;
  if (field.ends_with('.')) field.remove_suffix(1);
  return field;
}

std::string_view TargetAuthority(std::string_view target) {
  for (const std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() &&
        std::equal(scheme.begin(), scheme.end(), target.begin(),
                   [](char a, char b) { return a == (b | 0x20); })) {
      target.remove_prefix(scheme.size());
      return target.substr(0, target.find_first_of("/?#"));
    }
  }
  return {};
}

bool HostAllowlist::Allows(std::string_view host_field) const {
  if (open_ || host_field.empty()) return true;
  // What nearly every request on a loopback gateway says, without parsing an address.
  for (const std::string_view usual : {"127.0.0.1", "localhost"}) {
    if (host_field.starts_with(usual) &&
        (host_field.size() == usual.size() ||
         (host_field[usual.size()] == ':' && AllDigits(host_field.substr(usual.size() + 1)))))
      return true;
  }
  const std::optional<std::string_view> name = HostName(host_field);
  if (!name || name->find_first_of("@%/\\ ") != std::string_view::npos) return false;
  if (IsPrivateName(*name) || IsIpLiteral(*name)) return true;
  if (!machine_.empty() && GlobMatch(machine_, *name, /*ignore_case=*/true)) return true;
  return std::any_of(patterns_.begin(), patterns_.end(), [&](const std::string& pattern) {
    return GlobMatch(pattern, *name, /*ignore_case=*/true);
  });
}

std::string HostAllowlist::Describe() const {
  if (open_) return "any";
  std::string names;
  for (const std::string& pattern : patterns_) names += pattern + ", ";
  return names + (machine_.empty() ? "" : machine_ + ", ") +
         "localhost, *.localhost, *.local, *.internal and IP addresses";
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
