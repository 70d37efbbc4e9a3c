#include "core/routing/prompt_hasher.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace warden {

void PromptHasher::AddChunk(const char* data) {
  const uint64_t parent = hashes_.empty() ? 0 : hashes_.back();
  hashes_.push_back(XXH3_64bits_withSeed(data, kPromptChunkBytes, parent));
}

void PromptHasher::Feed(std::string_view text) {
  if (text.empty()) return;
  bytes_ += text.size();
  if (carried_ > 0) {
    const size_t take = std::min(text.size(), kPromptChunkBytes - carried_);
    std::memcpy(carry_ + carried_, text.data(), take);
    carried_ += take;
    text.remove_prefix(take);
    if (carried_ < kPromptChunkBytes) return;
    AddChunk(carry_);
    carried_ = 0;
  }
  while (text.size() >= kPromptChunkBytes) {
    AddChunk(text.data());
    text.remove_prefix(kPromptChunkBytes);
  }
  std::memcpy(carry_, text.data(), text.size());
  carried_ = text.size();
}

}  // namespace warden
