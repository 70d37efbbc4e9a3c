#include "core/protocol/inline_data.h"

#include <algorithm>
#include <array>

#include "core/protocol/image_size.h"

namespace warden {
namespace {

// Bytes a base64 run written in a JSON string may hold: the alphabet, its padding, and the
// backslash of an escaped slash or of the line breaks some encoders put in every 76 characters.
constexpr std::array<bool, 256> kBase64 = [] {
  std::array<bool, 256> table{};
  for (int c = 'A'; c <= 'Z'; ++c) table[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) table[c] = true;
  for (int c = '0'; c <= '9'; ++c) table[c] = true;
  for (const char c : std::string_view("+/=\\")) table[static_cast<unsigned char>(c)] = true;
  return table;
}();

bool IsBase64(char c) {
  return kBase64[static_cast<unsigned char>(c)];
}

// A run of kLongInlineData bytes or more covers a whole window of half that, aligned: only windows
// whose sampled bytes are all base64 (few, in JSON text) are looked at whole.
constexpr size_t kWindow = kLongInlineData / 2;
constexpr size_t kSampleStep = 32;

bool WindowIsBase64(std::string_view json, size_t start) {
  for (size_t i = start; i < start + kWindow; i += kSampleStep)
    if (!IsBase64(json[i])) return false;
  for (size_t i = start; i < start + kWindow; ++i)
    if (!IsBase64(json[i])) return false;
  return true;
}

// Whether what comes before `start` makes the run there media: a data: URL's ";base64," or an
// Anthropic source's "data" key, `"data":"` in any JSON spacing.
bool FollowsMediaMark(std::string_view json, size_t start) {
  const std::string_view before = json.substr(0, start);
  if (before.ends_with(";base64,")) return true;
  if (!before.ends_with('"')) return false;
  size_t at = before.find_last_not_of(" \t\r\n", before.size() - 2);
  if (at == std::string_view::npos || before[at] != ':') return false;
  at = before.find_last_not_of(" \t\r\n", at - 1);
  return at != std::string_view::npos && before.substr(0, at + 1).ends_with(R"("data")");
}

}  // namespace

std::vector<InlineDataRun> LongInlineData(std::string_view json) {
  std::vector<InlineDataRun> runs;
  size_t window = 0;
  while (window + kWindow <= json.size()) {
    if (!WindowIsBase64(json, window)) {
      window += kWindow;
      continue;
    }
    size_t start = window, end = window + kWindow;
    while (start > 0 && IsBase64(json[start - 1])) --start;
    while (end < json.size() && IsBase64(json[end])) ++end;
    // A run written whole in a string (to its closing quote, not an escaped one: a data: URL in
    // HTML or JSON that is itself a string's text is text), after a media mark.
    size_t escapes = 0;
    while (escapes < end - start && json[end - 1 - escapes] == '\\') ++escapes;
    if (end - start >= kLongInlineData && end < json.size() && json[end] == '"' &&
        escapes % 2 == 0 && FollowsMediaMark(json, start))
      runs.push_back({start, end - start});
    window = (end / kWindow + 1) * kWindow;
  }
  return runs;
}

long InlineDataTokens(std::string_view run) {
  const std::optional<ImageSize> size = ImageSizeOfBase64(run);
  if (!size) return static_cast<long>(kInlineDataTokens);
  return std::min(VisionTokens(*size), static_cast<long>(kMostInlineDataTokens));
}

long EstimateTokensWithInlineData(std::string_view json) {
  size_t text = json.size();
  long media = 0;
  for (const InlineDataRun& run : LongInlineData(json)) {
    text -= run.length;
    media += InlineDataTokens(json.substr(run.offset, run.length));
  }
  return static_cast<long>(text / 4) + media;
}

}  // namespace warden
