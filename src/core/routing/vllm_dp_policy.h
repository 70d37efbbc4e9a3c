// "vllm-dp" and "vllm-dp-fresh": vLLM 0.26's own data-parallel balancing
// (core/engine/dp_balancer.h), as a policy of the gateway and the lab. Like `vllm serve
// --data-parallel-size N`, it runs N API servers with a balancer each; a conversation's requests
// come on one connection, so one API server (chosen by its key's hash; requests without a key go
// round) places them all. "vllm-dp-fresh" takes the engines' counts every 100 ms; "vllm-dp" is
// 0.26 with a dense model, whose counts are zeros every 5 s and grow only with its own picks in
// between: round-robin per API server. Blind to conversations: every request is balanced.
// vLLM balances in its API server, after the request has crossed the network, so a lab picks with
// it on arrival (routes_on_arrival).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/engine/dp_balancer.h"
#include "core/routing/policy.h"

namespace warden {

class VllmDpPolicy : public RoutingPolicy {
 public:
  explicit VllmDpPolicy(bool fresh)
      : mode_(fresh ? DpBalancer::Mode::kFresh : DpBalancer::Mode::kStale) {}
  std::string_view name() const override { return DpBalancerModeName(mode_); }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;
  double refresh_interval_s() const override {
    return mode_ == DpBalancer::Mode::kFresh ? 0.1 : 0;  // vLLM's broadcast interval
  }
  bool routes_on_arrival() const override { return true; }

 private:
  bool Broadcasts(const RoutingView& view, std::span<const EngineLoad> loads);
  DpBalancer& ApiServer(const RouteRequest& request);

  const DpBalancer::Mode mode_;
  std::vector<DpBalancer> api_servers_;
  uint64_t keyless_ = 0;           // requests without a key, spread over the API servers in turn
  DpCoordinator coordinator_;      // kFresh: when the engines' counts are published
  std::vector<EngineLoad> loads_;  // the engines' counts as last scraped
  int64_t period_ = -1;            // kStale: the 5-s period of its last zeros
};

}  // namespace warden
