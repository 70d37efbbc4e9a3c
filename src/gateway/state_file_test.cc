#include "gateway/state_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace warden {
namespace {

namespace json = boost::json;

ModelSnapshot TwoConversations() {
  ModelSnapshot m;
  m.name = "qwen";
  m.replicas = {ReplicaId("http://a:8000", 0), ReplicaId("http://a:8000", 1)};
  m.conversations = {{"s1", 1, 1, 2.5, 12000, false, 1, 11500, /*retired=*/true, /*left=*/false,
                      /*thread_model=*/4'000'000'001u, /*thread_body_bytes=*/90'000,
                      /*end_idle_s=*/1.5},
                     {"s2", 0, 1, 40, 0, true, -1, 0, /*retired=*/false, /*left=*/true}};
  m.responses = {{"resp_1", "s1", 1}, {"resp_2", "s2", -1}};
  m.draining = {ReplicaId("http://a:8000", 1)};
  m.adapters = {{"sql", R"({"lora_name":"sql","lora_path":"/a/sql"})", 1700000000123456, true},
                {"old", "", 1600000000654321, false}};
  m.adapters_forgotten_before_us = 1500000000000001;
  m.kept_adapter_updates = {{"sql", "http://b:8000", true}, {"old", "http://c:8000", false}};
  m.patched_settings = {{"affinity", "off", "on"}, {"overflow_limit", "4", "auto"}};
  m.setting_changes = {{"affinity", 1700000000.25, true, "on"},
                       {"policy", 1700000001, false, "warden-seed"}};
  m.changes = {{1700000000.5, "affinity off", "admin API"},
               {1700000002, "replica 1 down: connection refused", "a request"}};
  m.history_bucket_s = 10;
  m.history_since = 1699999000;
  m.history = {{1699999500, {100, 0, 0}, {20, 5, 0}}, {1699999510, {0, 0, 7}, {1, 0, 0}}};
  m.history_gaps = {{1699999200, 1699999300}};
  return m;
}

TEST(StateFile, RoundTripsWithTheDowntimeCountedAsIdle) {
  const std::vector<ModelSnapshot> models = {TwoConversations()};
  const std::string text = StateToJson(models, 1000);
  std::vector<ModelSnapshot> back;
  std::string error;
  ASSERT_TRUE(ParseState(text, 1030, &back, &error)) << error;
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].name, "qwen");
  EXPECT_EQ(back[0].replicas[1], "http://a:8000#rank=1");
  ASSERT_EQ(back[0].conversations.size(), 2u);
  const auto& s1 = back[0].conversations[0];
  EXPECT_EQ(s1.key, "s1");
  EXPECT_EQ(s1.home, 1);
  EXPECT_DOUBLE_EQ(s1.idle_s, 32.5);  // 2.5 s idle at the save, then 30 s down
  EXPECT_EQ(s1.context_tokens, 12000);
  EXPECT_FALSE(s1.opened_only);
  EXPECT_EQ(s1.last_end_replica, 1);
  EXPECT_EQ(s1.last_prompt_tokens, 11500);
  EXPECT_TRUE(back[0].conversations[1].opened_only);
  EXPECT_EQ(back[0].conversations[1].last_end_replica, -1);  // none: older files say nothing
  EXPECT_EQ(back[0].conversations[1].last_prompt_tokens, 0);
  EXPECT_TRUE(s1.retired);
  EXPECT_FALSE(s1.left);
  EXPECT_FALSE(back[0].conversations[1].retired);
  EXPECT_TRUE(back[0].conversations[1].left);
  EXPECT_EQ(s1.thread_model, 4'000'000'001u);
  EXPECT_EQ(s1.thread_body_bytes, 90'000u);
  EXPECT_EQ(back[0].conversations[1].thread_model, 0u);  // none: older files say nothing
  EXPECT_DOUBLE_EQ(s1.end_idle_s, 31.5);                 // its turn's end, the downtime too
  EXPECT_EQ(back[0].conversations[1].end_idle_s, -1);
  EXPECT_EQ(back[0].responses, models[0].responses);
  EXPECT_EQ(back[0].draining, std::vector<std::string>{"http://a:8000#rank=1"});
  ASSERT_EQ(back[0].adapters.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back[0].adapters[i].name, models[0].adapters[i].name);
    EXPECT_EQ(back[0].adapters[i].request_body, models[0].adapters[i].request_body);
    EXPECT_EQ(back[0].adapters[i].at_us, models[0].adapters[i].at_us);
    EXPECT_EQ(back[0].adapters[i].loaded, models[0].adapters[i].loaded);
  }
  EXPECT_EQ(back[0].adapters_forgotten_before_us, 1500000000000001);
  ASSERT_EQ(back[0].kept_adapter_updates.size(), 2u);
  EXPECT_EQ(back[0].kept_adapter_updates[0].name, "sql");
  EXPECT_EQ(back[0].kept_adapter_updates[0].server, "http://b:8000");
  EXPECT_TRUE(back[0].kept_adapter_updates[0].load);
  EXPECT_EQ(back[0].kept_adapter_updates[1].name, "old");
  EXPECT_FALSE(back[0].kept_adapter_updates[1].load);
  EXPECT_EQ(back[0].patched_settings, models[0].patched_settings);
  EXPECT_EQ(back[0].setting_changes, models[0].setting_changes);
  EXPECT_EQ(back[0].changes, models[0].changes);
  EXPECT_EQ(back[0].history_bucket_s, 10);
  EXPECT_EQ(back[0].history_since, 1699999000);
  EXPECT_EQ(back[0].history_gaps, models[0].history_gaps);
  EXPECT_EQ(back[0].saved_at, 1000);
  ASSERT_EQ(back[0].history.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back[0].history[i].start_unix, models[0].history[i].start_unix);
    EXPECT_EQ(back[0].history[i].cached, models[0].history[i].cached);
    EXPECT_EQ(back[0].history[i].computed, models[0].history[i].computed);
  }
}

