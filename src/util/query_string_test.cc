#include "util/query_string.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

using Values = std::vector<std::string>;

TEST(QueryValues, ReadsEachValueOfANameInOrder) {
  EXPECT_EQ(QueryValues("/wake_up?tags=weights&x=1&tags=kv_cache", "tags"),
            (Values{"weights", "kv_cache"}));
  EXPECT_EQ(QueryValues("/sleep?level=2&mode=wait", "level"), Values{"2"});
  EXPECT_EQ(QueryValues("/sleep?flag&level", "level"), Values{""});
}

TEST(QueryValues, DecodesEscapesAndPlusAsForms) {
  EXPECT_EQ(QueryValues("/p?a%20b=c+d%2B", "a b"), Values{"c d+"});
  EXPECT_EQ(QueryValues("/p?a=%zz&a=ok", "a"), Values{"ok"});  // a broken escape is left out
}

TEST(QueryValues, NoQueryOrNoSuchNameGivesNothing) {
  EXPECT_TRUE(QueryValues("/sleep", "level").empty());
  EXPECT_TRUE(QueryValues("/sleep?", "level").empty());
  EXPECT_TRUE(QueryValues("/sleep?levels=1", "level").empty());
  EXPECT_TRUE(QueryValues("/sleep?x=1#level=2", "level").empty());
}

}  // namespace
}  // namespace warden
