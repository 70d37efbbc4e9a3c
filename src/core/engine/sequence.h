// One request inside a simulated engine: its tokens, its KV blocks and its progress.
#pragma once

#include <cstdint>
#include <vector>

#include "core/engine/block_hash.h"
#include "core/engine/block_pool.h"
#include "core/tokens.h"

namespace warden {

using RequestId = uint64_t;

enum class FinishReason : uint8_t { kNone, kStop, kLength, kAborted };

struct Sequence {
  RequestId id = 0;
  std::vector<TokenId> tokens;          // the prompt, then each generated token
  std::vector<BlockHash> block_hashes;  // of the full blocks of `tokens`
  int num_prompt_tokens = 0;
  int max_output_tokens = 0;  // stop with kLength after this many
  int stop_after_tokens = 0;  // emit end-of-sequence as this output token (kStop) if <= max
  uint64_t output_seed = 0;
  BlockHash hash_root = kRootBlockHash;  // its cache namespace's (NewRequest::cache_namespace)

  int num_computed = 0;  // tokens whose KV state exists (or is being computed this step)
  int num_cached = -1;   // prefix-cache hit tokens at first admission; -1 until admitted
  int num_preemptions = 0;
  std::vector<BlockId> blocks;  // block table
  int num_cached_blocks = 0;    // leading blocks of the table already cached under their hash
  int num_stored_blocks = 0;    // leading prompt blocks offloaded to CPU memory (CpuKvTier)
  // >= 0: its prefix was found in CPU memory and is read back until then (it waits meanwhile);
  // its num_computed counts it already.
  double loaded_at_s = -1;

  double arrival_s = 0;
  int priority = 0;  // NewRequest::priority
  double first_token_s = -1;
  bool finished = false;  // ended (stopped, at its length, or aborted): no more tokens

  int num_output_tokens() const { return static_cast<int>(tokens.size()) - num_prompt_tokens; }
  int num_tokens() const { return static_cast<int>(tokens.size()); }
};

}  // namespace warden
