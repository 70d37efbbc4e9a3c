// `warden serve`: the state file: conversations kept on their replicas through restarts and
// hand-overs.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// A restarted gateway with a state file sends each conversation back to the replica that holds
// its history: saved at SIGTERM (phase 1) or by the periodic save before a SIGKILL (phase 2), and
// mapped by URL when the config lists the replicas in another order.
TEST_F(GatewayTest, ARestartedGatewayKeepsConversationsOnTheirReplicasThroughItsStateFile) {
  ASSERT_NO_FATAL_FAILURE(StartSims(3));
  const std::string dir = ::testing::TempDir() + "/warden-state-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  const std::vector<std::string> stop_config = {"--state-file", state, "--state-save-interval",
                                                "3600"};
  const std::vector<std::string> periodic_config = {"--state-file", state, "--state-save-interval",
                                                    "0.1"};
  const std::vector<std::string> in_order = upstream_args_;
  std::vector<std::string> reversed;  // the same replicas, listed the other way round
  for (size_t i = in_order.size(); i >= 2; i -= 2) {
    reversed.push_back(in_order[i - 2]);
    reversed.push_back(in_order[i - 1]);
  }
  auto moved = [](int replica) { return 2 - replica; };  // index after reversing 3 replicas

  constexpr int kSessions = 6;
  // Opens kSessions conversations named prefix0, prefix1, ...; their first turns' replicas.
  auto open = [&](const std::string& prefix, std::vector<Conversation>* conversations) {
    std::vector<int> homes;
    for (int s = 0; s < kSessions; ++s) {
      conversations->emplace_back(prefix + std::to_string(s), 120);
      const Turn turn = conversations->back().Next(port_);
      EXPECT_EQ(turn.status, 200) << turn.body;
      homes.push_back(turn.replica);
    }
    return homes;
  };

  // Phase 1: saved at SIGTERM; the replicas come back in reverse order.
  ASSERT_NO_FATAL_FAILURE(StartGateway(stop_config));
  std::vector<Conversation> conversations;
  const std::vector<int> homes = open("kept", &conversations);
  EXPECT_EQ(std::set<int>(homes.begin(), homes.end()).size(), 3u);
  // A stateful Responses API conversation: its continuation names only the previous response.
  const HttpResult opened =
      HttpPost(port_, "/v1/responses",
               json::serialize(json::object{
                   {"model", "m"}, {"input", Words("chain", 150)}, {"max_output_tokens", 4}}));
  ASSERT_EQ(opened.status, 200) << opened.body;
  const std::string response_id(json::parse(opened.body).at("id").as_string());
  const int response_home = std::stoi(opened.header("x-warden-replica"));
  EXPECT_FALSE(std::filesystem::exists(state));  // nothing saved before the stop
  EXPECT_EQ(gateway_->Stop(), 0);
  ASSERT_TRUE(std::filesystem::exists(state));
  upstream_args_ = reversed;
  ASSERT_NO_FATAL_FAILURE(StartGateway(stop_config));
  // The Responses API conversation is kept twice, by its reply and (retired) by its opening, and
  // known and restored once.
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), kSessions + 1);
  EXPECT_EQ(Admin(port_).at("sessions").at("active").as_int64(), kSessions + 1);
  EXPECT_EQ(SimMetric(port_, "warden_state_file_restored_conversations"), kSessions + 1);
  const HttpResult continued =
      HttpPost(port_, "/v1/responses",
               json::serialize(json::object{{"model", "m"},
                                            {"previous_response_id", response_id},
                                            {"input", "and then?"},
                                            {"max_output_tokens", 4}}));
  ASSERT_EQ(continued.status, 200) << continued.body;
  EXPECT_EQ(continued.header("x-warden-route"), "sticky");
  EXPECT_EQ(std::stoi(continued.header("x-warden-replica")), moved(response_home));
  for (int s = 0; s < kSessions; ++s) {
    const Turn turn = conversations[s].Next(port_);
    ASSERT_EQ(turn.status, 200) << turn.body;
    EXPECT_EQ(turn.route, "sticky") << "conversation " << s;
    EXPECT_EQ(turn.replica, moved(homes[s])) << "conversation " << s;
    // Its history is read from the replica's cache, not computed again.
    EXPECT_GT(json::parse(turn.body).at("usage").at("cache_read_input_tokens").as_int64(), 150)
        << "conversation " << s;
  }
  // ... and each counts as a turn returning to its replica (found by review: the state file did
  // not keep its previous turn's prompt).
  EXPECT_GE(Total(Admin(port_), "returning_turns"), kSessions);

  // Phase 2: killed, with nothing saved at exit: the periodic save has the new conversations.
  gateway_->Stop();
  upstream_args_ = in_order;
  ASSERT_NO_FATAL_FAILURE(StartGateway(periodic_config));
  std::vector<Conversation> later;
  const std::vector<int> later_homes = open("saved", &later);
  ASSERT_TRUE(
      Eventually([&] { return FileHasKey(state, "saved" + std::to_string(kSessions - 1)); }));
  // Counted once the write is synced, a moment after the file is in place.
  EXPECT_TRUE(Eventually([&] {
    return SimMetric(port_, "warden_state_file_saves_total", "result", "written") >= 1 &&
           SimMetric(port_, "warden_state_file_saved_timestamp_seconds") > 1.7e9;
  }));
  EXPECT_EQ(SimMetric(port_, "warden_state_file_saves_total", "result", "failed"), 0);
  gateway_->Kill();
  ASSERT_NO_FATAL_FAILURE(StartGateway(periodic_config));
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), 2 * kSessions + 1);
  // Nothing saved yet by this one: the file's own save says how old it is (found by review: 0
  // until the first change, so an idle gateway's file looked never saved).
  EXPECT_EQ(SimMetric(port_, "warden_state_file_saves_total", "result", "written"), 0);
  EXPECT_GT(SimMetric(port_, "warden_state_file_saved_timestamp_seconds"), 1.7e9);
  for (int s = 0; s < kSessions; ++s) {
    const Turn turn = later[s].Next(port_);
    ASSERT_EQ(turn.status, 200) << turn.body;
    EXPECT_EQ(turn.route, "sticky") << "conversation " << s;
    EXPECT_EQ(turn.replica, later_homes[s]) << "conversation " << s;
  }
  gateway_->Stop();
  std::filesystem::remove_all(dir);
}

