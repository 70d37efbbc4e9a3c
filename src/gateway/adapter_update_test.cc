#include "gateway/adapter_update.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace warden {
namespace {

namespace json = boost::json;

std::string MessageOfError(const std::string& body) {
  return std::string(json::parse(body).at("error").at("message").as_string());
}

const AdapterRequest kSql{"sql", "/a/sql"};
const std::string kAlready =
    R"({"object":"error","message":"The lora adapter 'sql' has already been loaded.","type":"InvalidUserInput","code":400})";
const std::string kNotFound =
    R"({"error":{"message":"The lora adapter 'sql' cannot be found.","type":"NotFoundError","code":404}})";

// Read as vLLM's server reads it (it decodes escapes) and as proxies do (slashes, dot segments):
// no spelling of the path slips past the admin token.
TEST(AdapterUpdate, KnowsThePathsHoweverSpelt) {
  EXPECT_EQ(ClassifyAdapterPath("/v1/load_lora_adapter"), AdapterPath::kLoad);
  EXPECT_EQ(ClassifyAdapterPath("/v1/unload_lora_adapter"), AdapterPath::kUnload);
  EXPECT_EQ(ClassifyAdapterPath("/v1/load%5Flora_adapter"), AdapterPath::kLoad);
  EXPECT_EQ(ClassifyAdapterPath("/v1/unload%5flora_adapter"), AdapterPath::kUnload);
  EXPECT_EQ(ClassifyAdapterPath("//v1/load_lora_adapter"), AdapterPath::kLoad);
  EXPECT_EQ(ClassifyAdapterPath("/v1/./load_lora_adapter"), AdapterPath::kLoad);
  EXPECT_EQ(ClassifyAdapterPath("/v1/load_lora_adapter/"), AdapterPath::kLoad);
  EXPECT_EQ(ClassifyAdapterPath("/adapters"), AdapterPath::kSageMaker);
  EXPECT_EQ(ClassifyAdapterPath("/adapters/sql"), AdapterPath::kSageMaker);
  EXPECT_EQ(ClassifyAdapterPath("/%61dapters/sql"), AdapterPath::kSageMaker);
  EXPECT_EQ(ClassifyAdapterPath("/v1/models"), AdapterPath::kNone);
  EXPECT_EQ(ClassifyAdapterPath("/v1/chat/completions"), AdapterPath::kNone);
  EXPECT_EQ(ClassifyAdapterPath("/v1/load_lora_adapters"), AdapterPath::kNone);
  // Decoded once, as vLLM's server does: "%255F" is "%5F" there, no route.
  EXPECT_EQ(ClassifyAdapterPath("/v1/load%255Flora_adapter"), AdapterPath::kNone);
}

TEST(AdapterUpdate, EveryServerDoneIsASuccessLine) {
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", kSql, true,
      {{"http://a", 200, "Success", true, ""}, {"http://b", 200, "Success", true, ""}});
  EXPECT_EQ(a.status, 200);
  EXPECT_TRUE(a.text);
  EXPECT_TRUE(a.took_effect);
  EXPECT_EQ(a.body, "Success: LoRA adapter 'sql' added successfully on 2 servers of model 'm'.");
}

// Sent again after a partial failure: the servers that have it from the same path refuse it, and
// count as done; the rest do it.
TEST(AdapterUpdate, AServerThatAlreadyHasItCountsAsDone) {
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", kSql, true,
      {{"http://a", 400, kAlready, true, "/a/sql"}, {"http://b", 200, "Success", true, "/a/sql"}});
  EXPECT_EQ(a.status, 200);
  // Unloading: one that did not have it is done too.
  const AdapterUpdateAnswer u = SummariseAdapterUpdate(
      "m", kSql, false,
      {{"http://a", 404, kNotFound, false, ""}, {"http://b", 200, "Success", false, ""}});
  EXPECT_EQ(u.status, 200);
  EXPECT_EQ(u.body, "Success: LoRA adapter 'sql' removed successfully on 2 servers of model 'm'.");
}

