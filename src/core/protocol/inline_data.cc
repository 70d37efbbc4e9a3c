#include "core/protocol/inline_data.h"

#include <algorithm>
#include <array>

namespace warden {

namespace {

// Where the base64 after `json[at]`, the end of a needle, begins: a data: URL's right there; an
// Anthropic source's "data": after JSON whitespace and the opening quote (npos: not a string).
size_t RunStart(std::string_view json, size_t at, bool after_data_key) {
  if (!after_data_key) return at;
  at = json.find_first_not_of(" \t\r\n", at);
  return at != std::string_view::npos && json[at] == '"' ? at + 1 : std::string_view::npos;
}

}  // namespace

std::vector<InlineDataRun> LongInlineData(std::string_view json) {
  // Runs follow an Anthropic source's "data" key or a data: URL's ";base64," (base64 holds no
  // quote nor backslash, so a run ends at the next quote).
  static constexpr std::array<std::string_view, 2> kNeedles = {R"("data":)", ";base64,"};
  std::array<size_t, 2> next{};
  for (size_t i = 0; i < kNeedles.size(); ++i) next[i] = json.find(kNeedles[i]);
  std::vector<InlineDataRun> runs;
  for (;;) {
    const size_t which = next[0] <= next[1] ? 0 : 1;
    if (next[which] == std::string_view::npos) break;
    size_t at = next[which] + kNeedles[which].size();
    if (const size_t start = RunStart(json, at, which == 0); start != std::string_view::npos) {
      const size_t end = json.find('"', start);
      if (end == std::string_view::npos) break;
      if (end - start >= kLongInlineData) runs.push_back({start, end - start});
      at = end;
    }
    for (size_t i = 0; i < kNeedles.size(); ++i)
      if (next[i] != std::string_view::npos && next[i] < at) next[i] = json.find(kNeedles[i], at);
  }
  return runs;
}

long EstimateTokensWithInlineData(std::string_view json) {
  size_t text = json.size();
  const std::vector<InlineDataRun> runs = LongInlineData(json);
  for (const InlineDataRun& run : runs) text -= run.length;
  return static_cast<long>(text / 4 + runs.size() * kInlineDataTokens);
}

}  // namespace warden
