// One field of a multipart/form-data body (RFC 7578), as an audio transcription upload names its
// model: {"file": ..., "model": "whisper-large-v3"}. Read without copying, for routing only.
#pragma once

#include <optional>
#include <string_view>

namespace warden {

struct MultipartValue {
  size_t offset;  // where the field's value starts in the body
  std::string_view value;
};

// The value of the form field `name` in `body` (the last, if several), given the request's
// Content-Type (which names the boundary); empty when the type is not multipart/form-data or no
// such field is whole.
std::optional<MultipartValue> MultipartField(std::string_view content_type, std::string_view body,
                                             std::string_view name);

// Whether a field's value can be a name said back in a JSON answer: valid UTF-8, no control
// characters (else the upload is taken as naming no model).
bool IsPlainText(std::string_view value);

}  // namespace warden
