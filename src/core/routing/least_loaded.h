// Least-loaded choice among healthy replicas, with ties rotating: the building block of the seed's
// placement and of several baselines.
#pragma once

#include <span>

#include "core/routing/policy.h"

namespace warden {

// The seed's load: requests in flight (the peer gateways' too), the engine's waiting queue, active
// conversations homed there, and KV-cache use (0..1, so it mostly breaks ties between otherwise
// equal replicas).
double SeedLoadScore(const ReplicaLoad& r);

class LeastLoadedPicker {
 public:
  // The healthy replica with the lowest SeedLoadScore, other than `exclude` (-1: none); among equal
  // scores, the first at or after the rotation point, which then moves past it. -1 if none.
  int Pick(std::span<const ReplicaLoad> replicas, int exclude = -1);
  // Moves the rotation point.
  void SetRotationStart(int replica) { next_ = replica; }

 private:
  int next_ = 0;
};

}  // namespace warden