// The chart's buckets that do not fit (a count per replica and one for the engine's balancer,
// none negative) are skipped one by one; a file of an earlier version has none.
TEST(StateFile, MalformedChartBucketsAreSkipped) {
  const std::string text = R"({"warden_state":1,"saved_at":1000,"models":[{"name":"m",
      "replicas":["http://a"],"conversations":[],"history":{"bucket_s":10,"since":900,
      "buckets":[[950,[1,2],[3,4]],[960,[1],[1]],[970,[-1,0],[0,0]],["x",[0,0],[0,0]],
                 [980,[5,0],[0,0],1],[990,[9223372036854775807,0],[0,0]]]}},
      {"name":"old","replicas":[],"conversations":[]}]})";
  std::vector<ModelSnapshot> back;
  std::string error;
  StateDamage damage;
  ASSERT_TRUE(ParseState(text, 1000, &back, &error, &damage)) << error;
  ASSERT_EQ(back.size(), 2u);
  ASSERT_EQ(back[0].history.size(), 1u);
  EXPECT_EQ(back[0].history[0].start_unix, 950);
  EXPECT_EQ(back[0].history[0].computed, (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(damage.any());
  EXPECT_EQ(back[1].history_bucket_s, 0);
  EXPECT_TRUE(back[1].history.empty());
}

// A file of an earlier version has no replica beside its responses: they are not known.
TEST(StateFile, ResponsesWithoutTheirReplicasAreStillRead) {
  const std::string text = StateToJson(std::vector<ModelSnapshot>{TwoConversations()}, 1000);
  json::value v = json::parse(text);
  v.at("models").at(0).as_object().erase("response_replicas");
  std::vector<ModelSnapshot> back;
  std::string error;
  ASSERT_TRUE(ParseState(json::serialize(v), 1030, &back, &error)) << error;
  EXPECT_EQ(back[0].responses,
            (std::vector<StoredResponse>{{"resp_1", "s1", -1}, {"resp_2", "s2", -1}}));
}

TEST(StateFile, HomesFollowTheReplicasByNameNotPosition) {
  const ModelSnapshot saved = TwoConversations();
  // rank 1 is now the first replica, rank 0 is gone, a new server came.
  const std::vector<std::string> now = {ReplicaId("http://a:8000", 1), "http://b:8000"};
  size_t dropped;
  const auto mapped = MapToReplicas(saved, now, &dropped);
  EXPECT_EQ(dropped, 1u);  // s2 was homed on rank 0
  ASSERT_EQ(mapped.size(), 1u);
  EXPECT_EQ(mapped[0].key, "s1");
  EXPECT_EQ(mapped[0].home, 0);
  EXPECT_EQ(mapped[0].last_replica, 0);
}

TEST(StateFile, RefusesWhatIsNotAStateFileAndSkipsBadEntries) {
  std::vector<ModelSnapshot> models;
  std::string error;
  EXPECT_FALSE(ParseState("{\"models\":[]}", 0, &models, &error));
  EXPECT_EQ(error, "not a warden state file");
  EXPECT_FALSE(ParseState("not json", 0, &models, &error));
  EXPECT_EQ(error, "not a warden state file");
  EXPECT_FALSE(
      ParseState("{\"warden_state\":1,\"saved_at\":0,\"models\":[{\"na", 0, &models, &error));
  EXPECT_TRUE(error.starts_with("a warden state file that is not whole or not valid JSON ("))
      << error;
  EXPECT_FALSE(ParseState("{\"warden_state\":2,\"saved_at\":0,\"models\":[]}", 0, &models, &error));
  EXPECT_EQ(error, "state file version 2, this gateway reads 1");
  EXPECT_FALSE(ParseState("{\"warden_state\":1,\"saved_at\":-1e400,\"models\":[]}", 0, &models,
                          &error));  // -infinity: would make every idle time infinite

  const std::string text =
      R"({"warden_state":1,"saved_at":0,"models":[{"name":"m","replicas":["u"],"conversations":[)"
      R"({"key":"ok","home":0},{"key":"","home":0},{"key":"x","home":-3},{"key":"y","home":"0"},)"
      R"({"key":"z","home":0,"idle_s":-1},{"key":"inf","home":0,"idle_s":1e400},)"
      R"({"key":"huge","home":0,"context_tokens":1e15},{"key":"half","home":1.5},7]},)"
      R"({"name":1},{"name":"bad","replicas":[1],"conversations":[],)"
      R"("patched_settings":[["affinity","off","on"],["policy","x"],7,["a",1,"b"]]}]})";
  StateDamage damage;
  ASSERT_TRUE(ParseState(text, 0, &models, &error, &damage)) << error;
  // The bad model is skipped, not the file; a replica not named names none (its conversations
  // are dropped where they are mapped), not the model's other replicas. All of it is counted.
  ASSERT_EQ(models.size(), 2u);
  ASSERT_EQ(models[0].conversations.size(), 1u);
  EXPECT_EQ(models[0].conversations[0].key, "ok");
  EXPECT_EQ(models[1].name, "bad");
  EXPECT_EQ(models[1].replicas, std::vector<std::string>{""});
  EXPECT_EQ(models[1].patched_settings, (std::vector<PatchedSetting>{{"affinity", "off", "on"}}));
  EXPECT_EQ(damage.models, 1u);
  EXPECT_EQ(damage.conversations, 8u);
  EXPECT_EQ(damage.replicas, 1u);
  ASSERT_TRUE(
      ParseState(R"({"warden_state":1,"saved_at":0,"models":[]})", 0, &models, &error, &damage));
  EXPECT_FALSE(damage.any());
}

// A file saved long ago (or with a saved_at far in the past) keeps its conversations, idle for
// as long as a file can say, and the gateway saves them again in a form it reads back (found by
// fuzzing: the idle time grew past what a file may hold, and the next start dropped them).
// An earlier version saved an admission mode as typed: read in this version's one spelling, so
// that the config's "recent:04" (now "recent:4") is not taken for a change of it.
TEST(StateFile, AdmissionModesAreReadInTheirOneSpelling) {
  const std::string text =
      R"({"warden_state":1,"saved_at":0,"models":[{"name":"m","replicas":["u"],"conversations":[],)"
      R"("patched_settings":[["admission","reserve:03","recent:04"],["policy","llm-d","x"]],)"
      R"("setting_changes":[["admission",5,true,"recent:04"]]}]})";
  std::vector<ModelSnapshot> models;
  std::string error;
  ASSERT_TRUE(ParseState(text, 0, &models, &error)) << error;
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].patched_settings,
            (std::vector<PatchedSetting>{{"admission", "reserve:3", "recent:4"},
                                         {"policy", "llm-d", "x"}}));
  ASSERT_EQ(models[0].setting_changes.size(), 1u);
  EXPECT_EQ(models[0].setting_changes[0].config_value, "recent:4");
}