// Nothing to do anywhere: vLLM's own answer, so that a name mistyped in an unload is not a success.
TEST(AdapterUpdate, NothingToDoAnywhereIsVllmsAnswer) {
  const AdapterUpdateAnswer u = SummariseAdapterUpdate(
      "m", kSql, false,
      {{"http://a", 404, kNotFound, false, ""}, {"http://b", 404, kNotFound, false, ""}});
  EXPECT_EQ(u.status, 404);
  EXPECT_EQ(u.body, kNotFound);
  EXPECT_TRUE(u.took_effect);  // (it is gone: nothing to remember)
  const AdapterUpdateAnswer l =
      SummariseAdapterUpdate("m", kSql, true, {{"http://a", 400, kAlready, true, "/a/sql"}});
  EXPECT_EQ(l.status, 400);
}

// A server that has an adapter of that name from another path, or refuses an in-place reload,
// did not do what was asked, though it lists the name.
TEST(AdapterUpdate, ListedFromAnotherPathOrNotReloadedIsAFailure) {
  const AdapterUpdateAnswer other = SummariseAdapterUpdate(
      "m", {"sql", "/b/sql"}, true,
      {{"http://a", 400, kAlready, true, "/a/sql"}, {"http://b", 400, kAlready, true, "/a/sql"}});
  EXPECT_EQ(other.status, 400);
  EXPECT_FALSE(other.took_effect);
  const AdapterUpdateAnswer inplace = SummariseAdapterUpdate(
      "m", {"sql", "/a/sql", true}, true,
      {{"http://a", 200, "Success", true, "/a/sql"},
       {"http://b", 500, R"({"error":{"message":"reload failed"}})", true, "/a/sql"}});
  EXPECT_EQ(inplace.status, 502);
  EXPECT_TRUE(inplace.took_effect);
}

TEST(AdapterUpdate, NoServerDonePassesTheFirstFailureOn) {
  const std::string refused =
      R"({"error":{"message":"No adapter found for /x","type":"NotFoundError","code":404}})";
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", kSql, true,
      {{"http://a", 404, refused, false, ""}, {"http://b", 404, refused, std::nullopt, ""}});
  EXPECT_EQ(a.status, 404);
  EXPECT_EQ(a.body, refused);
  EXPECT_FALSE(a.text);
  EXPECT_FALSE(a.took_effect);
}

TEST(AdapterUpdate, ServersWithoutTheEndpointAreExplained) {
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", kSql, true, {{"http://a", 404, R"({"detail":"Not Found"})", std::nullopt, ""}});
  EXPECT_EQ(a.status, 404);
  EXPECT_NE(MessageOfError(a.body).find("VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"),
            std::string::npos);
  // No model is missing: the code says nothing of one.
  EXPECT_EQ(a.body.find("model_not_found"), std::string::npos) << a.body;
  EXPECT_NE(a.body.find(R"("code":null)"), std::string::npos) << a.body;
  // The same among servers that have it.
  const AdapterUpdateAnswer some =
      SummariseAdapterUpdate("m", kSql, true,
                             {{"http://a", 200, "Success", true, ""},
                              {"http://b", 404, R"({"detail":"Not Found"})", std::nullopt, ""}});
  EXPECT_EQ(some.status, 502);
  EXPECT_NE(
      MessageOfError(some.body).find("on the others it failed: http://b has no such endpoint"),
      std::string::npos);
  // No try again can pass that: none is offered.
  EXPECT_EQ(MessageOfError(some.body).find("Send the request again"), std::string::npos);
  // A server without the endpoint that has the adapter from its start (--lora-modules), from the
  // same path, needs nothing.
  const AdapterUpdateAnswer has_it =
      SummariseAdapterUpdate("m", kSql, true,
                             {{"http://a", 200, "Success", true, "/a/sql"},
                              {"http://b", 404, R"({"detail":"Not Found"})", true, "/a/sql"}});
  EXPECT_EQ(has_it.status, 200) << has_it.body;
  // Nothing to do anywhere, on servers without the endpoint: vLLM's answer, not their bare 404.
  const AdapterUpdateAnswer gone = SummariseAdapterUpdate(
      "m", kSql, false, {{"http://a", 404, R"({"detail":"Not Found"})", false, ""}});
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(MessageOfError(gone.body), "The lora adapter 'sql' cannot be found.");
  const AdapterUpdateAnswer loaded = SummariseAdapterUpdate(
      "m", kSql, true, {{"http://a", 404, R"({"detail":"Not Found"})", true, "/a/sql"}});
  EXPECT_EQ(loaded.status, 400);
  EXPECT_NE(MessageOfError(loaded.body).find("has already been loaded"), std::string::npos);
}

