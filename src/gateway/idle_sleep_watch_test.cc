#include "gateway/idle_sleep_watch.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

using std::chrono::seconds;
const auto kStart = std::chrono::steady_clock::time_point() + seconds(1000);

TEST(IdleSleepWatch, ASleepThatHoldsRequestsPastTheGraceIsOutOfServiceUntilAwake) {
  IdleSleepWatch watch;
  EXPECT_FALSE(watch.Update(true, false, kStart));  // asleep, nothing sent: waits to be woken
  EXPECT_FALSE(watch.Update(true, true, kStart + seconds(1)));
  EXPECT_FALSE(watch.Update(true, true, kStart + seconds(60)));  // a wake may take this long
  EXPECT_TRUE(watch.Update(true, true, kStart + seconds(61)));
  // Out of service, its requests are given up: it stays out while it sleeps.
  EXPECT_TRUE(watch.Update(true, false, kStart + seconds(62)));
  EXPECT_FALSE(watch.Update(false, false, kStart + seconds(63)));  // awake
  EXPECT_FALSE(watch.Update(true, true, kStart + seconds(64)));    // asleep again: a new grace
}

TEST(IdleSleepWatch, HoldingNothingInBetweenStartsTheGraceAgain) {
  IdleSleepWatch watch;
  EXPECT_FALSE(watch.Update(true, true, kStart));
  EXPECT_FALSE(watch.Update(true, false, kStart + seconds(50)));  // they ended (it woke, briefly)
  EXPECT_FALSE(watch.Update(true, true, kStart + seconds(100)));
  EXPECT_FALSE(watch.Update(true, true, kStart + seconds(159)));
  EXPECT_TRUE(watch.Update(true, true, kStart + seconds(160)));
  EXPECT_FALSE(IdleSleepWatch().Update(false, true, kStart));  // awake: never
}

}  // namespace
}  // namespace warden
