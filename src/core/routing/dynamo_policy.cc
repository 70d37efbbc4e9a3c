#include "core/routing/dynamo_policy.h"

#include <algorithm>
#include <limits>

namespace warden {
namespace {

// The request's blocks as Dynamo counts a prompt: its full blocks (prefix_hashes), and its tokens
// (the blocks' when the driver does not know them).
int64_t PromptTokens(const RouteRequest& request, int block_tokens) {
  if (request.prompt_tokens > 0) return request.prompt_tokens;
  return static_cast<int64_t>(request.prefix_hashes.size()) * block_tokens;
}

}  // namespace

void DynamoPolicy::Resize(int replicas) {
  index_ = std::make_unique<PrefixIndex>(replicas, options_.index_capacity_blocks);
  loads_.assign(replicas, Load{});
  in_flight_.clear();
}

double DynamoPolicy::Cost(int replica, const RouteRequest& request, int cached_blocks) const {
  const Load& load = loads_[replica];
  const double block_tokens = options_.block_tokens;
  const double prefill = std::max(
      0.0, static_cast<double>(load.prefill_tokens + PromptTokens(request, options_.block_tokens)) /
                   block_tokens -
               cached_blocks);
  size_t shared = 0;  // the request's leading blocks already in flight there
  for (uint64_t h : request.prefix_hashes) {
    if (!load.block_refs.contains(h)) break;
    ++shared;
  }
  const double decode =
      static_cast<double>(load.block_refs.size() + request.prefix_hashes.size() - shared);
  return prefill + decode;
}

void DynamoPolicy::Prepare(const RouteRequest& request, const RoutingView& view) {
  const int n = static_cast<int>(view.replicas.size());
  if (!index_ || index_->num_replicas() != n) Resize(n);
  index_->ExpireBefore(view.now - options_.index_ttl_s);
  ForgetLostRequests(view.now);
  Remove(request.request_id);  // routed again (another replica's turn to try it)
}

RouteDecision DynamoPolicy::Route(const RouteRequest& request, const RoutingView& view) {
  Prepare(request, view);
  const int n = static_cast<int>(view.replicas.size());
  int best = -1, ties = 0, best_cached = 0;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) {
    if (!view.replicas[i].healthy) continue;
    const int cached = CachedBlocks(i, request, view);
    const double cost = Cost(i, request, cached);
    if (cost < best_cost) {
      best_cost = cost;
      best = i;
      best_cached = cached;
      ties = 1;
    } else if (cost == best_cost && std::uniform_int_distribution<int>(0, ties++)(random_) == 0) {
      best = i;  // each of the equal ones with the same chance
      best_cached = cached;
    }
  }
  if (best < 0) return {-1, RouteKind::kBalanced, -1};
  Record(request, best, best_cached, view.now);
  return {best, RouteKind::kBalanced, -1};
}

void DynamoPolicy::OnPlacedByRouter(const RouteRequest& request, int replica,
                                    const RoutingView& view) {
  Prepare(request, view);
  if (replica < 0 || replica >= index_->num_replicas()) return;
  Record(request, replica, CachedBlocks(replica, request, view), view.now);
}

int DynamoPolicy::CachedBlocks(int replica, const RouteRequest& request,
                               const RoutingView& view) const {
  if (options_.kv_events && view.cache)
    return view.cache->CachedBlocks(replica, request.prefix_hashes);
  return index_->Match(replica, request.prefix_hashes);
}

void DynamoPolicy::Record(const RouteRequest& request, int replica, int cached_blocks, double now) {
  index_->Insert(replica, request.prefix_hashes, now);
  if (request.request_id == 0) return;
  const int64_t to_prefill =
      std::max<int64_t>(0, PromptTokens(request, options_.block_tokens) -
                               static_cast<int64_t>(cached_blocks) * options_.block_tokens);
  Add(request.request_id,
      {replica, {request.prefix_hashes.begin(), request.prefix_hashes.end()}, to_prefill, now});
}

void DynamoPolicy::Add(uint64_t request_id, InFlight in_flight) {
  Load& load = loads_[in_flight.replica];
  for (uint64_t h : in_flight.blocks) ++load.block_refs[h];
  load.prefill_tokens += in_flight.prefill_tokens;
  in_flight_.insert_or_assign(request_id, std::move(in_flight));
}

void DynamoPolicy::Remove(uint64_t request_id) {
  const auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return;
  Load& load = loads_[it->second.replica];
  for (uint64_t h : it->second.blocks) {
    const auto ref = load.block_refs.find(h);
    if (ref != load.block_refs.end() && --ref->second == 0) load.block_refs.erase(ref);
  }
  load.prefill_tokens -= it->second.prefill_tokens;
  in_flight_.erase(it);
}

void DynamoPolicy::OnFirstToken(uint64_t request_id, double now) {
  const auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return;
  loads_[it->second.replica].prefill_tokens -= it->second.prefill_tokens;
  it->second.prefill_tokens = 0;
}

void DynamoPolicy::OnRequestDone(uint64_t request_id, double now) {
  Remove(request_id);
}

void DynamoPolicy::ForgetLostRequests(double now) {
  if (now < next_forget_check_) return;
  next_forget_check_ = now + 60;
  std::vector<uint64_t> lost;
  for (const auto& [id, in_flight] : in_flight_) {
    if (now - in_flight.routed_at > options_.forget_after_s) lost.push_back(id);
  }
  for (uint64_t id : lost) Remove(id);
}

size_t DynamoPolicy::active_blocks(int replica) const {
  return replica < static_cast<int>(loads_.size()) ? loads_[replica].block_refs.size() : 0;
}

int64_t DynamoPolicy::active_prefill_tokens(int replica) const {
  return replica < static_cast<int>(loads_.size()) ? loads_[replica].prefill_tokens : 0;
}

}  // namespace warden
