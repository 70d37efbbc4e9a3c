// The host names a browser may reach the gateway's own pages by (its panel, admin API and
// metrics). A page on another site can point its own name at 127.0.0.1 (DNS rebinding) and then
// read those pages as if they were its own: same origin to the browser, but its Host field still
// carries the page's name. Refusing names the gateway was not given closes that.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace warden {

class HostAllowlist {
 public:
  // Answers every host.
  HostAllowlist() = default;
  // `patterns`: names (shell wildcards, any case; "*" is any host) beside IP literals,
  // "localhost" and "*.localhost", which are always allowed. Empty: no check, unless the gateway
  // listens on a loopback address only (`listen_host`), where a browser on the machine is the only
  // one that reaches it under a name, so only those always-allowed names are.
  HostAllowlist(std::string_view listen_host, std::vector<std::string> patterns);

  // Whether a request with this Host field value (name or address, with or without a port)
  // may be answered. An empty value (HTTP/1.0) is.
  bool Allows(std::string_view host_field) const;
  // What the allowed names are, for an error message: "any", or the patterns and the defaults.
  std::string Describe() const;

 private:
  bool open_ = true;
  std::vector<std::string> patterns_;
};

// The name in a Host field value: without its port, brackets or trailing dot.
std::string_view HostName(std::string_view host_field);

// Whether a host pattern of `allowed_hosts` can match a name: letters, digits, '-', '.', '_',
// and wildcards. Returns an error, or empty.
std::string CheckHostPattern(std::string_view pattern);

}  // namespace warden
