#include "gateway/adapter_update.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace warden {
namespace {

namespace json = boost::json;

std::string MessageOfError(const std::string& body) {
  return std::string(json::parse(body).at("error").at("message").as_string());
}

TEST(AdapterUpdate, ReadsTheAdaptersName) {
  EXPECT_EQ(AdapterNameOf(R"({"lora_name":"sql","lora_path":"/a/sql"})"), "sql");
  EXPECT_EQ(AdapterNameOf(R"({"lora_path":"/a/sql"})"), "");
  EXPECT_EQ(AdapterNameOf(R"({"lora_name":7})"), "");
  EXPECT_EQ(AdapterNameOf("not json"), "");
  EXPECT_TRUE(IsAdapterUpdatePath("/v1/load_lora_adapter"));
  EXPECT_TRUE(IsAdapterUpdatePath("/v1/unload_lora_adapter"));
  EXPECT_FALSE(IsAdapterUpdatePath("/v1/models"));
  EXPECT_TRUE(IsAdapterLoadPath("/v1/load_lora_adapter"));
  EXPECT_FALSE(IsAdapterLoadPath("/v1/unload_lora_adapter"));
}

TEST(AdapterUpdate, EveryServerDoneIsASuccessLine) {
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", "sql", true, {{"http://a", 200, "Success", true}, {"http://b", 200, "Success", true}});
  EXPECT_EQ(a.status, 200);
  EXPECT_TRUE(a.text);
  EXPECT_EQ(a.body, "Success: LoRA adapter 'sql' added successfully on 2 servers of model 'm'.");
}

// A server that already had the adapter refuses the load (400), yet has it: done. So a load sent
// again after a partial failure completes it.
TEST(AdapterUpdate, AServerThatAlreadyHadItCountsAsDone) {
  const std::string already =
      R"({"object":"error","message":"The lora adapter 'sql' has already been loaded.","type":"InvalidUserInput","code":400})";
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", "sql", true, {{"http://a", 400, already, true}, {"http://b", 200, "Success", true}});
  EXPECT_EQ(a.status, 200);
  // Unloading: one that did not have it is done too.
  const AdapterUpdateAnswer u = SummariseAdapterUpdate(
      "m", "sql", false, {{"http://a", 404, "{}", false}, {"http://b", 200, "Success", false}});
  EXPECT_EQ(u.status, 200);
  EXPECT_EQ(u.body, "Success: LoRA adapter 'sql' removed successfully on 2 servers of model 'm'.");
}

TEST(AdapterUpdate, NoServerDonePassesTheFirstFailureOn) {
  const std::string refused =
      R"({"error":{"message":"No adapter found for /x","type":"NotFoundError","code":404}})";
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", "sql", true,
      {{"http://a", 404, refused, false}, {"http://b", 404, refused, std::nullopt}});
  EXPECT_EQ(a.status, 404);
  EXPECT_EQ(a.body, refused);
  EXPECT_FALSE(a.text);
}

TEST(AdapterUpdate, ServersWithoutTheEndpointAreExplained) {
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", "sql", true, {{"http://a", 404, R"({"detail":"Not Found"})", std::nullopt}});
  EXPECT_EQ(a.status, 404);
  EXPECT_NE(MessageOfError(a.body).find("VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"),
            std::string::npos);
}

TEST(AdapterUpdate, SomeServersDoneIsABadGatewayNamingTheOthers) {
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", "sql", true,
      {{"http://a", 200, "Success", true},
       {"http://b", 400, R"({"error":{"message":"out of LoRA slots"}})", false},
       {"http://c", 0, "connection refused", std::nullopt}});
  EXPECT_EQ(a.status, 502);
  const std::string message = MessageOfError(a.body);
  EXPECT_NE(message.find("added on 1 of 3 servers of model 'm'"), std::string::npos) << message;
  EXPECT_NE(message.find("http://b: 400 out of LoRA slots"), std::string::npos) << message;
  EXPECT_NE(message.find("http://c: no answer (connection refused)"), std::string::npos) << message;
  EXPECT_EQ(message.find("http://a"), std::string::npos) << message;
}

// Unread afterwards (its /v1/models did not answer): its own answer's status decides.
TEST(AdapterUpdate, AnUnreadServerIsJudgedByItsAnswer) {
  EXPECT_EQ(
      SummariseAdapterUpdate("m", "sql", true, {{"http://a", 200, "ok", std::nullopt}}).status,
      200);
  EXPECT_EQ(
      SummariseAdapterUpdate("m", "sql", true, {{"http://a", 0, "timed out", std::nullopt}}).status,
      502);
}

TEST(LoadedAdapters, RemembersWhatWasLoadedUntilUnloaded) {
  LoadedAdapters loaded;
  loaded.Loaded("sql", R"({"lora_name":"sql","lora_path":"/a/sql"})");
  loaded.Loaded("chat", R"({"lora_name":"chat","lora_path":"/a/chat"})");
  loaded.Loaded("sql",
                R"({"lora_name":"sql","lora_path":"/a/sql-v2"})");  // loaded again: the newer
  std::vector<LoadedAdapters::Adapter> missing = loaded.MissingFrom({{"m"}, {"chat", true}});
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].name, "sql");
  EXPECT_EQ(missing[0].request_body, R"({"lora_name":"sql","lora_path":"/a/sql-v2"})");
  loaded.Unloaded("sql");
  EXPECT_TRUE(loaded.MissingFrom({{"m"}, {"chat", true}}).empty());
  EXPECT_EQ(loaded.MissingFrom({{"m"}}).size(), 1u);
}

}  // namespace
}  // namespace warden
