// "round-robin": the healthy replicas in turn, blind to load and to conversations.
#pragma once

#include "core/routing/policy.h"

namespace warden {

class RoundRobinPolicy : public RoutingPolicy {
 public:
  std::string_view name() const override { return "round-robin"; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;

 private:
  int next_ = 0;
};

// The next healthy replica at or after `*next` (cyclically), advancing `*next` past it; -1 if none.
int NextHealthy(std::span<const ReplicaLoad> replicas, int* next);

}  // namespace warden
