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

std::string_view NormalisedPathView(std::string_view path, std::string* storage) {
  if (path.find('%') == std::string_view::npos && path.find("//") == std::string_view::npos &&
      path.find("/.") == std::string_view::npos)
    return path;
  *storage = NormalisedPath(path);
  return *storage;
}

}  // namespace warden