TEST(StateFile, AConversationIdleForAgesIsKeptAndSavedAgainReadably) {
  std::vector<ModelSnapshot> models;
  std::string error;
  for (const std::string text :
       {R"({"warden_state":1,"saved_at":0,"models":[{"name":"m","replicas":["u"],)"
        R"("conversations":[{"key":"old","home":0,"idle_s":99999999999}]}]})",
        R"({"warden_state":1,"saved_at":-1e300,"models":[{"name":"m","replicas":["u"],)"
        R"("conversations":[{"key":"old","home":0,"idle_s":1}]}]})"}) {
    ASSERT_TRUE(ParseState(text, 1.8e9, &models, &error)) << error;
    ASSERT_EQ(models.at(0).conversations.size(), 1u) << text;
    EXPECT_GE(models[0].conversations[0].idle_s, 1e10);
    std::vector<ModelSnapshot> again;
    StateDamage damage;
    ASSERT_TRUE(ParseState(StateToJson(models, 1.8e9), 1.8e9, &again, &error, &damage)) << error;
    EXPECT_FALSE(damage.any()) << text;
    EXPECT_EQ(again.at(0).conversations.size(), 1u);
  }
}

TEST(StateFile, ConversationsComeMostRecentFirstAndOnceWhateverTheFilesOrder) {
  const std::string text =
      R"({"warden_state":1,"saved_at":0,"models":[{"name":"m","replicas":["u","v"],)"
      R"("conversations":[{"key":"a","home":0,"idle_s":30},{"key":"b","home":0,"idle_s":5},)"
      R"({"key":"a","home":1,"idle_s":1},{"key":"c","home":1,"idle_s":10}]}]})";
  std::vector<ModelSnapshot> models;
  std::string error;
  ASSERT_TRUE(ParseState(text, 0, &models, &error)) << error;
  const auto& c = models[0].conversations;
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].key, "a");
  EXPECT_EQ(c[0].home, 1);  // its most recent entry
  EXPECT_EQ(c[1].key, "b");
  EXPECT_EQ(c[2].key, "c");
}

