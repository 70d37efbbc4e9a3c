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
  // scores, one of this gateway's share first, each rotating: the first at or after its rotation
  // point, which then moves past it. -1 if none.
  int Pick(std::span<const ReplicaLoad> replicas, int exclude = -1);
  // Several gateways in front of the same replicas: this one's share of them, `count` from
  // `first` (round the end), which it prefers among equally loaded replicas, so that gateways
  // placing at the same moment, before they hear of each other's choice, choose apart. Its
  // rotation starts at `first`. (Without it, the share is every replica.)
  void SetShare(int first, int count) {
    share_first_ = next_ = first;
    share_count_ = count;
    next_out_ = first + count;
  }

 private:
  int share_first_ = 0;
  int share_count_ = -1;  // -1: every replica
  int next_ = 0;          // the rotation point in the share
  int next_out_ = 0;      // ... outside it
};

}  // namespace warden
