// "warden-seed": the seed's rule (SPEC §4). A new conversation goes to the least-loaded healthy
// replica and is homed there; its turns stay home while the home has fewer than `overflow_limit`
// requests in flight; a turn past the limit goes to the least-loaded other replica without moving
// the home; an unhealthy home is replaced. With affinity off, or without a key, every request goes
// to the least-loaded replica.
#pragma once

#include "core/routing/least_loaded.h"
#include "core/routing/policy.h"

namespace warden {

class SeedPolicy : public RoutingPolicy {
 public:
  std::string_view name() const override { return "warden-seed"; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;
  void SetGatewayShare(int first, int count) override { picker_.SetShare(first, count); }

 private:
  LeastLoadedPicker picker_;
};

}  // namespace warden
