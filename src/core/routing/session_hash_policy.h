// "session-hash": consistent hashing of the affinity key (the first rule the seed's authors used):
// stable, and blind to load. Requests without a key, and every request with
// affinity off, go round-robin.
#pragma once

#include <memory>

#include "core/routing/hash_ring.h"
#include "core/routing/policy.h"

namespace warden {

class SessionHashPolicy : public RoutingPolicy {
 public:
  std::string_view name() const override { return "session-hash"; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;

 private:
  std::unique_ptr<HashRing> ring_;
  int next_ = 0;
};

}  // namespace warden
