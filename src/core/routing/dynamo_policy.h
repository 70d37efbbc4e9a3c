// "dynamo": NVIDIA Dynamo's KV-aware router. The cost of a replica is the blocks the request would
// have to prefill there (its blocks minus the overlap its index says the replica caches) plus the
// replica's active decode blocks (its KV cache in use); the lowest cost wins, ties rotate. Blind to
// session keys.
#pragma once

#include <memory>

#include "core/routing/policy.h"
#include "core/routing/prefix_index.h"

namespace warden {

class DynamoPolicy : public RoutingPolicy {
 public:
  explicit DynamoPolicy(double overlap_weight = 1.0, size_t index_capacity_blocks = 1 << 20)
      : overlap_weight_(overlap_weight), capacity_(index_capacity_blocks) {}
  std::string_view name() const override { return "dynamo"; }
  bool uses_prefix() const override { return true; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;

 private:
  double overlap_weight_;
  size_t capacity_;
  std::unique_ptr<PrefixIndex> index_;
  int next_ = 0;
};

}  // namespace warden
