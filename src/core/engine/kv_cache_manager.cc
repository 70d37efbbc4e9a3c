#include "core/engine/kv_cache_manager.h"

#include <algorithm>

namespace warden {

int KvCacheManager::FindCachedPrefix(const Sequence& seq, std::vector<BlockId>* hit_blocks) const {
  const int max_hit_blocks = (seq.num_tokens() - 1) / block_size_;
  return pool_->MatchPrefix(seq.block_hashes, max_hit_blocks, hit_blocks) * block_size_;
}

int KvCacheManager::HitsInFreeQueue(const std::vector<BlockId>& hit_blocks) const {
  return static_cast<int>(std::count_if(hit_blocks.begin(), hit_blocks.end(),
                                        [&](BlockId b) { return pool_->ref_count(b) == 0; }));
}

bool KvCacheManager::CanFitWhole(const Sequence& seq, const std::vector<BlockId>& hit_blocks,
                                 int reserved_blocks) const {
  const int to_allocate = BlocksToFinish(seq) - static_cast<int>(hit_blocks.size());
  return to_allocate <= 0 ||
         to_allocate <= pool_->num_free() - HitsInFreeQueue(hit_blocks) - reserved_blocks;
}

int KvCacheManager::BlocksToFinish(const Sequence& seq) const {
  const int required = (seq.num_tokens() + block_size_ - 1) / block_size_;
  return std::max(0, required - static_cast<int>(seq.blocks.size()));
}

bool KvCacheManager::AllocateSlots(Sequence* seq, int num_new_tokens,
                                   const std::vector<BlockId>& hit_blocks, int reserved_blocks,
                                   bool cache) {
  const int hit_tokens = static_cast<int>(hit_blocks.size()) * block_size_;
  const int total_computed = seq->num_computed + hit_tokens;
  const int required = (total_computed + num_new_tokens + block_size_ - 1) / block_size_;
  const int to_allocate =
      required - static_cast<int>(seq->blocks.size()) - static_cast<int>(hit_blocks.size());
  if (to_allocate > 0 &&
      to_allocate > pool_->num_free() - HitsInFreeQueue(hit_blocks) - reserved_blocks)
    return false;

  pool_->Acquire(hit_blocks);
  seq->blocks.insert(seq->blocks.end(), hit_blocks.begin(), hit_blocks.end());
  seq->num_cached_blocks += static_cast<int>(hit_blocks.size());
  if (to_allocate > 0) pool_->AllocateFresh(to_allocate, &seq->blocks);
  if (!cache) return true;

  const int full_blocks =
      std::min(total_computed + num_new_tokens, seq->num_tokens()) / block_size_;
  for (int b = seq->num_cached_blocks; b < full_blocks; ++b) {
    pool_->Cache(seq->blocks[b], seq->block_hashes[b]);
  }
  seq->num_cached_blocks = std::max(seq->num_cached_blocks, full_blocks);
  return true;
}

void KvCacheManager::Free(Sequence* seq) {
  pool_->ReleaseTailFirst(seq->blocks);
  seq->blocks.clear();
  seq->num_cached_blocks = 0;
}

}  // namespace warden
