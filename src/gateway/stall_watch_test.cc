#include "gateway/stall_watch.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

using std::chrono::seconds;
using Clock = StallWatch::Clock;

TEST(StallWatch, AReplicaHoldingRequestsWithNoAnswerAndNoWorkIsStalled) {
  StallWatch w;
  const Clock::time_point t0{};
  const Clock::time_point never{};
  EXPECT_FALSE(w.Update(true, never, 7.0, t0, seconds(10)));
  EXPECT_FALSE(w.Update(true, never, 7.0, t0 + seconds(9), seconds(10)));
  EXPECT_TRUE(w.Update(true, never, 7.0, t0 + seconds(10), seconds(10)));
  // Its waiting requests given up, it holds none: out of service for another limit...
  EXPECT_TRUE(w.Update(false, never, 7.0, t0 + seconds(15), seconds(10)));
  // ... then back, to be judged afresh.
  EXPECT_FALSE(w.Update(false, never, 7.0, t0 + seconds(20), seconds(10)));
  EXPECT_FALSE(w.Update(true, never, 7.0, t0 + seconds(21), seconds(10)));
  EXPECT_TRUE(w.Update(true, never, 7.0, t0 + seconds(31), seconds(10)));
  // A second verdict with no work between holds it out twice as long.
  EXPECT_TRUE(w.Update(false, never, 7.0, t0 + seconds(45), seconds(10)));
  EXPECT_TRUE(w.Held(t0 + seconds(50)));
  // Counters that move end it at once.
  EXPECT_FALSE(w.Update(false, never, 8.0, t0 + seconds(32), seconds(10)));
}

// A long generation answered whole sends nothing until it ends, but its engine counts tokens;
// an answer that came lately says the replica works too.
TEST(StallWatch, AnswersOrWorkMeanItIsAlive) {
  StallWatch w;
  const Clock::time_point t0{};
  double work = 1;
  for (int s = 0; s <= 60; ++s)
    EXPECT_FALSE(w.Update(true, t0, work += 1, t0 + seconds(s), seconds(10))) << s;
  StallWatch answered;
  for (int s = 0; s <= 60; ++s)
    EXPECT_FALSE(answered.Update(true, t0 + seconds(s), 1.0, t0 + seconds(s), seconds(10))) << s;
}

// Not judged without metrics (a server that publishes no counters, or whose scrape failed), nor
// with no limit, nor while it holds nothing.
TEST(StallWatch, NotJudgedWithoutCountersALimitOrRequests) {
  StallWatch w, off, idle;
  const Clock::time_point t0{};
  for (int s = 0; s <= 60; ++s) {
    EXPECT_FALSE(w.Update(true, t0, std::nullopt, t0 + seconds(s), seconds(10)));
    EXPECT_FALSE(off.Update(true, t0, 1.0, t0 + seconds(s), seconds(0)));
    EXPECT_FALSE(idle.Update(false, t0, 1.0, t0 + seconds(s), seconds(10)));
  }
}

}  // namespace
}  // namespace warden
