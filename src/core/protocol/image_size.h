// The pixel size of an image sent inline as base64 (PNG, JPEG, GIF, WebP), read from the first
// bytes of its header without decoding the image, and the tokens a vision model reads it as. The
// gateway has no image library and needs none: it only estimates a prompt's size.
#pragma once

#include <optional>
#include <string_view>

namespace warden {

struct ImageSize {
  long width = 0;
  long height = 0;
};

// The image's size, from `base64` as written in a JSON string (escaped slashes and line breaks
// allowed); none for another format (a PDF), a header cut short or one that does not parse.
std::optional<ImageSize> ImageSizeOfBase64(std::string_view base64);

// The tokens a Qwen2-VL-family model (Qwen2-VL, Qwen2.5-VL: the vision models most served with
// vLLM) reads an image of `size` as: one token per 28 × 28 pixels once its processor has resized
// it to multiples of 28 between 3,136 and 12,845,056 pixels. Other families differ (some read
// every image as a fixed few hundred tokens); this is an estimate of a prompt's size, not a count.
long VisionTokens(ImageSize size);

}  // namespace warden
