#include "util/steady_seconds.h"

#include <gtest/gtest.h>

#include <limits>

namespace warden {
namespace {

using std::chrono::milliseconds;

TEST(SteadySeconds, ConvertsFractionsAndBoundsWhatTheClockCannotHold) {
  EXPECT_EQ(SteadySeconds(1.5), milliseconds(1500));
  EXPECT_EQ(SteadySeconds(0.001), milliseconds(1));
  EXPECT_EQ(SteadySeconds(0), std::chrono::steady_clock::duration::zero());
  // A deadline already past waits for nothing, not a negative time.
  EXPECT_EQ(SteadySeconds(-2), std::chrono::steady_clock::duration::zero());
  // Never (an infinite wait) as about 95 years, not an overflow of the nanoseconds.
  const auto never = SteadySeconds(std::numeric_limits<double>::infinity());
  EXPECT_EQ(never, SteadySeconds(3.0e9));
  EXPECT_GT(never, std::chrono::hours(24 * 365 * 90));
}

}  // namespace
}  // namespace warden
