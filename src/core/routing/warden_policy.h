// "warden": the project's policy. Stickiness is worth what the home still caches of the
// conversation, no more. For each healthy replica it estimates the prompt tokens it would have to
// compute there (the request's blocks minus the prefix its cache still holds: a per-replica index
// of routed blocks, LRU-bounded to the replica's KV-cache size as vLLM publishes it, a prompt's
// head kept longest as vLLM keeps it: it frees a finished request's blocks tail first) and charges
// each request already in flight there (the gateway's exact count) as `tokens_per_request` prompt
// tokens of work (a block of the prompt counts the tokens RoutingView::tokens_per_block says). The
// cheapest replica wins; ties go to the home, then to the fewest active conversations. A
// conversation moves home when it was served elsewhere and its old home no longer caches more than
// what every replica caches (the shared system prompt). With peer gateways, the index holds only
// what this gateway routed: a conversation whose latest news came from a peer (placed or last
// served there) counts its home as caching its prompt.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "core/routing/policy.h"
#include "core/routing/prefix_index.h"

namespace warden {

struct WardenPolicyOptions {
  // Prompt tokens of computing that cost as much as one more request in flight on a replica.
  double tokens_per_request = 4096;
  // Blocks remembered per replica before the KV-cache size is known.
  size_t default_capacity_blocks = 1 << 16;
  // What a replica caches asked of its engine (RoutingView::cache) where the view can say, not
  // estimated by the index: "warden:exact", the lab's measure of what vLLM's KV events would add.
  bool exact_cache = false;
};

class WardenPolicy : public RoutingPolicy {
 public:
  // `name`: as the policy was asked for (with its option, if one was given).
  explicit WardenPolicy(WardenPolicyOptions options = {}, std::string name = "warden")
      : options_(options), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  bool uses_prefix() const override { return true; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;

 private:
  void Resize(const RoutingView& view);
  static int PeerServedBlocks(const RouteRequest& request);

  WardenPolicyOptions options_;
  std::string name_;
  std::vector<std::unique_ptr<PrefixIndex>> caches_;  // one single-replica index per replica
  std::vector<int> capacity_blocks_;
  int next_ = 0;
};

}  // namespace warden
