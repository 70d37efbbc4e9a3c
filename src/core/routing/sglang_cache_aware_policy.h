// "sglang-cache-aware": SGLang router's cache-aware policy. It keeps an approximate prefix tree per
// replica of the requests it sent there. When the pool is imbalanced (max - min requests in flight
// > 32 and max > 1.1 x min) a request goes to the least loaded replica; otherwise to the replica
// with the best prefix match if that match covers more than half of the request, else to the
// replica with the smallest tree. Blind to session keys. The defaults are the router's Rust
// `CacheAwareConfig::default()`; `CommandLineDefaults()` are its launcher's (`router_args.py`).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "core/routing/policy.h"
#include "core/routing/prefix_index.h"

namespace warden {

struct SglangOptions {
  int balance_abs_threshold = 32;
  double balance_rel_threshold = 1.1;
  double cache_threshold = 0.5;
  size_t tree_capacity_blocks = 1 << 20;  // SGLang's max tree size, in 16-token blocks

  // What `python -m sglang_router.launch_router` runs unless told otherwise.
  static SglangOptions CommandLineDefaults() {
    SglangOptions o;
    o.balance_abs_threshold = 64;
    o.balance_rel_threshold = 1.5;
    o.cache_threshold = 0.3;
    return o;
  }
};

class SglangCacheAwarePolicy : public RoutingPolicy {
 public:
  explicit SglangCacheAwarePolicy(SglangOptions options = {},
                                  std::string name = "sglang-cache-aware")
      : options_(options), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  bool uses_prefix() const override { return true; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;

 private:
  SglangOptions options_;
  std::string name_;
  std::unique_ptr<PrefixIndex> trees_;
};

}  // namespace warden
