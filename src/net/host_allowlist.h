// The host names a browser may reach the gateway by. A page on another site can point its own name
// at 127.0.0.1 (DNS rebinding) and then use the gateway as if it were its own origin (read the
// panel's figures, drain replicas, run the model): same origin to the browser, but its Host field
// still carries the page's name. Refusing names the gateway was not given closes that.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

class HostAllowlist {
 public:
  // Answers every host.
  HostAllowlist() = default;
  // `patterns`: names (shell wildcards, any case; "*" is any host) beside those always allowed:
  // IP literals, the machine's own name, and names no public DNS can give (localhost, *.localhost,
  // *.local, *.internal). Empty: no check, unless the gateway listens on a loopback address only
  // (`listen_host`), where a browser on the machine is what reaches it under a name, so only the
  // always-allowed names are.
  HostAllowlist(std::string_view listen_host, std::vector<std::string> patterns);

  // Whether a request with this Host field value (name or address, with or without a port)
  // may be answered. An empty value (HTTP/1.0) is; one that is no host (a port that is not a
  // number, "user@host", a zone id) is not.
  bool Allows(std::string_view host_field) const;
  // What the allowed names are, for an error message: "any", or the patterns and the defaults.
  std::string Describe() const;

 private:
  bool open_ = true;
  std::vector<std::string> patterns_;
  std::string machine_;  // gethostname()
};

// The name in a Host field value: without its port, brackets or trailing dot; none when what
// follows the name is not ":<digits>".
std::optional<std::string_view> HostName(std::string_view host_field);

// The authority of an absolute-form request target ("http://host:port/path"), which names the
// host in place of the Host field (RFC 9112 §3.2.2); empty for any other form.
std::string_view TargetAuthority(std::string_view target);

// Whether an IP address in text is a loopback one (127/8, ::1, ::ffff:127.x.y.z).
bool IsLoopbackAddress(std::string_view address);

// Whether a host pattern of `allowed_hosts` can match a name: letters, digits, '-', '.', '_',
// and wildcards. Returns an error, or empty.
std::string CheckHostPattern(std::string_view pattern);

}  // namespace warden
