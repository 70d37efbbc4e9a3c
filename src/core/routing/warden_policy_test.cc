#include "core/routing/warden_policy.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

std::vector<uint64_t> Blocks(uint64_t first, int n) {
  std::vector<uint64_t> blocks(n);
  std::iota(blocks.begin(), blocks.end(), first);
  return blocks;
}

// The cheapest replica: the prompt tokens it would compute (16 a block it does not cache) plus
// tokens_per_request for each request in flight there.
TEST(WardenPolicy, PicksTheFewestTokensToComputePlusTheLoadInFlight) {
  testing::PolicyHarness h(2);
  WardenPolicy p({.tokens_per_request = 100});
  RouteRequest r;
  const std::vector<uint64_t> prompt = Blocks(1, 20);  // 320 tokens
  r.prefix_hashes = prompt;
  EXPECT_EQ(h.Route(p, r).replica, 0);  // nothing cached anywhere: ties rotate from 0
  h.loads[0].in_flight = 3;             // cached on 0 now: 0 + 300 there against 320 + 0 on 1
  EXPECT_EQ(h.Route(p, r).replica, 0);
  h.loads[0].in_flight = 4;  // 400 against 320
  EXPECT_EQ(h.Route(p, r).replica, 1);
}

// The tokens a prompt's block stands for (the gateway's chunks of text hold what the usage says)
// price what a replica would compute in tokens, as the requests in flight are priced.
TEST(WardenPolicy, PricesComputeInTheTokensABlockHolds) {
  testing::PolicyHarness h(2);
  WardenPolicy p({.tokens_per_request = 100});
  RouteRequest r;
  const std::vector<uint64_t> prompt = Blocks(1, 20);
  r.prefix_hashes = prompt;
  ASSERT_EQ(h.Route(p, r).replica, 0);  // cached on 0 now
  h.loads[0].in_flight = 2;             // 200 to wait on 0 against 20 blocks to compute on 1
  EXPECT_EQ(h.Route(p, r).replica, 0);  // 320 tokens at 16 a block
  h.tokens_per_block = 8;
  EXPECT_EQ(h.Route(p, r).replica, 1);  // 160 tokens at 8
}

// Stickiness is worth what the home still caches: a conversation goes home while that pays, is
// served elsewhere (overflow) while the home is busy but still holds its history, and moves home
// once the home keeps no more of it than every replica does (the shared system prompt).
TEST(WardenPolicy, MovesAHomeOnlyWhenItNoLongerCachesTheConversation) {
  testing::PolicyHarness h(2);
  WardenPolicy p({.tokens_per_request = 100});
  const std::vector<uint64_t> system = Blocks(1000, 4);
  std::vector<uint64_t> turn = system;
  for (uint64_t b : Blocks(1, 16)) turn.push_back(b);
  RouteRequest first = testing::Keyed(7);
  first.prefix_hashes = turn;
  const RouteDecision d = h.Route(p, first);
  EXPECT_EQ(d.kind, RouteKind::kNew);
  EXPECT_EQ(d.new_home, 0);

  SessionTable::Entry entry;
  entry.home = 0;
  RouteRequest next = testing::Keyed(7, &entry);
  next.prefix_hashes = turn;
  EXPECT_EQ(h.Route(p, next).kind, RouteKind::kSticky);
  h.loads[0].in_flight = 5;  // 500 to wait there against 320 to compute on 1
  const RouteDecision overflow = h.Route(p, next);
  EXPECT_EQ(overflow.replica, 1);
  EXPECT_EQ(overflow.kind, RouteKind::kOverflow);  // 0 still holds more than the system prompt
  EXPECT_EQ(overflow.new_home, -1);

  // Another conversation under the same system prompt, homed on 1, which caches none of it but
  // that prompt (as 0 does): served on 0, it moves home.
  std::vector<uint64_t> other = system;
  for (uint64_t b : Blocks(500, 16)) other.push_back(b);
  SessionTable::Entry other_entry;
  other_entry.home = 1;
  RouteRequest moved = testing::Keyed(8, &other_entry);
  moved.prefix_hashes = other;
  h.loads[0].in_flight = 0;
  h.loads[1].in_flight = 5;
  const RouteDecision rehome = h.Route(p, moved);
  EXPECT_EQ(rehome.replica, 0);
  EXPECT_EQ(rehome.kind, RouteKind::kRehome);  // 1 caches none of it but the system prompt
  EXPECT_EQ(rehome.new_home, 0);
}

