// libFuzzer target: a client's request head, read by Beast as the gateway's server reads it, then
// put through what the gateway decides from a head alone: the target's path and authority, the
// Host field's name and whether the allowlist answers it, and the session key the headers give.
// Invariants: the path and authority are parts of the target (or the path "/"); a key is never
// longer than kMaxSessionKeyBytes; the headers "carry a key" exactly when the key comes from them.
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/routing/session_key.h"
#include "net/host_allowlist.h"
#include "net/http_server.h"

namespace {

namespace http = boost::beast::http;

// Whether `part` lies inside `whole` (a view into it, as the readers return).
bool Within(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void CheckTarget(std::string_view target) {
  // A target with no path ("http://host") has the path "/".
  const auto path_of = [&](std::string_view path) { return Within(path, target) || path == "/"; };
  if (!path_of(warden::TargetPath(target))) __builtin_trap();
  if (!path_of(warden::OriginForm(target))) __builtin_trap();
  if (!Within(warden::TargetAuthority(target), target)) __builtin_trap();
}

void CheckHost(std::string_view host) {
  if (const std::optional<std::string_view> name = warden::HostName(host);
      name && !Within(*name, host))
    __builtin_trap();
  static const warden::HostAllowlist loopback("127.0.0.1", {});
  static const warden::HostAllowlist named("0.0.0.0", {"gateway.example", "*.corp"});
  // An answer, whatever the value; the empty value (HTTP/1.0) always passes.
  (void)loopback.Allows(host);
  if (!named.Allows("") || !loopback.Allows("")) __builtin_trap();
  (void)named.Allows(host);
}

void CheckKey(const http::request<http::empty_body>& head) {
  std::vector<warden::HeaderView> headers;
  for (const auto& field : head)
    headers.push_back({std::string_view(field.name_string()), std::string_view(field.value())});
  static const warden::SessionKeyConfig config;
  const warden::BodyFacts no_body;
  const warden::SessionKey key = warden::ExtractSessionKey(headers, no_body, config);
  if (key.key.size() > warden::kMaxSessionKeyBytes) __builtin_trap();
  const bool from_headers = key.source == warden::KeySource::kClaudeCodeHeader ||
                            key.source == warden::KeySource::kHeader;
  if (warden::HeadersCarryKey(headers, config) != from_headers) __builtin_trap();
  if (warden::ClaudeCodeHeaderKeys(headers) && key.source != warden::KeySource::kClaudeCodeHeader)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::empty_body> parser;
  parser.header_limit(64 * 1024);
  parser.eager(false);
  boost::beast::error_code ec;
  try {
    parser.put(boost::asio::buffer(data, size), ec);
  } catch (const std::length_error&) {  // a field over Beast's 64 KiB: the server's 431
    return 0;
  }
  if (!parser.is_header_done()) return 0;
  const http::request<http::empty_body>& head = parser.get();
  CheckTarget(head.target());
  CheckHost(head[http::field::host]);
  CheckKey(head);
  return 0;
}
