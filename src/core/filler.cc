#include "core/filler.h"

#include <array>

#include "core/tokenizer.h"
#include "util/split_mix.h"

namespace warden {
namespace {

constexpr std::array<std::string_view, 64> kWords = {
    "the",     "model", "replica", "cache", "prefix", "token",  "block",  "request",
    "session", "turn",  "agent",   "tool",  "file",   "change", "test",   "build",
    "code",    "value", "return",  "read",  "write",  "check",  "error",  "result",
    "load",    "route", "home",    "queue", "step",   "batch",  "memory", "time",
    "first",   "next",  "last",    "small", "large",  "fast",   "slow",   "stable",
    "and",     "or",    "with",    "from",  "into",   "over",   "under",  "about",
    "is",      "was",   "will",    "can",   "must",   "should", "not",    "then",
    "a",       "an",    "this",    "that",  "these",  "those",  "here",   "there"};

// A cheap, well-mixed function of (seed, index).
uint64_t Mix(uint64_t x) {
  return SplitMix64(x);
}

struct TokenTable {
  std::array<TokenId, kWords.size()> ids;
  TokenTable() {
    for (size_t i = 0; i < kWords.size(); ++i) ids[i] = WordToken(kWords[i]);
  }
};

const TokenTable& Table() {
  static const TokenTable table;
  return table;
}

}  // namespace

FillerWord GeneratedWord(uint64_t seed, int i) {
  const size_t w = Mix(seed ^ Mix(static_cast<uint64_t>(i))) % kWords.size();
  return {kWords[w], Table().ids[w]};
}

std::string_view PromptWord(uint64_t seed, uint64_t i) {
  return kWords[Mix(seed * 0x100000001b3ULL ^ Mix(i)) % kWords.size()];
}

}  // namespace warden