// A server that has the adapter from another path already: the partial answer says where from,
// and how to replace it.
TEST(AdapterUpdate, AnAdapterLoadedFromAnotherPathIsSaidWithTheWayToReplaceIt) {
  const AdapterUpdateAnswer a =
      SummariseAdapterUpdate("m", kSql, true,
                             {{"http://a", 200, "Success", true, "/a/sql"},
                              {"http://b", 400, kAlready, true, "/old/sql"}});
  EXPECT_EQ(a.status, 502);
  EXPECT_NE(MessageOfError(a.body).find(
                "http://b: 400 The lora adapter 'sql' has already been loaded. (from /old/sql; "
                "\"load_inplace\": true replaces it)"),
            std::string::npos)
      << a.body;
}

// The replica's refusal of the gateway's key is the gateway's failure, not the client's.
TEST(AdapterUpdate, AReplicaRefusingTheGatewaysKeyIsABadGateway) {
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", kSql, true, {{"http://a", 401, R"({"error":"Unauthorized"})", std::nullopt, ""}});
  EXPECT_EQ(a.status, 502);
  EXPECT_NE(MessageOfError(a.body).find("replica_api_key"), std::string::npos);
}

TEST(AdapterUpdate, SomeServersDoneIsABadGatewayNamingTheOthers) {
  const AdapterUpdateAnswer a = SummariseAdapterUpdate(
      "m", kSql, true,
      {{"http://a", 200, "Success", true, ""},
       {"http://b", 400, R"({"error":{"message":"out of LoRA slots"}})", false, ""},
       {"http://c", 0, "connection refused", std::nullopt, ""}});
  EXPECT_EQ(a.status, 502);
  EXPECT_TRUE(a.took_effect);
  const std::string message = MessageOfError(a.body);
  EXPECT_NE(message.find("added on 1 of 3 servers of model 'm'"), std::string::npos) << message;
  EXPECT_NE(message.find("http://b: 400 out of LoRA slots"), std::string::npos) << message;
  EXPECT_NE(message.find("http://c: no answer (connection refused)"), std::string::npos) << message;
  EXPECT_EQ(message.find("http://a"), std::string::npos) << message;
}

// A server down is not sent the request: the gateway sends it when the server is back, so the
// others doing it is a success that names it.
TEST(AdapterUpdate, AServerDownIsDoneLaterNotAFailure) {
  ServerAdapterResult down{"http://b", 0, "its health checks fail: not sent"};
  down.deferred = true;
  const AdapterUpdateAnswer a =
      SummariseAdapterUpdate("m", kSql, false, {{"http://a", 200, "Success", false, ""}, down});
  EXPECT_EQ(a.status, 200);
  EXPECT_TRUE(a.took_effect);
  EXPECT_EQ(a.body,
            "Success: LoRA adapter 'sql' removed successfully on 1 server of model 'm'. Down, so "
            "not yet: http://b; the gateway sends it there when it is back.");
  // Every server reached already as asked: vLLM's answer, the one down aside.
  const AdapterUpdateAnswer already =
      SummariseAdapterUpdate("m", kSql, true, {down, {"http://a", 400, kAlready, true, "/a/sql"}});
  EXPECT_EQ(already.status, 400);
  EXPECT_EQ(already.body, kAlready);
  // With a real failure beside it: a bad gateway that names both.
  const AdapterUpdateAnswer partial = SummariseAdapterUpdate(
      "m", kSql, true,
      {{"http://a", 200, "Success", true, ""}, {"http://c", 500, "boom", false, ""}, down});
  EXPECT_EQ(partial.status, 502);
  EXPECT_NE(MessageOfError(partial.body).find("http://c: 500 boom; down, sent when back: http://b"),
            std::string::npos)
      << partial.body;
  // Nothing reached: nothing will follow, so it is a failure.
  const AdapterUpdateAnswer none = SummariseAdapterUpdate("m", kSql, true, {down});
  EXPECT_EQ(none.status, 502);
  EXPECT_FALSE(none.took_effect);
}

