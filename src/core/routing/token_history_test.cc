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
    if (b.start_s != 70) EXPECT_EQ(b.computed[1], 0) << b.start_s;  // 15 s fell out of the window
  }
  EXPECT_EQ(w.back().cached[1], 7);
}

}  // namespace
}  // namespace warden
