// Inline media in a request's JSON text: the base64 data of images and documents (an Anthropic
// base64 source's "data", an OpenAI data: URL). A vision model reads an image as a few hundred to a
// few thousand tokens whatever its size in base64, not one token per 4 bytes, so the gateway's
// estimates (a prompt's tokens, its 64-byte blocks for admission and prefix-aware policies) take
// each long run of it as the tokens its image size makes (InlineDataTokens).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace warden {

// Shorter runs are left as they are: they may be text.
inline constexpr size_t kLongInlineData = 1024;
// What one document, or image whose size cannot be read, is taken to cost (a 1024 x 1024 image is
// about 1,300 tokens to Qwen2.5-VL, a 512 x 512 one about 330).
inline constexpr size_t kInlineDataTokens = 1024;
// The most one run is taken to cost: an image as large as a vision model reads them (VisionTokens).
inline constexpr size_t kMostInlineDataTokens = 16384;

struct InlineDataRun {
  size_t offset;  // of the first base64 character in the JSON text
  size_t length;  // up to the closing quote
};

// The long runs of inline data in `json`, in order (none: no allocation). A run cut short (no
// closing quote) is left as text.
std::vector<InlineDataRun> LongInlineData(std::string_view json);

// The tokens a run of inline data is read as: an image's by its size (VisionTokens), anything else
// (a PDF, an image in a format not read) kInlineDataTokens. At most kMostInlineDataTokens.
long InlineDataTokens(std::string_view run);

// `json`'s tokens, roughly: 4 bytes a token for its text, InlineDataTokens for each long run.
long EstimateTokensWithInlineData(std::string_view json);

}  // namespace warden