// An update that missed a server is kept for it until a read of its names shows whether it is
// still due; the next update of the name through the gateway replaces it.
TEST(LoadedAdapters, KeepsAnUpdateForAServerItMissed) {
  using Kept = LoadedAdapters::KeptUpdate;
  LoadedAdapters adapters;
  adapters.KeepForLater({"sql", 1, false});
  adapters.KeepForLater({"sql", 1, false});
  adapters.KeepForLater({"chat", 1, false});
  adapters.KeepForLater({"code", 1, true});
  EXPECT_TRUE(adapters.UpdatesDue(0, {{"m"}, {"sql", true}}).empty());  // another server
  EXPECT_EQ(adapters.UpdatesDue(1, {{"m"}, {"sql", true}, {"code", true}}),
            (std::vector<Kept>{{"sql", 1, false}, {"code", 1, true}}));
  // "chat" was not listed: that server lost it (a restart), so nothing is due for it any more.
  EXPECT_FALSE(adapters.Kept({"chat", 1, false}));
  EXPECT_TRUE(adapters.Kept({"sql", 1, false}));
  adapters.Done({"sql", 1, false});
  EXPECT_EQ(adapters.UpdatesDue(1, {{"m"}, {"sql", true}, {"code", true}}),
            (std::vector<Kept>{{"code", 1, true}}));
  // A reload in place kept for a server that lists nothing of it: loaded anyway (MissingFrom).
  EXPECT_TRUE(adapters.UpdatesDue(1, {{"m"}}).empty());
  const uint64_t version = adapters.version();
  adapters.KeepForLater({"sql", 2, false});
  EXPECT_GT(adapters.version(), version);  // saved in the state file
  adapters.Loaded("sql", R"({"lora_name":"sql","lora_path":"/a/sql"})", 10);  // a newer update
  EXPECT_FALSE(adapters.Kept({"sql", 2, false}));
  adapters.KeepForLater({"sql", 2, true});
  int64_t at = 0;
  EXPECT_TRUE(adapters.Take("sql", 11, &at));  // an unload replaces a kept reload
  EXPECT_TRUE(adapters.AllKept().empty());
}

// Which servers missed the update, for the updates kept for them.
TEST(AdapterUpdate, SaysWhichServersMissedIt) {
  ServerAdapterResult down{"http://c", 0, "its health checks fail: not sent"};
  down.deferred = true;
  const AdapterUpdateAnswer a = SummariseAdapterUpdate("m", kSql, false,
                                                       {{"http://a", 200, "Success", false, ""},
                                                        {"http://b", 500, "boom", true, ""},
                                                        down,
                                                        {"http://d", 404, kNotFound, false, ""}});
  EXPECT_EQ(a.done, 1u);
  EXPECT_EQ(a.missed, (std::vector<size_t>{1, 2}));
  // No server at all (a model always has one; the answer is still an answer).
  EXPECT_EQ(SummariseAdapterUpdate("m", kSql, true, {}).status, 502);
}

TEST(LoadedAdapters, RemembersWhatWasLoadedUntilUnloaded) {
  LoadedAdapters loaded;
  loaded.Loaded("sql", R"({"lora_name":"sql","lora_path":"/a/sql"})", 1);
  loaded.Loaded("chat", R"({"lora_name":"chat","lora_path":"/a/chat"})", 2);
  loaded.Loaded("sql", R"({"lora_name":"sql","lora_path":"/a/sql-v2"})", 3);  // the newer
  std::vector<LoadedAdapters::Adapter> missing = loaded.MissingFrom({{"m"}, {"chat", true}});
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].name, "sql");
  EXPECT_EQ(missing[0].request_body, R"({"lora_name":"sql","lora_path":"/a/sql-v2"})");
  // An unload that took effect nowhere gives back what it took, just after its own time.
  int64_t taken_at = 0;
  std::optional<LoadedAdapters::Adapter> taken = loaded.Take("chat", 4, &taken_at);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken_at, 4);
  EXPECT_FALSE(loaded.IsLoaded("chat"));
  loaded.UndoTake("chat", taken, taken_at);
  EXPECT_TRUE(loaded.Has(*taken));
  // ... unless a newer load or unload came meanwhile (from a peer).
  taken = loaded.Take("chat", 6, &taken_at);
  ASSERT_TRUE(loaded.Merge({"chat", R"({"lora_name":"chat","lora_path":"/a/chat-v2"})", 7}, 2));
  loaded.UndoTake("chat", taken, taken_at);
  EXPECT_TRUE(loaded.Has({"chat", R"({"lora_name":"chat","lora_path":"/a/chat-v2"})"}));
  EXPECT_FALSE(loaded.Has(*taken));
  // An unload of a name never loaded, that took effect nowhere, leaves nothing to share.
  loaded.Take("typo", 9, &taken_at);
  loaded.UndoTake("typo", std::nullopt, taken_at);
  for (const LoadedAdapters::Record& r : loaded.Records()) EXPECT_NE(r.name, "typo");
  EXPECT_TRUE(loaded.Take("sql", 11, &taken_at));
  EXPECT_TRUE(loaded.MissingFrom({{"m"}, {"chat", true}}).empty());
  EXPECT_EQ(loaded.MissingFrom({{"m"}}).size(), 1u);
}

