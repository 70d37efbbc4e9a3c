// Helpers for policy tests: a view over hand-made loads.
#pragma once

#include <vector>

#include "core/routing/policy.h"

namespace warden::testing {

struct PolicyHarness {
  std::vector<ReplicaLoad> loads;
  RoutingSettings settings;
  double now = 0;
  uint64_t epoch = 0;

  explicit PolicyHarness(int n) : loads(n) {}
  RoutingView view() const { return {loads, settings, now, epoch}; }
  RouteDecision Route(RoutingPolicy& p, const RouteRequest& r = {}) { return p.Route(r, view()); }
};

inline RouteRequest Keyed(uint64_t key_hash, const SessionTable::Entry* session = nullptr) {
  RouteRequest r;
  r.sticky = true;
  r.key_hash = key_hash;
  r.session = session;
  return r;
}

}  // namespace warden::testing
