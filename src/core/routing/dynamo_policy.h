// "dynamo": NVIDIA Dynamo's KV-aware router (its lib/kv-router default selector, with its
// defaults), as it runs without the engines' KV events (--no-router-kv-events: all a router that
// speaks only HTTP to vLLM can do). Each replica's cost, in blocks, the lowest wins and exact ties
// go at random:
//   prefill = (prefill tokens of the requests routed there that have no first token yet
//              + the request's prompt tokens) / block size
//             - the request's leading blocks its index holds for the replica (at least 0)
//   decode  = distinct blocks of the requests in flight there
//             + the request's full blocks past its longest prefix among them
// The index holds the blocks of the requests routed to a replica until 120 s after they were last
// routed there (router_ttl_secs). Both terms weigh 1 (overlap_score_credit, prefill_load_scale),
// the temperature is 0. Blind to session keys. With `kv_events` (the lab's "dynamo:events",
// Dynamo's default where engines publish KV events) the replicas' cached blocks are what the
// engines say they cache (RoutingView::cache) instead of the index's guess.
#pragma once

#include <boost/unordered/unordered_flat_map.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/routing/policy.h"
#include "core/routing/prefix_index.h"

namespace warden {

class DynamoPolicy : public RoutingPolicy {
 public:
  struct Options {
    int block_tokens = 16;                   // vLLM's default block size
    double index_ttl_s = 120;                // router_ttl_secs
    size_t index_capacity_blocks = 1 << 20;  // the approximate index's bound
    // A request neither ended nor heard of for this long is forgotten (a driver that lost it).
    double forget_after_s = 3600;
    bool kv_events = false;  // what is cached, asked of the engines where the view can tell
  };
  DynamoPolicy() : DynamoPolicy(Options{}) {}
  explicit DynamoPolicy(Options options) : options_(options) {}

  std::string_view name() const override { return options_.kv_events ? "dynamo:events" : "dynamo"; }
  bool uses_prefix() const override { return true; }
  bool tracks_requests() const override { return true; }
  RouteDecision Route(const RouteRequest& request, const RoutingView& view) override;
  void OnPlacedByRouter(const RouteRequest& request, int replica, const RoutingView& view) override;
  void OnFirstToken(uint64_t request_id, double now) override;
  void OnRequestDone(uint64_t request_id, double now) override;

  // What the router counts in flight on `replica`: distinct blocks, and prefill tokens.
  size_t active_blocks(int replica) const;
  int64_t active_prefill_tokens(int replica) const;

 private:
  // A request routed and not yet ended.
  struct InFlight {
    int replica;
    std::vector<uint64_t> blocks;
    int64_t prefill_tokens;  // until its first token
    double routed_at;
  };
  // A replica's requests in flight, as the router counts them.
  struct Load {
    boost::unordered_flat_map<uint64_t, int> block_refs;  // a block shared by several, once
    int64_t prefill_tokens = 0;
  };
  // Before a placement: the index and the requests in flight as of `view`, the request's last
  // place forgotten (it is placed again).
  void Prepare(const RouteRequest& request, const RoutingView& view);
  double Cost(int replica, const RouteRequest& request, int cached_blocks) const;
  // Leading blocks of the request cached on `replica`: the engines' word, or the index's guess.
  int CachedBlocks(int replica, const RouteRequest& request, const RoutingView& view) const;
  // The request goes to `replica`, where the index holds `cached_blocks` of it.
  void Record(const RouteRequest& request, int replica, int cached_blocks, double now);
  void Add(uint64_t request_id, InFlight in_flight);
  void Remove(uint64_t request_id);
  void ForgetLostRequests(double now);
  void Resize(int replicas);

  Options options_;
  std::unique_ptr<PrefixIndex> index_;
  std::vector<Load> loads_;
  boost::unordered_flat_map<uint64_t, InFlight> in_flight_;
  std::mt19937_64 random_{0x64796e616d6fULL};  // ties: the same runs in the lab every time
  double next_forget_check_ = 0;
};

}  // namespace warden