// Peers share their loads and unloads: for each name the most recent wins, whoever made it.
TEST(LoadedAdapters, TakesAPeersNewerLoadsAndUnloads) {
  LoadedAdapters here;
  here.Loaded("sql", R"({"lora_name":"sql","lora_path":"/a/sql"})", 100);
  EXPECT_FALSE(here.Merge({"sql", "", 90, false}, 2));  // an older unload
  EXPECT_EQ(here.All().size(), 1u);
  EXPECT_TRUE(here.Merge({"sql", "", 110, false}, 2));  // a newer one
  EXPECT_TRUE(here.All().empty());
  // ... is kept for every server here too (one a cut-off peer loaded meanwhile loses it).
  EXPECT_EQ(here.AllKept(),
            (std::vector<LoadedAdapters::KeptUpdate>{{"sql", 0, false}, {"sql", 1, false}}));
  EXPECT_FALSE(here.Merge({"sql", R"({"lora_name":"sql","lora_path":"/a/sql"})", 105}, 2));
  EXPECT_TRUE(here.Merge({"chat", R"({"lora_name":"chat","lora_path":"/a/chat"})", 120}, 2));
  EXPECT_FALSE(here.Merge({"chat", R"({"lora_name":"chat","lora_path":"/a/chat"})", 120}, 2));
  const std::vector<LoadedAdapters::Record> records = here.Records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].name, "chat");
  EXPECT_TRUE(records[0].loaded);
  EXPECT_EQ(records[1].name, "sql");
  EXPECT_FALSE(records[1].loaded);
  EXPECT_EQ(records[1].at_us, 110);
  // A change made here is stamped after what is known, even from a peer whose clock runs ahead.
  ASSERT_TRUE(here.Merge({"code", R"({"lora_name":"code","lora_path":"/a/code"})", 5000}, 2));
  int64_t taken_at = 0;
  here.Take("code", 200, &taken_at);
  EXPECT_EQ(taken_at, 5001);
}

// Only the most recent unloads are kept, the same ones on every gateway (by time); anything not
// newer than the ones forgotten is refused, so that a peer that missed an unload cannot bring the
// load back.
TEST(LoadedAdapters, ForgetsTheOldestUnloadsAndRefusesWhatIsOlder) {
  LoadedAdapters here;
  int64_t taken_at = 0;
  for (size_t i = 0; i < LoadedAdapters::kKeptUnloads; ++i)
    here.Take("a" + std::to_string(i), 1000 + 2 * i, &taken_at);
  EXPECT_TRUE(here.Merge({"old", "", 999, false}, 0));  // the oldest now...
  EXPECT_EQ(here.forgotten_before_us(), 999);           // ... and forgotten at once
  EXPECT_EQ(here.Records().size(), LoadedAdapters::kKeptUnloads);
  EXPECT_FALSE(here.Merge({"old", R"({"lora_name":"old"})", 998}, 0));
  EXPECT_FALSE(here.Merge({"other", R"({"lora_name":"other"})", 999}, 0));
  EXPECT_TRUE(here.Merge({"other", R"({"lora_name":"other"})", 1000}, 0));
  // A message crossing one that forgot another record does not make them churn: it is older than
  // what both forgot, or it is one both keep.
  EXPECT_FALSE(here.Merge({"a0", "", 1000, false}, 0));
}

}  // namespace
}  // namespace warden
