#include "util/on_off.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(OnOff, TakesTheSwitchesYamlKnowsInAnyCase) {
  for (const char* yes : {"on", "ON", "On", "true", "True", "TRUE", "yes", "Yes", "YES"})
    EXPECT_EQ(ParseOnOff(yes), true) << yes;
  for (const char* no : {"off", "OFF", "false", "False", "no", "NO"})
    EXPECT_EQ(ParseOnOff(no), false) << no;
  for (const char* neither : {"", "1", "0", "onn", "o", "enabled", "tru", "yess", " on"})
    EXPECT_EQ(ParseOnOff(neither), std::nullopt) << neither;
}

}  // namespace
}  // namespace warden