// With peer gateways, this gateway's index holds only what it routed itself: a conversation a peer
// placed, or whose latest turn a peer routed, counts its home as caching its prompt, instead of
// being re-homed for want of blocks this gateway never saw (turns alternating between gateways
// moved at nearly every turn).
// A conversation's home whose cache ran short keeps its head (vLLM lets a finished request's tail
// go first): the conversation stays home, where its opening still hits, rather than moving as if
// the home had kept no more of it than the system prompt every replica caches.
TEST(WardenPolicy, AHomeThatLostAConversationsTailStillHoldsItsHead) {
  testing::PolicyHarness h(2);
  for (ReplicaLoad& load : h.loads) load.kv_capacity_blocks = 24;
  WardenPolicy p({.tokens_per_request = 100});
  const std::vector<uint64_t> system = Blocks(1000, 4);
  std::vector<uint64_t> turn = system, other = system;
  for (uint64_t b : Blocks(1, 16)) turn.push_back(b);
  for (uint64_t b : Blocks(100, 12)) other.push_back(b);
  RouteRequest first = testing::Keyed(7);
  first.prefix_hashes = turn;
  ASSERT_EQ(h.Route(p, first).new_home, 0);
  // Another conversation on 0: the index holds 24 blocks there, so 8 of the first one's go.
  RouteRequest second = testing::Keyed(8);
  second.prefix_hashes = other;
  h.loads[1].in_flight = 1;
  ASSERT_EQ(h.Route(p, second).replica, 0);
  // Replica 1 gets the system prompt too.
  RouteRequest keyless;
  keyless.prefix_hashes = system;
  h.loads[1].in_flight = 0;
  h.loads[0].in_flight = 1;
  ASSERT_EQ(h.Route(p, keyless).replica, 1);

  SessionTable::Entry entry;
  entry.home = 0;
  RouteRequest next = testing::Keyed(7, &entry);
  next.prefix_hashes = turn;
  const RouteDecision d = h.Route(p, next);
  // 0 still holds the first 8 of its 16 blocks: 128 tokens to compute and 100 in flight there,
  // against 256 on 1. (Had the index let the head go first, 0 would hold the system prompt only,
  // as 1 does: 356 against 256, and the conversation would move.)
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.kind, RouteKind::kSticky);
}

// The index follows the published cache's size as it changes (the tokens a block holds are
// learned as requests end) without forgetting what it holds: a conversation stays home.
TEST(WardenPolicy, KeepsItsIndexWhenTheCachesSizeChanges) {
  testing::PolicyHarness h(2);
  for (ReplicaLoad& load : h.loads) load.kv_capacity_blocks = 100;
  WardenPolicy p({.tokens_per_request = 100});
  RouteRequest first = testing::Keyed(7);
  const std::vector<uint64_t> turn = Blocks(1, 20);
  first.prefix_hashes = turn;
  ASSERT_EQ(h.Route(p, first).new_home, 0);
  for (ReplicaLoad& load : h.loads) load.kv_capacity_blocks = 160;
  SessionTable::Entry entry;
  entry.home = 0;
  RouteRequest next = testing::Keyed(7, &entry);
  next.prefix_hashes = turn;
  h.loads[0].in_flight = 2;  // 200 to wait there against 320 to compute on 1
  const RouteDecision d = h.Route(p, next);
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.kind, RouteKind::kSticky);
}

// Told what each engine caches (the lab's engines, RoutingView::cache), it reads that instead of
// its own index of what it routed; without such a view it estimates as ever.
TEST(WardenPolicy, ToldWhatTheEnginesCacheItReadsThat) {
  struct SecondCachesAll : CacheView {
    int CachedBlocks(int replica, std::span<const uint64_t> hashes) const override {
      return replica == 1 ? static_cast<int>(hashes.size()) : 0;
    }
  } engines;
  testing::PolicyHarness h(2);
  WardenPolicy told({.tokens_per_request = 100, .exact_cache = true}), estimating;
  RouteRequest r;
  const std::vector<uint64_t> prompt = Blocks(1, 20);
  r.prefix_hashes = prompt;
  ASSERT_EQ(h.Route(told, r).replica, 0);  // no view: its index, empty, and ties from 0
  RoutingView view = h.view();
  view.cache = &engines;
  EXPECT_EQ(told.Route(r, view).replica, 1);  // 1 holds the whole prompt
  EXPECT_EQ(estimating.Route(r, view).replica, 0);
}

TEST(WardenPolicy, AConversationAPeerRoutedLastStaysHome) {
  testing::PolicyHarness h(2);
  WardenPolicy p({.tokens_per_request = 100});
  SessionTable::Entry entry;
  entry.home = 0;
  entry.news_from = 1;  // a peer's
  RouteRequest next = testing::Keyed(7, &entry);
  const std::vector<uint64_t> prompt = Blocks(1, 20);
  next.prefix_hashes = prompt;
  h.loads[0].in_flight = 1;  // 100 to wait there against 320 to compute on 1
  const RouteDecision d = h.Route(p, next);
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.kind, RouteKind::kSticky);
  // News of its own: the index is the evidence, and (another gateway's index) has nothing.
  WardenPolicy fresh({.tokens_per_request = 100});
  entry.news_from = SessionTable::kHere;
  EXPECT_EQ(h.Route(fresh, next).kind, RouteKind::kRehome);
}

}  // namespace
}  // namespace warden
