#include "util/normalised_path.h"

#include <vector>

#include "util/percent_decode.h"

namespace warden {

std::string NormalisedPath(std::string_view path) {
  // Each escape on its own, as Python's unquote (vLLM's server) reads them: a malformed one stays.
  std::string decoded;
  for (size_t i = 0; i < path.size(); ++i) {
    std::string byte;
    if (path[i] == '%' && i + 2 < path.size() && PercentDecode(path.substr(i, 3), &byte)) {
      decoded += byte;
      i += 2;
    } else {
      decoded += path[i];
    }
  }
  std::vector<std::string_view> segments;
  std::string_view rest = decoded;
  const bool trailing_slash = rest.ends_with('/');
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    const std::string_view segment = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (segment.empty() || segment == ".") continue;
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
      continue;
    }
    segments.push_back(segment);
  }
  std::string normalised;
  for (std::string_view segment : segments) normalised.append("/").append(segment);
  if (normalised.empty() || trailing_slash) normalised += '/';
  return normalised;
}

namespace {

// Whether the path holds an escape, an empty segment or a dot segment: one pass, as every request
// asks (string_view::find for "//" and "/." calls memchr once per slash).
bool NeedsNormalising(std::string_view path) {
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '%') return true;
    if (c == '/' && i + 1 < path.size() && (path[i + 1] == '/' || path[i + 1] == '.')) return true;
  }
  return false;
}

}  // namespace

std::string_view NormalisedPathView(std::string_view path, std::string* storage) {
  if (!NeedsNormalising(path)) return path;
  *storage = NormalisedPath(path);
  return *storage;
}

}  // namespace warden
