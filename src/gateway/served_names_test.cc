#include "gateway/served_names.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(ServedNames, JoinsWhatEachServerListsWithoutTheModelsOwnName) {
  ServedNames names("qwen3", 2);
  EXPECT_FALSE(names.Contains("sql"));
  names.Set(0, {"qwen3", "sql", "Qwen/Qwen3-4B"});
  names.Set(1, {"qwen3", "chat", "sql"});
  EXPECT_TRUE(names.Contains("sql"));
  EXPECT_TRUE(names.Contains("chat"));
  EXPECT_FALSE(names.Contains("qwen3"));  // the configured name is the model's own
  EXPECT_EQ(names.All(), (std::vector<std::string>{"Qwen/Qwen3-4B", "chat", "sql"}));
  // An adapter unloaded from one server: still served by the other until it goes there too.
  names.Set(0, {"qwen3"});
  EXPECT_EQ(names.All(), (std::vector<std::string>{"chat", "sql"}));
  names.Set(1, {});
  EXPECT_TRUE(names.All().empty());
  names.Set(5, {"out of range"});  // no such server: nothing changes
  EXPECT_FALSE(names.Contains("out of range"));
}

}  // namespace
}  // namespace warden
