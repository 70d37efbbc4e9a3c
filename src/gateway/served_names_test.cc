#include "gateway/served_names.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(ServedNames, JoinsWhatEachServerListsWithoutTheModelsOwnName) {
  ServedNames names("qwen3", 2);
  EXPECT_FALSE(names.Contains("sql"));
  names.Set(0, {{"qwen3"}, {"sql", true}, {"Qwen/Qwen3-4B"}});
  names.Set(1, {{"qwen3"}, {"chat", true}, {"sql", true}});
  EXPECT_TRUE(names.Contains("sql"));
  EXPECT_TRUE(names.Contains("chat"));
  EXPECT_FALSE(names.Contains("qwen3"));  // the configured name is the model's own
  EXPECT_EQ(names.All(), (std::vector<std::string>{"Qwen/Qwen3-4B", "chat", "sql"}));
  // An adapter unloaded from one server: still served by the other until it goes there too.
  names.Set(0, {{"qwen3"}});
  EXPECT_EQ(names.All(), (std::vector<std::string>{"chat", "sql"}));
  names.Set(1, {});
  EXPECT_TRUE(names.All().empty());
  names.Set(5, {{"out of range"}});  // no such server: nothing changes
  EXPECT_FALSE(names.Contains("out of range"));
}

// An adapter's prompts are cached apart from the model's; another name of the model is the model.
TEST(ServedNames, TellsAdaptersFromOtherNamesOfTheModel) {
  ServedNames names("qwen3", 2);
  names.Set(0, {{"qwen3"}, {"Qwen/Qwen3-4B"}, {"sql", true}});
  names.Set(1, {{"qwen3"}, {"sql", false}});  // one server's listing without the parent
  EXPECT_TRUE(names.IsAdapter("sql"));
  EXPECT_FALSE(names.IsAdapter("Qwen/Qwen3-4B"));
  EXPECT_FALSE(names.IsAdapter("unknown"));
}

// A request for an adapter only some servers have loaded goes to those: the others answer 404.
TEST(ServedNames, NamesTheServersWithoutAName) {
  ServedNames names("qwen3", 3);
  names.Set(0, {{"qwen3"}});
  names.Set(1, {{"qwen3"}, {"sql", true}});
  names.Set(2, {{"qwen3"}});
  EXPECT_EQ(names.ServersWithout("sql"), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(names.ServersWith("sql"), (std::vector<size_t>{1}));
  EXPECT_TRUE(names.ServersWith("unknown").empty());
  EXPECT_TRUE(names.ServersWithout("unknown").empty());  // nowhere: nothing to go by
  for (size_t s : {0, 2}) names.Set(s, {{"qwen3"}, {"sql", true}});
  EXPECT_TRUE(names.ServersWithout("sql").empty());  // everywhere
}

// An adapter's root is the path its server loaded it from; the model's other names have none.
TEST(ServedNames, AnAdaptersRootIsWhereItsServerLoadedItFrom) {
  ServedNames names("qwen3", 2);
  names.Set(0, NamesOf({{"qwen3", "/models/qwen3"}, {"Qwen/Qwen3-4B", "/models/qwen3"}}));
  names.Set(1, NamesOf({{"qwen3", "/models/qwen3"},
                        {"sql", "/adapters/sql", 0, /*has_parent=*/true},
                        {"Qwen/Qwen3-4B", "/models/qwen3"}}));
  EXPECT_EQ(names.RootOf("sql"), "/adapters/sql");
  EXPECT_EQ(names.RootOf("Qwen/Qwen3-4B"), "");
  EXPECT_EQ(names.RootOf("unknown"), "");
}

// A /v1/models list as vLLM writes one (a model, an adapter with its parent), and as `warden sim`
// does, whose model card says what simulates it.
TEST(ReadModelList, ReadsEachCardsIdRootLengthParentAndSimulation) {
  const auto listed = ReadModelList(
      R"({"object":"list","data":[{"id":"m","root":"/models/m","parent":null,"max_model_len":32768,)"
      R"("warden_simulated":"warden sim, profile tiny, time x1"},)"
      R"({"id":"sql","root":"/adapters/sql","parent":"m","max_model_len":null}]})");
  ASSERT_TRUE(listed.has_value());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].max_model_len, 32768);
  EXPECT_FALSE((*listed)[0].has_parent);
  EXPECT_EQ((*listed)[0].simulated, "warden sim, profile tiny, time x1");
  EXPECT_EQ((*listed)[1].root, "/adapters/sql");
  EXPECT_TRUE((*listed)[1].has_parent);
  EXPECT_EQ((*listed)[1].simulated, "");
  EXPECT_FALSE(ReadModelList("<html>").has_value());
}

}  // namespace
}  // namespace warden
