#include "core/routing/vllm_dp_policy.h"

#include <gtest/gtest.h>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

using testing::PolicyHarness;

TEST(VllmDpPolicy, OneConversationGoesRoundOneReplicaAfterAnother) {
  PolicyHarness h(3);
  h.loads[0].running = 9;  // scraped, but a dense model's engines never publish
  VllmDpPolicy p(false);
  const RouteRequest turn = testing::Keyed(7);  // API server 7 % 3 = 1, starting at replica 1
  std::vector<int> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(h.Route(p, turn).replica);
  h.now = 5.0;  // the coordinator's zeros do not stop the rotation
  for (int i = 0; i < 2; ++i) picks.push_back(h.Route(p, turn).replica);
  EXPECT_EQ(picks, (std::vector<int>{1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(p.name(), "vllm-dp");
  EXPECT_TRUE(p.routes_on_arrival());
}

TEST(VllmDpPolicy, EachApiServerCountsOnlyItsOwnPicks) {
  PolicyHarness h(2);
  VllmDpPolicy p(false);
  // Keys 2 and 4 land on API server 0, whose rotation starts at replica 0; 3 on API server 1.
  EXPECT_EQ(h.Route(p, testing::Keyed(2)).replica, 0);
  EXPECT_EQ(h.Route(p, testing::Keyed(3)).replica, 1);
  EXPECT_EQ(h.Route(p, testing::Keyed(3)).replica, 0);  // blind to the other's pick
  EXPECT_EQ(h.Route(p, testing::Keyed(4)).replica, 1);
}

TEST(VllmDpPolicy, FreshCountsPickLowestWaitingTimesFourPlusRunning) {
  PolicyHarness h(3);
  h.loads[0] = {.running = 0, .waiting = 1};  // 4
  h.loads[1] = {.running = 3, .waiting = 0};  // 3
  h.loads[2] = {.running = 4, .waiting = 0};  // 4
  VllmDpPolicy p(true);
  h.epoch = 1;
  const RouteRequest turn = testing::Keyed(3);  // API server 0
  EXPECT_EQ(h.Route(p, turn).replica, 1);       // then 7
  EXPECT_EQ(h.Route(p, turn).replica, 2);       // 4 ties 4: the first scanned from 1
  EXPECT_EQ(h.Route(p, turn).replica, 0);
  h.loads[2] = {.running = 0, .waiting = 0};
  h.epoch = 2;
  h.now = 0.1;  // changed counts are published 100 ms after the last publication
  EXPECT_EQ(h.Route(p, turn).replica, 2);
  EXPECT_DOUBLE_EQ(p.refresh_interval_s(), 0.1);
}

// vLLM's coordinator publishes counts that did not change only every 5 s: until then the API
// server's own picks add up (each publication would wipe them).
TEST(VllmDpPolicy, FreshCountsThatDidNotChangeAreNotPublishedAgainForFiveSeconds) {
  PolicyHarness h(2);
  h.loads[1].running = 5;
  VllmDpPolicy p(true);
  const RouteRequest turn = testing::Keyed(2);  // API server 0 of 2: each pick adds 2 waiting
  EXPECT_EQ(h.Route(p, turn).replica, 0);       // 0 against 5; then 8
  EXPECT_EQ(h.Route(p, turn).replica, 1);       // 5 against 8; then 13
  EXPECT_EQ(h.Route(p, turn).replica, 0);       // 8 against 13; then 16
  h.now = 1.0;
  ++h.epoch;                               // a scrape with the same counts: not published
  EXPECT_EQ(h.Route(p, turn).replica, 1);  // 13 against 16 (published again: 0 against 5)
  h.now = 5.0;
  ++h.epoch;
  EXPECT_EQ(h.Route(p, turn).replica, 0);  // published again: 0 against 5
}

// Requests without a key come on no known connection: they go round the API servers.
TEST(VllmDpPolicy, RequestsWithoutAKeyGoRoundTheApiServers) {
  PolicyHarness h(2);
  VllmDpPolicy p(false);
  EXPECT_EQ(h.Route(p).replica, 0);  // API server 0, its rotation at 0
  EXPECT_EQ(h.Route(p).replica, 1);  // API server 1, its rotation at 1
  EXPECT_EQ(h.Route(p).replica, 1);  // API server 0 again, its rotation moved on to 1
}

// A model whose replicas change (a config reload) gets new API servers, one per replica.
TEST(VllmDpPolicy, ANewReplicaCountStartsNewApiServers) {
  PolicyHarness two(2);
  VllmDpPolicy p(false);
  EXPECT_EQ(two.Route(p, testing::Keyed(4)).replica, 0);
  PolicyHarness three(3);
  EXPECT_EQ(three.Route(p, testing::Keyed(4)).replica, 1);  // API server 4 % 3 = 1, from 1
  EXPECT_EQ(three.Route(p, testing::Keyed(4)).replica, 2);
  EXPECT_EQ(three.Route(p, testing::Keyed(4)).replica, 0);
}

TEST(VllmDpPolicy, SkipsUnhealthyAndReportsNoneWhenAllAreDown) {
  PolicyHarness h(2);
  VllmDpPolicy p(false);
  h.loads[0].healthy = false;
  EXPECT_EQ(h.Route(p).replica, 1);
  h.loads[1].healthy = false;
  EXPECT_EQ(h.Route(p).replica, -1);
}

}  // namespace
}  // namespace warden