// A replica drained before the gateway restarts stays drained, found by its URL (the replicas
// come back listed the other way round), and nothing is routed there.
TEST_F(GatewayTest, ADrainedReplicaStaysDrainedThroughTheStateFile) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const std::string dir = ::testing::TempDir() + "/warden-drain-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  std::filesystem::remove(state);
  const std::vector<std::string> config = {"--state-file", state, "--state-save-interval", "3600"};
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": true}]})")
                .status,
            200);
  EXPECT_EQ(gateway_->Stop(), 0);
  upstream_args_ = {upstream_args_[2], upstream_args_[3], upstream_args_[0], upstream_args_[1]};
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  const json::array replicas = Admin(port_).at("replicas").as_array();
  EXPECT_FALSE(replicas.at(0).at("draining").as_bool());
  EXPECT_TRUE(replicas.at(1).at("draining").as_bool());
  EXPECT_EQ(replicas.at(1).at("url").as_string(),
            "http://127.0.0.1:" + std::to_string(sim_ports_[0]));
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
  for (const char* id : {"d1", "d2"}) EXPECT_EQ(Conversation(id, 50).Next(port_).replica, 0) << id;
  EXPECT_EQ(gateway_->Stop(), 0);

  // A drain time from the future (written by a clock that ran ahead) is taken as now: kept, it
  // made every peer's later change look older, and was saved again at every save.
  const auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  json::value saved = json::parse(ReadFile(state));
  saved.at("models").at(0).as_object()["drain_changed_at"] = unix_now() + 2 * 86400;
  std::ofstream(state, std::ios::trunc) << json::serialize(saved);
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  EXPECT_TRUE(Admin(port_).at("replicas").at(1).at("draining").as_bool());
  EXPECT_EQ(Conversation("d3", 50).Next(port_).replica, 0);  // something new to save
  EXPECT_EQ(gateway_->Stop(), 0);
  const json::value resaved = json::parse(ReadFile(state));
  EXPECT_LE(resaved.at("models").at(0).at("drain_changed_at").to_number<double>(), unix_now() + 1);
  std::filesystem::remove_all(dir);
}

