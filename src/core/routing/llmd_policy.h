// "llm-d": llm-d's inference scheduler with weighted scorers: prefix-cache match (weight 3, the
// share of the request's first 256 blocks its index says the replica holds: the scorer's
// maxPrefixBlocksToMatch, with an LRU index of 31,250 blocks per server, lruCapacityPerServer),
// queue (weight 2, the waiting queue normalised between the shortest and the longest) and
// KV-cache utilisation (weight 2, the free share of the cache). The highest total wins; ties
// rotate. Blind to session keys.
#pragma once

#include <memory>

#include "core/routing/policy.h"
#include "core/routing/prefix_index.h"

namespace warden {

struct LlmdWeights {
  double prefix = 3;
  double queue = 2;
  double kv = 2;
};

class LlmdPolicy : public RoutingPolicy {
 public:
  static constexpr size_t kMaxPrefixBlocks = 256;
  static constexpr size_t kIndexBlocksPerServer = 31'250;

  explicit LlmdPolicy(LlmdWeights weights = {},
                      size_t index_capacity_blocks = kIndexBlocksPerServer)
      : weights_(weights), capacity_(index_capacity_blocks) {}
  std::string_view name() const override { return "llm-d"; }
  bool uses_prefix() const override { return true; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;

 private:
  LlmdWeights weights_;
  size_t capacity_;
  std::unique_ptr<PrefixIndex> index_;
  int next_ = 0;
};

}  // namespace warden