TEST(StateFile, ReadsOnlyRegularFilesAndNeverThrows) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("warden-state-read-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string text, error;
  bool missing = false;
  EXPECT_FALSE(ReadStateFile((dir / "none.json").string(), &text, &missing, &error));
  EXPECT_TRUE(missing);
  std::filesystem::create_directory_symlink(dir / "loop", dir / "loop");
  EXPECT_FALSE(ReadStateFile((dir / "loop" / "s.json").string(), &text, &missing, &error));
  EXPECT_FALSE(missing);
  EXPECT_FALSE(ReadStateFile(dir.string(), &text, &missing, &error));
  EXPECT_EQ(error, "it is a directory");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_FALSE(ReadStateFile((dir / "fifo").string(), &text, &missing, &error));  // no hang
  std::ofstream(dir / "ok.json") << "{}";
  EXPECT_TRUE(ReadStateFile((dir / "ok.json").string(), &text, &missing, &error));
  EXPECT_EQ(text, "{}");
  std::filesystem::remove_all(dir);
}

TEST(StateFile, TheWritersStartIsReadFromTheFilesOpening) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("warden-state-start-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "state.json").string();
  EXPECT_EQ(StateFileWriterStart(path), 0);                    // no file
  std::vector<ModelSnapshot> models(200, TwoConversations());  // a file much longer than 256 bytes
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, StateToJson(models, 2000.5, 1764500000.123456), &error));
  EXPECT_DOUBLE_EQ(StateFileWriterStart(path), 1764500000.123456);
  ASSERT_TRUE(WriteFileAtomically(path, "{\"models\":[]}", &error));
  EXPECT_EQ(StateFileWriterStart(path), 0);  // does not say
  std::filesystem::remove_all(dir);
}

