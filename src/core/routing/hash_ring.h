// A consistent-hash ring over replicas (virtual nodes), for the hashing policies.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/routing/policy.h"

namespace warden {

class HashRing {
 public:
  // REQUIRES: num_replicas >= 1, points_per_replica >= 1.
  HashRing(int num_replicas, int points_per_replica = 160);

  // The ring positions clockwise from `key`: replica indices, each replica once, nearest first.
  std::vector<int> Walk(uint64_t key) const;
  int num_replicas() const { return num_replicas_; }

 private:
  int num_replicas_;
  std::vector<std::pair<uint64_t, int>> points_;  // sorted by position
};

// How a hashing policy's request that goes to its key's owner `replica` is counted: a new
// conversation (or a known one with no home yet), a turn at home, or a re-home when the
// conversation's home was elsewhere (its owner was down, or it was placed by another policy before
// a switch to this one).
RouteKind HashOwnerKind(const SessionTable::Entry* session, int replica);

}  // namespace warden