// In a restart the old gateway drains while the new one already serves: the old one's last save
// is at the signal, so it never writes over what the new one has saved since.
TEST_F(GatewayTest, ADrainingGatewayDoesNotWriteOverItsSuccessorsStateFile) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "5"));
  const std::string dir = ::testing::TempDir() + "/warden-overlap-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  const uint16_t port = FreePort();
  auto start = [&] {
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--model",
                                     "m",
                                     "--state-file",
                                     state,
                                     "--state-save-interval",
                                     "0.1"};
    args.insert(args.end(), {"--alias", "claude-*"});
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  };
  auto file_has = [&](const std::string& key) { return FileHasKey(state, key); };
  std::unique_ptr<ChildProcess> old_gateway = start();
  ASSERT_NE(old_gateway, nullptr);
  Conversation before("before", 40);
  ASSERT_EQ(before.Next(port).status, 200);
  BackgroundStream stream(port, "long", 300, Words("long", 30));
  ASSERT_TRUE(Eventually([&] { return stream.started(); }));
  // And a new conversation on its way in: the old gateway routes it during the drain.
  const std::string during = MessagesRequestBytes(
      R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"during"}]})", "during");
  const auto late = AcceptedConnection(port);
  late->Send(during.substr(0, during.size() - 30));
  ASSERT_EQ(::kill(old_gateway->pid(), SIGTERM), 0);
  ASSERT_TRUE(Eventually([&] { return !PortListening(port); }));  // it stopped accepting
  const std::unique_ptr<ChildProcess> new_gateway = start();
  ASSERT_NE(new_gateway, nullptr);
  Conversation after("after", 40);
  ASSERT_EQ(after.Next(port).status, 200);
  EXPECT_TRUE(Eventually([&] { return file_has("after"); }));
  late->Send(during.substr(during.size() - 30));
  EXPECT_EQ(OkResponses(late->ReadToClose()), 2);
  EXPECT_EQ(stream.Finish().status, 200);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(10)), 0);  // drained: its stream ended whole
  EXPECT_TRUE(file_has("after"));  // it wrote nothing over the new gateway's file, then or at exit
  EXPECT_FALSE(file_has("during"));
  EXPECT_TRUE(file_has("before"));
  new_gateway->Stop();
  std::filesystem::remove_all(dir);
}

// Handing over on one state file: the gateway that replaces a draining one can only take the
// port once the old one has let it go, and the old one saves before it does; so even with a large
// table (a slow save), the new gateway starts from every conversation the old one routed.
TEST_F(GatewayTest, AGatewayTakingOverAfterADrainStartsFromItsLastConversations) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  const std::string dir = ::testing::TempDir() + "/warden-handover-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  const uint16_t port = FreePort();
  auto start = [&](const std::string& save_interval) {
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--model",
                                     "m",
                                     "--alias",
                                     "claude-*",
                                     "--state-file",
                                     state,
                                     "--state-save-interval",
                                     save_interval};
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  };
  {  // A file of 60,000 conversations (the replicas' ids as the gateway writes them).
    std::unique_ptr<ChildProcess> first = start("0.1");
    ASSERT_NE(first, nullptr);
    ASSERT_EQ(Conversation("seed", 40).Next(port).status, 200);
    ASSERT_TRUE(Eventually([&] { return FileHasKey(state, "seed"); }));
    ASSERT_EQ(first->Stop(), 0);
    std::ifstream in(state);
    json::value file = json::parse(
        std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
    json::array& conversations = file.at("models").at(0).at("conversations").as_array();
    for (int i = 0; i < 60000; ++i) {
      conversations.push_back(json::object{{"key", "bulk-" + std::to_string(i)},
                                           {"home", i % 4},
                                           {"last_replica", i % 4},
                                           {"idle_s", 1},
                                           {"context_tokens", 1000}});
    }
    std::ofstream(state) << json::serialize(file);
  }
  std::unique_ptr<ChildProcess> old_gateway = start("1000");  // no periodic save
  ASSERT_NE(old_gateway, nullptr);
  Conversation fresh("fresh", 40);
  const Turn first = fresh.Next(port);
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(first.route, "new");
  ASSERT_EQ(::kill(old_gateway->pid(), SIGTERM), 0);
  // The new gateway starts the moment the old one lets the port go.
  ASSERT_TRUE(Eventually([&] { return HttpGet(port, "/health").status == 0; }));
  const std::unique_ptr<ChildProcess> new_gateway = start("1000");
  ASSERT_NE(new_gateway, nullptr);
  const Turn next = fresh.Next(port);
  EXPECT_EQ(next.route, "sticky");
  EXPECT_EQ(next.replica, first.replica);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(10)), 0);
  new_gateway->Stop();
  std::filesystem::remove_all(dir);
}

