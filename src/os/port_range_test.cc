#include "os/port_range.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace warden {
namespace {

TEST(PortRange, ParsesTheKernelsText) {
  uint16_t low = 0, high = 0;
  ASSERT_TRUE(ParsePortRange("32768\t60999\n", &low, &high));
  EXPECT_EQ(low, 32768);
  EXPECT_EQ(high, 60999);
  EXPECT_FALSE(ParsePortRange("", &low, &high));
  EXPECT_FALSE(ParsePortRange("60999\t32768\n", &low, &high));
  EXPECT_FALSE(ParsePortRange("32768\n", &low, &high));
  EXPECT_FALSE(ParsePortRange("a b", &low, &high));
}

// A port in this machine's range gets the hint, one below it none.
TEST(PortRange, HintsOnlyForAPortInThisMachinesRange) {
  std::ifstream file("/proc/sys/net/ipv4/ip_local_port_range");
  std::stringstream text;
  text << file.rdbuf();
  uint16_t low, high;
  if (!ParsePortRange(text.str(), &low, &high)) GTEST_SKIP() << "no port range here";
  EXPECT_NE(EphemeralPortHint(high).find("range for outgoing connections"), std::string::npos);
  if (low > 1) {
    EXPECT_EQ(EphemeralPortHint(low - 1), "");
  }
}

}  // namespace
}  // namespace warden
