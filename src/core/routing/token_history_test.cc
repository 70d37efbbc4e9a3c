#include "core/routing/token_history.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(TokenHistory, BucketsTheLastWindowAndForgetsOlder) {
  TokenHistory h(2, 10, 6);  // one minute of 10 s buckets
  h.Add(0, 100, 20, 5);
  h.Add(1, 0, 50, 15);
  h.Add(0, 10, 0, 18);
  auto w = h.Window(25);
  ASSERT_EQ(w.size(), 6u);
  EXPECT_EQ(w.back().start_s, 20);
  EXPECT_EQ(w[3].start_s, 0);
  EXPECT_EQ(w[3].cached[0], 100);
  EXPECT_EQ(w[4].cached[0], 10);
  EXPECT_EQ(w[4].computed[1], 50);
  h.Add(1, 7, 7, 75);  // bucket 7 reuses bucket 1's slot
  w = h.Window(75);
  EXPECT_EQ(w.front().start_s, 20);
  for (const auto& b : w) {
    if (b.start_s != 70) {
      EXPECT_EQ(b.computed[1], 0) << b.start_s;  // 15 s fell out of the window
    }
  }
  EXPECT_EQ(w.back().cached[1], 7);
}

// A restarted gateway's clock starts at 0 again; the hour before comes from its state file, at
// times before 0.
TEST(TokenHistory, KeepsTimesBeforeZero) {
  TokenHistory h(1, 10, 6);
  h.Add(0, 5, 1, -25);  // bucket [-30, -20)
  h.Add(0, 7, 2, 3);
  EXPECT_EQ(h.version(), 2u);
  const auto w = h.Window(5);
  ASSERT_EQ(w.size(), 6u);
  EXPECT_EQ(w.front().start_s, -50);
  EXPECT_EQ(w[2].start_s, -30);
  EXPECT_EQ(w[2].cached[0], 5);
  EXPECT_EQ(w[2].computed[0], 1);
  EXPECT_EQ(w.back().cached[0], 7);
  EXPECT_EQ(w[1].cached[0] + w[3].cached[0] + w[4].cached[0], 0);
}

}  // namespace
}  // namespace warden