// A state file the gateway cannot open (another user's, say; here a link to itself) is set aside
// too, not written over by the first save: before, its conversations were lost.
TEST_F(GatewayTest, AStateFileThatCannotBeOpenedIsKeptAside) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string dir = ::testing::TempDir() + "/warden-unopened-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  std::filesystem::create_symlink("state.json", state);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  const std::regex kept_aside(
      R"(cannot read it .*starting with no conversations \(the file is kept as .*state\.json\.unreadable\.[0-9]+\))");
  EXPECT_TRUE(
      std::any_of(gateway_->lines().begin(), gateway_->lines().end(),
                  [&](const std::string& line) { return std::regex_search(line, kept_aside); }));
  ASSERT_EQ(Conversation("after-unopened", 40).Next(port_).status, 200);
  EXPECT_TRUE(Eventually([&] { return FileHasKey(state, "after-unopened"); }));
  int kept = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("state.json.unreadable."))
      kept += std::filesystem::is_symlink(entry.symlink_status());
  }
  EXPECT_EQ(kept, 1);
  EXPECT_EQ(gateway_->Stop(), 0);
  std::filesystem::remove_all(dir);
}

// A state file the gateway cannot read (cut short, say) is kept aside, not written over by the
// first save.
TEST_F(GatewayTest, AnUnreadableStateFileIsKeptAside) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string dir = ::testing::TempDir() + "/warden-unreadable-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  const std::string cut = R"({"warden_state":1,"writer_started_at":1,"saved_at":1,"models":[{"na)";
  std::ofstream(state) << cut;
  // Files set aside before, in the seconds around this start: none is written over.
  const auto unix_now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const auto read = [](const std::string& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  std::vector<std::string> earlier;
  for (auto t = unix_now - 1; t <= unix_now + 20; ++t) {
    earlier.push_back(state + ".unreadable." + std::to_string(t));
    std::ofstream(earlier.back()) << "earlier";
  }
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  // Said before the gateway listened: among the lines read while it started.
  const std::regex kept_aside(
      R"(starting with no conversations \(the file is kept as .*state\.json\.unreadable\.[0-9]+\.2\))");
  EXPECT_TRUE(
      std::any_of(gateway_->lines().begin(), gateway_->lines().end(),
                  [&](const std::string& line) { return std::regex_search(line, kept_aside); }));
  std::string aside_path;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("state.json.unreadable.") &&
        read(entry.path().string()) == cut)
      aside_path = entry.path().string();
  }
  EXPECT_TRUE(aside_path.ends_with(".2")) << aside_path;
  for (const std::string& path : earlier) EXPECT_EQ(read(path), "earlier") << path;
  for (const std::string& path : earlier) std::filesystem::remove(path);
  ASSERT_EQ(Conversation("after-unreadable", 40).Next(port_).status, 200);
  EXPECT_TRUE(Eventually([&] { return FileHasKey(state, "after-unreadable"); }));
  EXPECT_EQ(gateway_->Stop(), 0);

  // A file readable in part (a hand-edited entry gone wrong): what can be read is used, what
  // cannot is counted in the log, and the file as it was is kept aside too.
  std::filesystem::remove(aside_path);
  json::value damaged = json::parse(ReadFile(state));
  json::array& conversations = damaged.at("models").at(0).at("conversations").as_array();
  ASSERT_EQ(conversations.size(), 1u);
  conversations.push_back(json::object{{"key", "broken"}, {"home", "zero"}});
  const std::string damaged_text = json::serialize(damaged);
  std::ofstream(state, std::ios::trunc) << damaged_text;
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  const std::regex counted(
      R"(skipped as malformed: 0 model\(s\), 1 conversation\(s\), 0 replica name\(s\) \(the )"
      R"(file as it was is kept as .*state\.json\.unreadable\.[0-9]+\))");
  EXPECT_TRUE(
      std::any_of(gateway_->lines().begin(), gateway_->lines().end(),
                  [&](const std::string& line) { return std::regex_search(line, counted); }));
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), 1);  // the readable one
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("state.json.unreadable.")) {
      EXPECT_EQ(ReadFile(entry.path().string()), damaged_text);
    }
  }
  gateway_->Stop();
  std::filesystem::remove_all(dir);
}