// A state file linked to another place (a disk of its own, say) stays a link: the file it names is
// written, through a chain of links and relative ones, even when it is not there yet.
TEST(StateFile, WritesThroughSymlinks) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("warden-state-link-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "disk");
  const std::filesystem::path link = dir / "state.json", hop = dir / "hop.json";
  std::filesystem::create_symlink("disk/real.json", hop);  // relative, to a file not there yet
  std::filesystem::create_symlink(hop, link);
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(link.string(), "saved", &error)) << error;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_TRUE(std::filesystem::is_symlink(hop));
  std::ifstream in(dir / "disk" / "real.json");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "saved");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "disk"), {}), 1);
  // What is there must be a regular file: a pipe (or /dev/null) is neither replaced nor written.
  ASSERT_EQ(::mkfifo((dir / "disk" / "pipe").c_str(), 0600), 0);
  std::filesystem::create_symlink(dir / "disk" / "pipe", dir / "to-pipe.json");
  EXPECT_FALSE(WriteFileAtomically((dir / "to-pipe.json").string(), "saved", &error));
  EXPECT_EQ(error, (dir / "disk" / "pipe").string() + ": not a regular file");
  EXPECT_TRUE(std::filesystem::is_fifo(dir / "disk" / "pipe"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "disk"), {}), 2);
  std::filesystem::remove_all(dir);
}

TEST(StateFile, WritesAtomically) {
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("warden-state-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "state.json").string();
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, "first", &error)) << error;
  ASSERT_TRUE(WriteFileAtomically(path, "second", &error)) << error;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "second");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // no temporary left
  // Not renamed in when the caller's check, just before the rename, says no.
  EXPECT_FALSE(WriteFileAtomically(path, "refused", &error, [] { return false; }));
  EXPECT_EQ(error, "refused");
  // The check and the rename hold <path>.lock: another writer's check waits for them.
  const std::string lock_path = path + ".lock";
  const auto locked_elsewhere = [&] {
    const int fd = ::open(lock_path.c_str(), O_RDWR);
    const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    return locked;
  };
  EXPECT_TRUE(WriteFileAtomically(path, "third", &error, [&] { return locked_elsewhere(); }));
  EXPECT_FALSE(locked_elsewhere());                                           // and no longer
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 2);  // and the lock file
  // A lock another holds for good (a writer stopped halfway) is waited for a while, not for ever.
  const int held = ::open(lock_path.c_str(), O_RDWR);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  EXPECT_TRUE(WriteFileAtomically(path, "fourth", &error, [] { return true; })) << error;
  ::close(held);
  EXPECT_FALSE(WriteFileAtomically((dir / "no" / "such" / "dir").string(), "x", &error));
  EXPECT_NE(error.find("No such file"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace warden
