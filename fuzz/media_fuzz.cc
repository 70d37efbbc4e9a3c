// libFuzzer target: what the gateway reads of bodies it does not parse as JSON or whose media it
// leaves out of its estimates: a multipart upload's "model" field (MultipartField, the input's
// first line is the Content-Type), the long runs of inline base64 (LongInlineData) and the image
// sizes read from them (ImageSizeOfBase64). Every run and value must lie inside the body, in
// order; every size and token count must be positive and bounded.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/protocol/image_size.h"
#include "core/protocol/inline_data.h"
#include "core/protocol/multipart_field.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t line_end = input.find('\n');
  const std::string_view content_type = input.substr(0, line_end);
  const std::string_view body =
      line_end == std::string_view::npos ? std::string_view() : input.substr(line_end + 1);
  if (const auto field = warden::MultipartField(content_type, body, "model")) {
    if (field->offset + field->value.size() > body.size()) __builtin_trap();
    if (body.substr(field->offset, field->value.size()) != field->value) __builtin_trap();
    (void)warden::IsPlainText(field->value);
  }
  size_t after = 0;
  for (const warden::InlineDataRun& run : warden::LongInlineData(input)) {
    if (run.offset < after || run.offset + run.length > input.size()) __builtin_trap();
    if (run.length < warden::kLongInlineData) __builtin_trap();
    after = run.offset + run.length;
    const long tokens = warden::InlineDataTokens(input.substr(run.offset, run.length));
    if (tokens <= 0 || tokens > static_cast<long>(warden::kMostInlineDataTokens)) __builtin_trap();
  }
  if (const auto image = warden::ImageSizeOfBase64(input)) {
    if (image->width <= 0 || image->height <= 0) __builtin_trap();
    const long tokens = warden::VisionTokens(*image);
    if (tokens < 1 || tokens > static_cast<long>(warden::kMostInlineDataTokens)) __builtin_trap();
  }
  if (warden::EstimateTokensWithInlineData(input) < 0) __builtin_trap();
  return 0;
}
