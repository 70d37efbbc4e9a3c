// "chwbl": consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam). A key goes to
// the first replica clockwise from its hash whose requests in flight stay within the capacity
// ceil((1 + epsilon) x average), the average counting this request; epsilon = 0.25. Requests
// without a key, and every request with affinity off, go round-robin.
#pragma once

#include <memory>

#include "core/routing/hash_ring.h"
#include "core/routing/policy.h"

namespace warden {

class ChwblPolicy : public RoutingPolicy {
 public:
  explicit ChwblPolicy(double epsilon = 0.25) : epsilon_(epsilon) {}
  std::string_view name() const override { return "chwbl"; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;

 private:
  double epsilon_;
  std::unique_ptr<HashRing> ring_;
  int next_ = 0;
};

}  // namespace warden
