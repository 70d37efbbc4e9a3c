#include "core/protocol/multipart_field.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "util/ascii_case.h"
#include "util/trim.h"

namespace warden {
namespace {

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && IEquals(s.substr(0, prefix.size()), prefix);
}

// A parameter's value in a header value's ";"-separated list (quoted or not); empty if absent.
std::string_view Parameter(std::string_view header_value, std::string_view name) {
  size_t at = header_value.find(';');
  while (at != std::string_view::npos) {
    const std::string_view rest = TrimLeftBlanks(header_value.substr(at + 1));
    const size_t next = rest.find(';');
    const std::string_view param = TrimBlanks(rest.substr(0, next));
    const size_t eq = param.find('=');
    if (eq != std::string_view::npos && TrimBlanks(param.substr(0, eq)).size() == name.size() &&
        StartsWithNoCase(TrimBlanks(param.substr(0, eq)), name)) {
      std::string_view value = TrimBlanks(param.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"') {
        // A quoted value may hold ';' (not in boundaries or field names we look for): ends at '"'.
        value.remove_prefix(1);
        return value.substr(0, value.find('"'));
      }
      return value;
    }
    if (next == std::string_view::npos) break;
    at = header_value.size() - rest.size() + next;
  }
  return {};
}

// Whether a part's headers say it is the form field `name`.
bool NamesField(std::string_view headers, std::string_view name) {
  size_t line_start = 0;
  while (line_start < headers.size()) {
    size_t end = headers.find("\r\n", line_start);
    if (end == std::string_view::npos) end = headers.size();
    const std::string_view line = headers.substr(line_start, end - line_start);
    constexpr std::string_view kDisposition = "content-disposition:";
    if (StartsWithNoCase(line, kDisposition) &&
        StartsWithNoCase(TrimBlanks(line.substr(kDisposition.size())), "form-data") &&
        Parameter(line, "name") == name)
      return true;
    line_start = end + 2;
  }
  return false;
}

// Where `needle` is in `haystack` from `from` on, or npos. glibc's memmem (the two-way algorithm)
// takes time linear in the haystack whatever the needle; std::string_view::find takes up to their
// product, seconds for a 32 MiB body of dashes and a long boundary of dashes (found by review).
size_t Find(std::string_view haystack, std::string_view needle, size_t from) {
  if (from > haystack.size() || needle.size() > haystack.size() - from)
    return std::string_view::npos;  // (and an empty haystack's data may be null, which memmem
                                    // must not be given)
  if (needle.empty()) return from;
  const void* found =
      ::memmem(haystack.data() + from, haystack.size() - from, needle.data(), needle.size());
  return found ? static_cast<size_t>(static_cast<const char*>(found) - haystack.data())
               : std::string_view::npos;
}

}  // namespace

std::optional<MultipartValue> MultipartField(std::string_view content_type, std::string_view body,
                                             std::string_view name) {
  if (!StartsWithNoCase(TrimBlanks(content_type), "multipart/form-data")) return std::nullopt;
  const std::string_view boundary = Parameter(content_type, "boundary");
  constexpr size_t kLongestBoundary = 70;  // RFC 2046 §5.1.1
  if (boundary.empty() || boundary.size() > kLongestBoundary) return std::nullopt;
  const std::string delimiter = "--" + std::string(boundary);
  const std::string next_delimiter = "\r\n" + delimiter;
  // The last such field, as vLLM's server (Starlette's form) takes it.
  std::optional<MultipartValue> found;
  size_t at = Find(body, delimiter, 0);
  while (at != std::string_view::npos) {
    const size_t headers_start = at + delimiter.size() + 2;  // past the CRLF
    if (headers_start > body.size() || body.substr(at + delimiter.size(), 2) != "\r\n") break;
    const size_t headers_end = Find(body, "\r\n\r\n", headers_start);
    if (headers_end == std::string_view::npos) break;
    const size_t value_start = headers_end + 4;
    const size_t next = Find(body, next_delimiter, value_start);
    if (next == std::string_view::npos) break;
    if (NamesField(body.substr(headers_start, headers_end - headers_start), name))
      found = MultipartValue{value_start, body.substr(value_start, next - value_start)};
    at = next + 2;
  }
  return found;
}

bool IsPlainText(std::string_view value) {
  return simdjson::validate_utf8(value.data(), value.size()) &&
         std::none_of(value.begin(), value.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

}  // namespace warden
