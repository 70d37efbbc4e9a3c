// A URL path as a server behind the gateway reads it: uvicorn (vLLM's server) decodes %XX escapes
// before it matches a route, and proxies such as nginx merge slashes and resolve dot segments. A
// check the gateway makes on a path (which paths need the admin token) must see the same path.
#pragma once

#include <string>
#include <string_view>

namespace warden {

// `path` with %XX escapes decoded (a malformed one left as it is), runs of '/' merged,
// and "." and ".." segments resolved (RFC 3986 §5.2.4; ".." at the root stays at the root).
std::string NormalisedPath(std::string_view path);
// The same, computed only for a path that holds something to normalise ('%', "//" or "/."): most
// are returned as they are (this runs for every request). `storage` holds a normalised one.
std::string_view NormalisedPathView(std::string_view path, std::string* storage);

}  // namespace warden
