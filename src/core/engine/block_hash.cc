#include "core/engine/block_hash.h"

#include <xxhash.h>

namespace warden {

BlockHash HashBlock(BlockHash parent, std::span<const TokenId> block_tokens) {
  // The parent's hash seeds the block's hash: one pass over the tokens chains the two.
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent);
}

void ExtendBlockHashes(std::span<const TokenId> tokens, int block_size,
                       std::vector<BlockHash>* hashes, BlockHash root) {
  const size_t full_blocks = tokens.size() / static_cast<size_t>(block_size);
  BlockHash parent = hashes->empty() ? root : hashes->back();
  for (size_t b = hashes->size(); b < full_blocks; ++b) {
    parent = HashBlock(parent, tokens.subspan(b * block_size, block_size));
    hashes->push_back(parent);
  }
}

}  // namespace warden
