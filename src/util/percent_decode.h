// Decoding of %XX escapes in a URL path segment (RFC 3986 §2.1), for names that clients encode,
// such as a model called "Qwen/Qwen3 4B" in /warden/v1/models/Qwen%2FQwen3%204B.
#pragma once

#include <string>
#include <string_view>

namespace warden {

// Writes `text` with every %XX replaced by its byte into `out`. Returns false (and leaves `out`
// unspecified) when a '%' is not followed by two hex digits. '+' stays '+': this is a path.
bool PercentDecode(std::string_view text, std::string* out);

}  // namespace warden
