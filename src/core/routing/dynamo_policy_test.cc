#include "core/routing/dynamo_policy.h"

#include <gtest/gtest.h>

#include "core/routing/model_router.h"
#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

// A prompt of `blocks` full blocks of 16 tokens, the first `shared` of them a prefix common to
// every prompt made here, the others its own (from `first`).
struct Prompt {
  std::vector<uint64_t> hashes;
  Prompt(int blocks, int shared, uint64_t first) : hashes(blocks) {
    for (int i = 0; i < blocks; ++i) hashes[i] = i < shared ? 1000 + i : first + i;
  }
  RouteRequest Request(uint64_t id) const {
    RouteRequest r;
    r.prefix_hashes = hashes;
    r.prompt_tokens = static_cast<int>(hashes.size()) * 16;
    r.request_id = id;
    return r;
  }
};

// Cost = (prefill tokens in flight + the prompt's) / 16 - blocks cached there
//        + distinct blocks in flight + the prompt's blocks past its prefix among them.
TEST(DynamoPolicy, CostIsBlocksToPrefillPlusBlocksInFlight) {
  testing::PolicyHarness h(2);
  DynamoPolicy p;
  const Prompt a(10, 0, 100), b(10, 0, 200), c(4, 0, 300);
  const int first = h.Route(p, a.Request(1)).replica;
  ASSERT_GE(first, 0);
  EXPECT_EQ(p.active_blocks(first), 10u);
  EXPECT_EQ(p.active_prefill_tokens(first), 160);
  EXPECT_EQ(p.active_blocks(1 - first), 0u);
  // b on `first`: (160 + 160)/16 + 10 + 10 = 40; on the other: 10 + 10 = 20.
  EXPECT_EQ(h.Route(p, b.Request(2)).replica, 1 - first);
  p.OnFirstToken(1, h.now);  // a's prefill done: only its blocks count
  EXPECT_EQ(p.active_prefill_tokens(first), 0);
  EXPECT_EQ(p.active_blocks(first), 10u);
  // c: on `first` 4 + 10 + 4 = 18; on the other (160 + 64)/16 + 10 + 4 = 28.
  EXPECT_EQ(h.Route(p, c.Request(3)).replica, first);
  p.OnRequestDone(1, h.now);
  p.OnRequestDone(3, h.now);
  EXPECT_EQ(p.active_blocks(first), 0u);
  EXPECT_EQ(p.active_prefill_tokens(first), 0);
  p.OnRequestDone(42, h.now);  // unknown: nothing
}

// The blocks its index holds for a replica are not prefilled again there, and a prefix shared
// with a request in flight there is counted once.
TEST(DynamoPolicy, CachedAndSharedBlocksCostNothingMore) {
  testing::PolicyHarness h(2);
  DynamoPolicy p;
  const Prompt first_turn(20, 0, 100);
  const int home = h.Route(p, first_turn.Request(1)).replica;
  p.OnFirstToken(1, h.now);
  p.OnRequestDone(1, h.now);
  const Prompt second_turn(24, 0, 100);  // the first turn's 20 blocks and 4 more
  // Home: 24 - 20 to prefill + 24 blocks = 28; elsewhere 24 + 24 = 48.
  EXPECT_EQ(h.Route(p, second_turn.Request(2)).replica, home);
  EXPECT_EQ(p.active_prefill_tokens(home), 4 * 16);
  // Another prompt opening with the same 20 blocks, while the second turn is in flight: on home
  // its prefix among the blocks in flight adds only its own last block.
  std::vector<uint64_t> hashes = second_turn.hashes;
  hashes.resize(20);
  hashes.push_back(999);
  RouteRequest r;
  r.prefix_hashes = hashes;
  r.prompt_tokens = 21 * 16;
  r.request_id = 3;
  // Home: (64 + 336)/16 - 20 = 5 to prefill, 24 + 1 in flight: 30; elsewhere 21 + 21 = 42.
  EXPECT_EQ(h.Route(p, r).replica, home);
  EXPECT_EQ(p.active_blocks(home), 25u);
}

// On the engines' KV events (the lab's view of what each engine caches) the cached blocks are the
// engines' word: a history its index holds but the engine evicted costs its whole prefill, and one
// the engine holds but the index never saw (routed by another router) costs none.
TEST(DynamoPolicy, OnKvEventsTheEnginesCachesReplaceTheIndex) {
  struct FirstEvictedSecondHolds : CacheView {
    int CachedBlocks(int replica, std::span<const uint64_t> hashes) const override {
      return replica == 1 ? static_cast<int>(hashes.size()) : 0;
    }
  } engines;
  testing::PolicyHarness h(2);
  DynamoPolicy events({.kv_events = true}), guessing;
  EXPECT_EQ(events.name(), "dynamo:events");
  const Prompt first_turn(20, 0, 100), second_turn(24, 0, 100);
  RoutingView view = h.view();
  view.cache = &engines;
  // The first turn: both see equal costs, and ties go at random; put it on 0 for both.
  events.OnPlacedByRouter(first_turn.Request(1), 0, view);
  guessing.OnPlacedByRouter(first_turn.Request(1), 0, view);
  for (DynamoPolicy* p : {&events, &guessing}) {
    p->OnFirstToken(1, h.now);
    p->OnRequestDone(1, h.now);
  }
  // On 0 the index holds 20 blocks: 4 to prefill + 24 = 28, elsewhere 48. The engines say 0
  // evicted them and 1 holds all 24: 0 + 24 = 24 there, 48 on 0.
  EXPECT_EQ(guessing.Route(second_turn.Request(2), view).replica, 0);
  EXPECT_EQ(events.Route(second_turn.Request(2), view).replica, 1);
  EXPECT_EQ(events.active_prefill_tokens(1), 0);
}

