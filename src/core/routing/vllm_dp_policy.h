// "vllm-dp" and "vllm-dp-fresh": vLLM's own data-parallel balancer, as a policy of the gateway and
// the lab. The lowest waiting*4 + running wins, ties to the lowest index, and each pick adds one to
// the picked engine's waiting count. "vllm-dp-fresh" replaces its counts with the engines'
// published ones at every refresh (vLLM: every 100 ms); "vllm-dp" never gets them (vLLM up to 0.26
// with a dense model, issue #48808), so its counts only grow with its picks: round-robin.
// Load-blind to conversations: every request is balanced.
#pragma once

#include <vector>

#include "core/routing/policy.h"

namespace warden {

class VllmDpPolicy : public RoutingPolicy {
 public:
  explicit VllmDpPolicy(bool fresh) : fresh_(fresh) {}
  std::string_view name() const override { return fresh_ ? "vllm-dp-fresh" : "vllm-dp"; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;
  // vLLM's engines publish every 100 ms.
  double refresh_interval_s() const override { return fresh_ ? 0.1 : 0; }

 private:
  struct Counts {
    long waiting = 0;
    long running = 0;
  };
  const bool fresh_;
  uint64_t epoch_ = ~0ULL;
  std::vector<Counts> counts_;
};

}  // namespace warden
