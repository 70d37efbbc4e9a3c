#include "core/routing/vllm_dp_policy.h"

#include <gtest/gtest.h>

#include "core/routing/policy_test_util.h"

namespace warden {
namespace {

using testing::PolicyHarness;

TEST(VllmDpPolicy, WithoutPublishedCountsItIsRoundRobin) {
  PolicyHarness h(3);
  h.loads[0].running = 9;  // published, but a dense model's engines never publish
  VllmDpPolicy p(false);
  std::vector<int> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(h.Route(p).replica);
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(p.name(), "vllm-dp");
}

TEST(VllmDpPolicy, FreshCountsPickLowestWaitingTimesFourPlusRunning) {
  PolicyHarness h(3);
  h.loads[0] = {.running = 0, .waiting = 1};  // 4
  h.loads[1] = {.running = 3, .waiting = 0};  // 3
  h.loads[2] = {.running = 4, .waiting = 0};  // 4
  VllmDpPolicy p(true);
  h.epoch = 1;
  EXPECT_EQ(h.Route(p).replica, 1);  // then 7
  EXPECT_EQ(h.Route(p).replica, 0);  // 4 ties 4: the lowest index
  EXPECT_EQ(h.Route(p).replica, 2);
  h.loads[2] = {.running = 0, .waiting = 0};
  h.epoch = 2;  // a refresh replaces the counts
  EXPECT_EQ(h.Route(p).replica, 2);
  EXPECT_DOUBLE_EQ(p.refresh_interval_s(), 0.1);
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
