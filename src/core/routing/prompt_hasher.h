// Block hashes of a prompt as a gateway sees it, without the model's tokenizer: the prompt's parts
// (system, tools, messages: the order a chat template renders them) as raw JSON text, cut into
// 64-byte chunks (about 16 tokens, one KV block), each chunk's hash chained to the one before. Two
// requests share a leading run of hashes for as long as their prompts share a prefix, to within a
// chunk, which is what prefix-aware policies need to predict the engine's prefix-cache hits.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace warden {

// English text and JSON run about 4 bytes per token in the tokenizers of common models.
inline constexpr size_t kPromptBytesPerToken = 4;
inline constexpr size_t kPromptChunkBytes = 16 * kPromptBytesPerToken;

class PromptHasher {
 public:
  // Appends text to the prompt; every completed chunk adds a hash.
  void Feed(std::string_view text);
  // The hashes of the complete chunks so far (the incomplete tail is left out, like the engine's
  // last partial block).
  const std::vector<uint64_t>& hashes() const { return hashes_; }
  std::vector<uint64_t> TakeHashes() { return std::move(hashes_); }
  size_t bytes() const { return bytes_; }

 private:
  void AddChunk(const char* data);

  std::vector<uint64_t> hashes_;
  char carry_[kPromptChunkBytes];
  size_t carried_ = 0;
  size_t bytes_ = 0;
};

}  // namespace warden
