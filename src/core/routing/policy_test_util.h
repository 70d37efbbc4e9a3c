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
  double tokens_per_block = 16;

  explicit PolicyHarness(int n) : loads(n) {}
  RoutingView view() const { return {loads, settings, now, epoch, tokens_per_block}; }
  RouteDecision Route(RoutingPolicy& p, const RouteRequest& r = {}) { return p.Route(r, view()); }
};

inline RouteRequest Keyed(uint64_t key_hash, const SessionTable::Entry* session = nullptr) {
  RouteRequest r;
  r.sticky = true;
  r.key_hash = key_hash;
  r.session = session;
  return r;
}

// The replicas a hashing policy picks for four turns of one key with affinity off: they rotate,
// as requests without a key do (0, 1, 2, 3), none of them following a conversation.
inline std::vector<int> FourTurnsWithAffinityOff(RoutingPolicy& p) {
  PolicyHarness h(4);
  h.settings.affinity = false;
  std::vector<int> chosen;
  for (int i = 0; i < 4; ++i) {
    const RouteDecision d = h.Route(p, Keyed(99));
    chosen.push_back(d.kind == RouteKind::kBalanced ? d.replica : -1);
  }
  return chosen;
}

}  // namespace warden::testing
