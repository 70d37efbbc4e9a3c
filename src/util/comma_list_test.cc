#include "util/comma_list.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

using Items = std::vector<std::string>;

TEST(CommaList, SplitsItemsInOrder) {
  EXPECT_EQ(SplitCommaList("4,8,16").items, (Items{"4", "8", "16"}));
  EXPECT_EQ(SplitCommaList("warden").items, (Items{"warden"}));
  EXPECT_EQ(SplitCommaList("4,8").error, "");
}

// CLI11 drops empty items, so "--stages 4,,8" ran stages 4 and 8 without a word.
TEST(CommaList, AnEmptyItemIsAnErrorNotDropped) {
  for (std::string_view text : {"4,,8", "4,", ",4", ","}) {
    const CommaList list = SplitCommaList(text);
    EXPECT_TRUE(list.items.empty()) << text;
    EXPECT_EQ(list.error, "an empty item in '" + std::string(text) + "'");
  }
  EXPECT_EQ(SplitCommaList("").error, "an empty list");
}

}  // namespace
}  // namespace warden
