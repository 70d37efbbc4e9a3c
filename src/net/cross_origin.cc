#include "net/cross_origin.h"

#include "util/ascii_case.h"

namespace warden {

namespace http = boost::beast::http;

bool CrossOrigin(const HttpRequest& request) {
  const std::string_view site = request["Sec-Fetch-Site"];
  if (!site.empty()) return !IEquals(site, "same-origin") && !IEquals(site, "none");
  const auto origin = request.find(http::field::origin);
  if (origin == request.end()) return false;
  std::string_view o = origin->value();
  const size_t scheme = o.find("://");
  if (scheme == std::string_view::npos) return true;  // "null" (a sandboxed page, a file) or junk
  o.remove_prefix(scheme + 3);
  const std::string_view forwarded = request["X-Forwarded-Host"];
  return !IEquals(o, request[http::field::host]) && (forwarded.empty() || !IEquals(o, forwarded));
}

}  // namespace warden
