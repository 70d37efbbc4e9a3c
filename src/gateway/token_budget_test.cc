#include "gateway/token_budget.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(TokenBudget, WithoutARateEverythingGoes) {
  TokenBudget budget;
  budget.Charge(1e9, 0);
  EXPECT_TRUE(budget.Admits(0));
}

// A minute's worth at the start; a request that costs more than is left is let through (its cost
// is known only at its end) and the client then waits until the bucket is above zero again.
TEST(TokenBudget, ARequestGoesWhileTokensAreLeftAndTheDebtIsWaitedOut) {
  TokenBudget budget;
  budget.SetRate(6000, 0);  // 100 a second
  EXPECT_DOUBLE_EQ(budget.Left(0), 6000);
  EXPECT_TRUE(budget.Admits(0));
  budget.Charge(5000, 1);  // refilled 100 past the top: still 6000 before the charge
  EXPECT_DOUBLE_EQ(budget.Left(1), 1000);
  EXPECT_TRUE(budget.Admits(1));
  budget.Charge(3000, 1);
  EXPECT_DOUBLE_EQ(budget.Left(1), -2000);
  double retry = 0;
  EXPECT_FALSE(budget.Admits(1, &retry));
  EXPECT_NEAR(retry, 20.01, 1e-9);  // 2001 tokens at 100 a second
  EXPECT_FALSE(budget.Admits(20, &retry));
  EXPECT_NEAR(retry, 1.01, 1e-9);
  EXPECT_TRUE(budget.Admits(21.02));
  // It refills to a minute's worth, no more.
  EXPECT_DOUBLE_EQ(budget.Left(1000), 6000);
}

TEST(TokenBudget, ARateChangedKeepsWhatWasUsed) {
  TokenBudget budget;
  budget.SetRate(6000, 0);
  budget.Charge(7000, 0);
  budget.SetRate(12000, 0);  // owed still, now paid back twice as fast
  EXPECT_DOUBLE_EQ(budget.Left(0), -1000);
  EXPECT_DOUBLE_EQ(budget.Left(5), 0);
  budget.SetRate(600, 100);  // the bucket is cut to the smaller minute's worth
  EXPECT_DOUBLE_EQ(budget.Left(100), 600);
  budget.SetRate(0, 100);  // taken off
  EXPECT_TRUE(budget.Admits(100));
}

}  // namespace
}  // namespace warden
