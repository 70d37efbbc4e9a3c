// Chained hashes of full KV-cache blocks, as vLLM's prefix cache computes them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tokens.h"

namespace warden {

using BlockHash = uint64_t;

// The hash of a block: its parent's hash chained with the block's token ids, so equal hashes mean
// equal prefixes up to and including the block. The first block's parent is kRootBlockHash.
BlockHash HashBlock(BlockHash parent, std::span<const TokenId> block_tokens);

inline constexpr BlockHash kRootBlockHash = 0x5eed'0f'b10c'0001ULL;

// Appends to `hashes` the hashes of the full blocks of `tokens` that `hashes` does not cover yet.
// `root` stands for the first block's parent: kRootBlockHash, or another value for a cache of its
// own (vLLM adds a LoRA adapter's id to its blocks' keys, so that no adapter reads blocks another
// computed).
// REQUIRES: `hashes` holds the hashes of the first hashes->size() blocks of `tokens`.
void ExtendBlockHashes(std::span<const TokenId> tokens, int block_size,
                       std::vector<BlockHash>* hashes, BlockHash root = kRootBlockHash);

}  // namespace warden