// Without the engines' KV events the index holds what was routed for 120 s after it was last
// routed (router_ttl_secs): then the replica is no cheaper than any other.
TEST(DynamoPolicy, TheIndexForgetsWhatWasNotRoutedForTwoMinutes) {
  testing::PolicyHarness h(4);
  DynamoPolicy p;
  const Prompt turn(30, 0, 100);
  const int home = h.Route(p, turn.Request(1)).replica;
  p.OnRequestDone(1, h.now);
  h.now = 119;
  EXPECT_EQ(h.Route(p, turn.Request(2)).replica, home);  // routed again: kept 120 s more
  p.OnRequestDone(2, h.now);
  h.now = 119 + 121;
  std::vector<int> chosen(4);
  for (uint64_t id = 3; id < 403; ++id) {
    ++chosen[h.Route(p, turn.Request(id)).replica];
    p.OnRequestDone(id, h.now);
    h.now += 121;  // each one forgotten before the next
  }
  // Equal costs everywhere: each replica about a quarter of the time (ties go at random).
  for (int n : chosen) {
    EXPECT_GT(n, 60);
    EXPECT_LT(n, 140);
  }
}

TEST(DynamoPolicy, PassesOverUnhealthyReplicas) {
  testing::PolicyHarness h(3);
  DynamoPolicy p;
  h.loads[0].healthy = h.loads[2].healthy = false;
  for (uint64_t id = 1; id < 10; ++id)
    EXPECT_EQ(h.Route(p, Prompt(5, 0, id * 10).Request(id)).replica, 1);
  h.loads[1].healthy = false;
  EXPECT_EQ(h.Route(p, Prompt(5, 0, 7).Request(11)).replica, -1);
}

// Through the router, as the lab and the gateway drive it: each request gets a number, and its
// first token and its end reach the policy.
TEST(DynamoPolicy, TheRouterNumbersRequestsAndTellsTheirFirstTokenAndEnd) {
  ModelRouter router(2, std::make_unique<DynamoPolicy>(), {});
  const Prompt a(10, 0, 100);
  RouteRequest request = a.Request(0);
  const RouteDecision d = router.Route("", request, 0);
  ASSERT_GE(d.replica, 0);
  EXPECT_NE(d.request_id, 0u);
  const auto& policy = static_cast<const DynamoPolicy&>(router.policy());
  EXPECT_EQ(policy.active_prefill_tokens(d.replica), 160);
  request.request_id = d.request_id;  // routed again (another try): counted once
  EXPECT_EQ(router.Route("", request, 0).replica, d.replica);
  EXPECT_EQ(policy.active_blocks(d.replica), 10u);
  router.FirstToken(d.request_id, 1);
  EXPECT_EQ(policy.active_prefill_tokens(d.replica), 0);
  EXPECT_EQ(policy.active_blocks(d.replica), 10u);
  router.Ended(d.request_id, 2);
  EXPECT_EQ(policy.active_blocks(d.replica), 0u);
  const RouteDecision next = router.Route("", a.Request(0), 3);
  EXPECT_GT(next.request_id, d.request_id);
}

// A request the router places itself (only the replica that stored the response it is about can
// answer it) is counted where it goes all the same.
TEST(DynamoPolicy, ARequestTheRouterPlacesItselfIsCountedWhereItGoes) {
  ModelRouter router(2, std::make_unique<DynamoPolicy>(), {});
  const auto& policy = static_cast<const DynamoPolicy&>(router.policy());
  const Prompt first(10, 0, 100), second(6, 0, 200);
  const RouteDecision placed = router.Route("", first.Request(0), 0);  // placed by the policy
  RouteRequest about_stored = second.Request(0);
  about_stored.stored_on = 1 - placed.replica;
  const RouteDecision d = router.Route("", about_stored, 1);
  ASSERT_EQ(d.replica, 1 - placed.replica);
  EXPECT_NE(d.request_id, 0u);
  EXPECT_EQ(policy.active_blocks(d.replica), 6u);
  EXPECT_EQ(policy.active_prefill_tokens(d.replica), 96);
  router.Ended(d.request_id, 2);
  EXPECT_EQ(policy.active_blocks(d.replica), 0u);
  EXPECT_EQ(policy.active_blocks(placed.replica), 10u);
}

}  // namespace
}  // namespace warden