// A save that failed (here: its directory did not exist yet) is tried again with nothing new to
// save; and a conversation that came during the drain is in the file the gateway leaves.
TEST_F(GatewayTest, AFailedSaveIsRetriedAndTheDrainsConversationsAreSaved) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string dir = ::testing::TempDir() + "/warden-retry-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);  // a missing folder at start is refused
  const std::string state = dir + "/state.json";
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  std::filesystem::remove_all(dir);  // and one gone later makes the saves fail
  auto file_has = [&](const std::string& key) { return FileHasKey(state, key); };
  Conversation early("early", 40);
  ASSERT_EQ(early.Next(port_).status, 200);
  ASSERT_TRUE(Eventually(
      [&] { return SimMetric(port_, "warden_state_file_saves_total", "result", "failed") >= 1; }));
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(Eventually([&] { return file_has("early"); }));

  const std::string request = MessagesRequestBytes(
      R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"late"}]})", "late");
  const auto late = AcceptedConnection(port_);
  late->Send(request.substr(0, request.size() - 30));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  EXPECT_TRUE(Eventually([&] { return HttpGet(port_, "/health").status == 0; }));
  late->Send(request.substr(request.size() - 30));
  EXPECT_EQ(OkResponses(late->ReadToClose()), 2);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
  EXPECT_TRUE(file_has("late"));  // saved at exit: no other gateway had written the file since
  EXPECT_TRUE(file_has("early"));
  std::filesystem::remove_all(dir);

  // A save at exit that fails is no clean stop: the status says so (found by review: 0).
  std::filesystem::create_directories(dir);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  std::filesystem::remove_all(dir);
  Conversation lost("lost", 40);
  ASSERT_EQ(lost.Next(port_).status, 200);
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 1);
  EXPECT_FALSE(std::filesystem::exists(state));
}

// A file whose writer started "in the future" (a clock stepped back since, or a file from another
// machine) is no successor's: the gateway saves over it.
TEST_F(GatewayTest, AStateFileFromTheFutureIsNoSuccessors) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string state = ::testing::TempDir() + "/warden-future-" + std::to_string(::getpid());
  const double future =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
      600;
  std::ofstream(state) << R"({"warden_state":1,"writer_started_at":)" << std::fixed << future
                       << R"(,"saved_at":0,"models":[]})";
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  Conversation c("now", 40);
  ASSERT_EQ(c.Next(port_).status, 200);
  EXPECT_TRUE(Eventually([&] { return FileHasKey(state, "now"); }));
  EXPECT_EQ(SimMetric(port_, "warden_state_file_saves_total", "result", "refused"), 0);
  std::filesystem::remove(state);
}

}  // namespace
}  // namespace warden::testing
