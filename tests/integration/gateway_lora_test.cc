// `warden serve`: LoRA adapters the replicas serve, loaded and unloaded through the gateway.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// vLLM serves LoRA adapters (--lora-modules) beside the model under their own names, listed in its
// /v1/models with the model as their parent. The gateway learns them there: a request naming one
// goes to the model's replicas with its name unchanged (an alias is rewritten; an adapter must
// not be), keeps its conversation on one replica, and the gateway lists the adapter too.
TEST_F(GatewayTest, RequestsForALoraAdapterTheReplicasServeAreRoutedUnderItsName) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(
      2, "100", {"--lora-modules", "sql=/adapters/sql", "claude-lora=/adapters/claude-lora"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());  // with the alias claude-*
  ASSERT_TRUE(Eventually([&] {
    return Admin(port_).at("served_names") == json::value(json::array{"claude-lora", "sql"});
  }));
  const auto turn = [&](const std::string& model, const std::string& words) {
    return HttpPost(port_, "/v1/chat/completions",
                    json::serialize(json::object{
                        {"model", model},
                        {"max_tokens", 8},
                        {"messages", json::array{json::object{{"role", "user"},
                                                              {"content", Words(words, 150)}}}}}),
                    {{"X-Session-ID", "lora-" + model}});
  };
  const HttpResult first = turn("sql", "lora");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(json::parse(first.body).at("model"), json::value("sql"));  // not rewritten to "m"
  const HttpResult again = turn("sql", "lora");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.header("x-warden-route"), "sticky");
  EXPECT_EQ(again.header("x-warden-replica"), first.header("x-warden-replica"));
  EXPECT_GT(json::parse(again.body)
                .at("usage")
                .at("prompt_tokens_details")
                .at("cached_tokens")
                .as_int64(),
            100);
  // A name the replicas serve goes as it is even where an alias matches it too (the alias would
  // run the base model in the adapter's place); an alias still names the model to the replicas.
  const HttpResult adapter = turn("claude-lora", "shadowed");
  ASSERT_EQ(adapter.status, 200) << adapter.body;
  EXPECT_EQ(json::parse(adapter.body).at("model"), json::value("claude-lora"));
  const HttpResult aliased = turn("claude-x", "alias");
  ASSERT_EQ(aliased.status, 200) << aliased.body;
  EXPECT_EQ(json::parse(aliased.body).at("model"), json::value("m"));
  const HttpResult unknown = turn("other", "x");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("m (also claude-*) and 2 other names its servers list"),
            std::string::npos)
      << unknown.body;
  // Listed, with the model as its parent and the path it was loaded from as its root (as vLLM
  // lists it), and found by its id.
  const json::value models = json::parse(HttpGet(port_, "/v1/models").body);
  bool listed = false;
  for (const json::value& entry : models.at("data").as_array()) {
    if (entry.at("id") == json::value("sql"))
      listed = entry.at("parent") == json::value("m") && entry.at("root") == "/adapters/sql";
  }
  EXPECT_TRUE(listed) << json::serialize(models);
  EXPECT_EQ(HttpGet(port_, "/v1/models/sql").status, 200);
}

// vLLM loads a LoRA adapter at run time on the one server a request reaches. Through the gateway
// it is loaded on every server of the model, so that the adapter's requests can go to any replica;
// one loaded on a server directly is learnt at its first request, which goes only where it is.
TEST_F(GatewayTest, LoraAdaptersLoadedAtRunTimeAreOnEveryServerOrRequestsGoWhereTheyAre) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto listed_by = [&](uint16_t port) {
    std::set<std::string> ids;
    const json::value models = json::parse(HttpGet(port, "/v1/models").body);
    for (const json::value& m : models.at("data").as_array())
      ids.insert(std::string(m.at("id").as_string()));
    return ids;
  };
  const std::string sql = R"({"lora_name":"sql","lora_path":"/adapters/sql"})";
  const HttpResult loaded = HttpPost(port_, "/v1/load_lora_adapter", sql);
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  EXPECT_EQ(loaded.body,
            "Success: LoRA adapter 'sql' added successfully on 2 servers of model 'm'.");
  for (uint16_t sim : sim_ports_) EXPECT_EQ(listed_by(sim), (std::set<std::string>{"m", "sql"}));
  // Known at once, without waiting for the next read of the servers' names.
  EXPECT_EQ(Admin(port_).at("served_names"), json::value(json::array{"sql"}));
  // Sent again: every server has it already, and says so as vLLM does.
  const HttpResult again = HttpPost(port_, "/v1/load_lora_adapter", sql);
  EXPECT_EQ(again.status, 400);
  EXPECT_EQ(json::parse(again.body).at("error").at("message"),
            json::value("The lora adapter 'sql' has already been loaded."));
  // What every server refuses passes unchanged.
  const HttpResult no_path = HttpPost(port_, "/v1/load_lora_adapter", R"({"lora_name":"x"})");
  EXPECT_EQ(no_path.status, 400);
  EXPECT_EQ(json::parse(no_path.body).at("error").at("message"),
            json::value("Both 'lora_name' and 'lora_path' must be provided."));
  const auto turn = [&](const std::string& model, const std::string& session) {
    return HttpPost(port_, "/v1/chat/completions",
                    json::serialize(json::object{
                        {"model", model},
                        {"max_tokens", 4},
                        {"messages", json::array{json::object{{"role", "user"},
                                                              {"content", Words(session, 40)}}}}}),
                    {{"X-Session-ID", session}});
  };
  std::set<std::string> replicas;
  for (int s = 0; s < 4; ++s) {
    const HttpResult r = turn("sql", "sql-" + std::to_string(s));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body).at("model"), json::value("sql"));
    replicas.insert(r.header("x-warden-replica"));
  }
  EXPECT_EQ(replicas, (std::set<std::string>{"0", "1"}));  // on every server: placed by load
  // A path spelt with an escape is the same endpoint to vLLM's server, and to the gateway: a turn.
  // So are a doubled slash and a dot segment (a base URL ending in '/'), which vLLM's server
  // does not merge: the replica gets the path the gateway routed and counted, not a 404 counted
  // as a turn (found by review).
  for (const char* spelt :
       {"/v1/chat/completion%73", "//v1/chat/completions", "/v1/./chat/completions?x=1"}) {
    const HttpResult r = HttpPost(
        port_, spelt,
        json::serialize(json::object{
            {"model", "sql"},
            {"max_tokens", 4},
            {"messages",
             json::array{json::object{{"role", "user"}, {"content", Words("sql-0", 40)}}}}}),
        {{"X-Session-ID", "sql-0"}});
    ASSERT_EQ(r.status, 200) << spelt << " " << r.body;
    EXPECT_EQ(r.header("x-warden-route"), "sticky") << spelt;
  }
  // Loaded on the second server alone, behind the gateway's back: learnt at the first request
  // naming it, and its requests go there only.
  ASSERT_EQ(HttpPost(sim_ports_[1], "/v1/load_lora_adapter",
                     R"({"lora_name":"chat","lora_path":"/adapters/chat"})")
                .status,
            200);
  for (int s = 0; s < 4; ++s) {
    const HttpResult r = turn("chat", "chat-" + std::to_string(s));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), "1");
    EXPECT_EQ(r.header("x-warden-route"), "new");
  }
  // The admin API says where each adapter is, and which the gateway keeps on every server.
  EXPECT_EQ(Admin(port_).at("lora_adapters"),
            json::parse(R"([{"name":"chat","servers":[1],"loaded_through_gateway":false,)"
                        R"("pending_updates":[]},)"
                        R"({"name":"sql","servers":[0,1],"loaded_through_gateway":true,)"
                        R"("pending_updates":[]}])"));
  // Unloaded behind the gateway's back: the server's 404 has the gateway read the names again
  // (at most once a second), and the next request gets the gateway's own 404.
  ASSERT_EQ(HttpPost(sim_ports_[1], "/v1/unload_lora_adapter", R"({"lora_name":"chat"})").status,
            200);
  EXPECT_TRUE(Eventually([&] {
    const HttpResult r = turn("chat", "chat-0");
    return r.status == 404 && r.header("x-warden-replica").empty();
  }));
  // Unloaded everywhere: the gateway's own 404 at once.
  const HttpResult unloaded = HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  ASSERT_EQ(unloaded.status, 200) << unloaded.body;
  for (uint16_t sim : sim_ports_) EXPECT_EQ(listed_by(sim).count("sql"), 0u);
  const HttpResult gone = turn("sql", "sql-0");
  EXPECT_EQ(gone.status, 404);
  EXPECT_NE(gone.body.find("model 'sql' is not served here"), std::string::npos) << gone.body;
  EXPECT_EQ(gone.header("x-warden-replica"), "");
}

// Claude Code's /model turns a session to another model mid-way: under an adapter nothing of its
// history is cached anywhere, so it is a conversation of its own, homed where the adapter is.
TEST_F(GatewayTest, ASessionThatTurnsToAnAdapterIsAConversationOfItsOwn) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto turn = [&](const std::string& model) {
    return HttpPost(port_, "/v1/chat/completions",
                    json::serialize(json::object{
                        {"model", model},
                        {"max_tokens", 4},
                        {"messages", json::array{json::object{{"role", "user"},
                                                              {"content", Words("s", 40)}}}}}),
                    {{"X-Claude-Code-Session-Id", "session-1"}});
  };
  const HttpResult first = turn("m");
  ASSERT_EQ(first.status, 200) << first.body;
  const int home = std::stoi(first.header("x-warden-replica"));
  const int other = 1 - home;
  // The adapter is on the other server only (loaded there behind the gateway's back).
  ASSERT_EQ(HttpPost(sim_ports_[other], "/v1/load_lora_adapter",
                     R"({"lora_name":"chat","lora_path":"/adapters/chat"})")
                .status,
            200);
  for (const char* route : {"new", "sticky", "sticky"}) {
    const HttpResult r = turn("chat");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), std::to_string(other));
    EXPECT_EQ(r.header("x-warden-route"), route);
  }
  // Back to the model: the session's own conversation, still at home.
  const HttpResult back = turn("m");
  EXPECT_EQ(back.header("x-warden-replica"), std::to_string(home));
  EXPECT_EQ(back.header("x-warden-route"), "sticky");
  EXPECT_EQ(Admin(port_).at("replicas").at(other).at("overflow"), json::value(0));
}

// A vLLM that restarts has forgotten the adapters loaded while it ran. The gateway loads those it
// loaded itself again on a server back from being down; one it unloaded stays unloaded.
TEST_F(GatewayTest, AServerBackFromARestartGetsTheAdaptersLoadedThroughTheGatewayAgain) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (const char* name : {"sql", "chat"}) {
    const std::string body = json::serialize(
        json::object{{"lora_name", name}, {"lora_path", std::string("/adapters/") + name}});
    ASSERT_EQ(HttpPost(port_, "/v1/load_lora_adapter", body).status, 200);
  }
  ASSERT_EQ(HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"chat"})").status, 200);
  ASSERT_NO_FATAL_FAILURE(RestartSimWithLoraUpdating(1));
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("lacks LoRA adapter 'sql'.*loaded it"), &match));
  const std::string listed = HttpGet(sim_ports_[1], "/v1/models").body;
  EXPECT_NE(listed.find(R"("id":"sql")"), std::string::npos) << listed;
  EXPECT_EQ(listed.find(R"("id":"chat")"), std::string::npos) << listed;
  // Known to serve it again: the adapter's new conversations go to either server.
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(1).at("healthy").as_bool(); }));
  std::set<std::string> replicas;
  for (int s = 0; s < 4; ++s) {
    const HttpResult r =
        HttpPost(port_, "/v1/chat/completions",
                 R"({"model":"sql","max_tokens":4,"messages":[{"role":"user","content":"restart )" +
                     std::to_string(s) + R"("}]})",
                 {{"X-Session-ID", "restart-" + std::to_string(s)}});
    ASSERT_EQ(r.status, 200) << r.body;
    replicas.insert(r.header("x-warden-replica"));
  }
  EXPECT_EQ(replicas, (std::set<std::string>{"0", "1"}));
}

// While its servers load again an adapter loaded through the gateway that they forgot (they
// restarted), a request naming it waits for it instead of a 404 "not served here".
TEST_F(GatewayTest, ARequestForAnAdapterBeingLoadedAgainWaitsForIt) {
  const std::vector<std::string> slow_loads = {"--runtime-lora-updating", "--lora-load-seconds",
                                               "300"};  // 3 s of real time
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", slow_loads));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_NO_FATAL_FAILURE(LoadSqlAdapter());
  ASSERT_NO_FATAL_FAILURE(StopSim(0));
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(0, slow_loads));
  const auto listed_nowhere = [&] {
    const json::object model = Admin(port_);
    const json::array& adapters = model.at("lora_adapters").as_array();
    return adapters.size() == 1 && adapters[0].at("servers").as_array().empty();
  };
  ASSERT_TRUE(Eventually(listed_nowhere));
  const HttpResult r = HttpPost(
      port_, "/v1/chat/completions",
      R"({"model":"sql","max_tokens":4,"messages":[{"role":"user","content":"back again"}]})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(listed_nowhere());
}

// One the restarted servers cannot load again (runtime updates off now, a path gone) is answered
// with a 503 once no load runs, not held for the whole wait (found by review: every request
// waited 60 s).
TEST_F(GatewayTest, ARequestForAnAdapterThatCannotBeLoadedAgainIsAnsweredSoon) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_NO_FATAL_FAILURE(LoadSqlAdapter());
  ASSERT_NO_FATAL_FAILURE(StopSim(0));
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(0, {}));
  std::smatch match;
  ASSERT_TRUE(
      gateway_->WaitForLine(std::regex("lacks LoRA adapter 'sql'.*did not load it"), &match));
  const auto sent = std::chrono::steady_clock::now();
  const HttpResult r =
      HttpPost(port_, "/v1/chat/completions",
               R"({"model":"sql","max_tokens":4,"messages":[{"role":"user","content":"gone"}]})");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("have not loaded it again"), std::string::npos) << r.body;
  EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(30));
}

// An adapter named like the model itself could never be reached (requests naming it go to the
// model); one named like an alias would take that alias's requests from the model: both loads are
// refused, and no server is sent them. One a pattern matches loads (adapters go before aliases,
// so that they work under `--alias '*'`).
TEST_F(GatewayTest, AnAdapterNamedLikeTheModelOrAnAliasIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--alias", "claude-x"}));
  const HttpResult refused =
      HttpPost(port_, "/v1/load_lora_adapter", R"({"lora_name":"m","lora_path":"/adapters/m"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(refused.body).at("error").at("message").as_string(),
            "a LoRA adapter cannot be named 'm': the name of a model served here");
  const HttpResult aliased = HttpPost(port_, "/v1/load_lora_adapter",
                                      R"({"lora_name":"claude-x","lora_path":"/adapters/x"})");
  EXPECT_EQ(aliased.status, 400);
  EXPECT_EQ(json::parse(aliased.body).at("error").at("message").as_string(),
            "a LoRA adapter cannot be named 'claude-x': an alias of model 'm', whose requests it "
            "would take");
  std::string listed = HttpGet(sim_ports_[0], "/v1/models").body;
  EXPECT_EQ(listed.find("/adapters/"), std::string::npos) << listed;
  const HttpResult matched = HttpPost(port_, "/v1/load_lora_adapter",
                                      R"({"lora_name":"claude-y","lora_path":"/adapters/y"})");
  EXPECT_EQ(matched.status, 200) << matched.body;
  listed = HttpGet(sim_ports_[0], "/v1/models").body;
  EXPECT_NE(listed.find("/adapters/y"), std::string::npos) << listed;
}

// A server restarted between two health checks, found without an adapter loaded through the
// gateway by the read of names a request's 404 makes, gets it at its next scrape (it waited for
// the periodic read, 30 s).
TEST_F(GatewayTest, AServerRestartedUnseenGetsItsAdaptersAgainAfterTheNext404) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "2"}));
  ASSERT_NO_FATAL_FAILURE(LoadSqlAdapter());
  ASSERT_EQ(sims_[1]->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(1, {"--runtime-lora-updating"}));
  // Until a request finds it out: a 404 from the restarted server, or a turn on the other one.
  for (int s = 0; s < 6; ++s) {
    HttpPost(port_, "/v1/chat/completions",
             R"({"model":"sql","max_tokens":4,"messages":[{"role":"user","content":"unseen )" +
                 std::to_string(s) + R"("}]})",
             {{"X-Session-ID", "unseen-" + std::to_string(s)}});
  }
  EXPECT_TRUE(Eventually(
      [&] {
        return HttpGet(sim_ports_[1], "/v1/models").body.find(R"("id":"sql")") != std::string::npos;
      },
      8));
}

// A server down when an adapter is loaded through the gateway gets it when it is back: the gateway
// keeps the adapters it loaded on every server until they are unloaded through it.
TEST_F(GatewayTest, AServerDownWhenAnAdapterWasLoadedGetsItWhenItIsBack) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_NO_FATAL_FAILURE(StopSim(1));
  const HttpResult loaded = HttpPost(port_, "/v1/load_lora_adapter",
                                     R"({"lora_name":"sql","lora_path":"/adapters/sql"})");
  EXPECT_EQ(loaded.status, 200);
  EXPECT_EQ(loaded.body,
            "Success: LoRA adapter 'sql' added successfully on 1 server of model "
            "'m'. Down, so not yet: http://127.0.0.1:" +
                std::to_string(sim_ports_[1]) + "; the gateway sends it there when it is back.");
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(1, {"--runtime-lora-updating"}));
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("lacks LoRA adapter 'sql'.*loaded it"), &match));
  EXPECT_NE(HttpGet(sim_ports_[1], "/v1/models").body.find(R"("id":"sql")"), std::string::npos);
}

// A server that stops answering without a restart keeps its adapters: one unloaded through the
// gateway meanwhile is unloaded from it when it answers again.
TEST_F(GatewayTest, AServerSilentWhenAnAdapterWasUnloadedLosesItWhenItIsBack) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (const char* name : {"sql", "chat"}) {
    const std::string body = json::serialize(
        json::object{{"lora_name", name}, {"lora_path", std::string("/adapters/") + name}});
    ASSERT_EQ(HttpPost(port_, "/v1/load_lora_adapter", body).status, 200);
  }
  ASSERT_EQ(::kill(sims_[1]->pid(), SIGSTOP), 0);
  const bool silent =
      Eventually([&] { return !Admin(port_).at("replicas").at(1).at("healthy").as_bool(); });
  if (!silent) ::kill(sims_[1]->pid(), SIGCONT);
  ASSERT_TRUE(silent);
  const HttpResult unloaded = HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  // The admin API shows what the silent server still owes.
  const json::object admin = Admin(port_);
  ::kill(sims_[1]->pid(), SIGCONT);
  bool shown = false;
  for (const json::value& adapter : admin.at("lora_adapters").as_array()) {
    if (adapter.at("name") != "sql") continue;
    shown = adapter.at("pending_updates") == json::parse(R"([{"server":1,"update":"unload"}])");
  }
  EXPECT_TRUE(shown) << json::serialize(admin.at("lora_adapters"));
  EXPECT_EQ(unloaded.status, 200) << unloaded.body;
  EXPECT_NE(unloaded.body.find("removed successfully on 1 server"), std::string::npos)
      << unloaded.body;
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex("missed LoRA adapter 'sql' being unloaded through the gateway: unloaded it"),
      &match));
  const std::string listed = HttpGet(sim_ports_[1], "/v1/models").body;
  EXPECT_EQ(listed.find(R"("id":"sql")"), std::string::npos) << listed;
  EXPECT_NE(listed.find(R"("id":"chat")"), std::string::npos) << listed;  // not unloaded
}

// A load in place that a silent server missed reaches it when it answers again (it still lists
// the adapter, from the old path, so nothing else would).
TEST_F(GatewayTest, AServerSilentDuringAnInPlaceReloadGetsItWhenItIsBack) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_EQ(
      HttpPost(port_, "/v1/load_lora_adapter", R"({"lora_name":"sql","lora_path":"/adapters/v1"})")
          .status,
      200);
  ASSERT_EQ(::kill(sims_[1]->pid(), SIGSTOP), 0);
  const bool silent =
      Eventually([&] { return !Admin(port_).at("replicas").at(1).at("healthy").as_bool(); });
  if (!silent) ::kill(sims_[1]->pid(), SIGCONT);
  ASSERT_TRUE(silent);
  const HttpResult reloaded =
      HttpPost(port_, "/v1/load_lora_adapter",
               R"({"lora_name":"sql","lora_path":"/adapters/v2","load_inplace":true})");
  ::kill(sims_[1]->pid(), SIGCONT);
  EXPECT_EQ(reloaded.status, 200) << reloaded.body;
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex("missed LoRA adapter 'sql' being reloaded in place.*reloaded it in place now"),
      &match));
  for (uint16_t sim : sim_ports_) {
    const std::string listed = HttpGet(sim, "/v1/models").body;
    EXPECT_NE(listed.find(R"("root":"/adapters/v2")"), std::string::npos) << listed;
  }
}

// vLLM does one update of an adapter at a time; so does the gateway, per model, so that what it
// remembers follows the order they took effect in. An unload sent while a load is still under way
// (a download) waits for it, and then wins: the adapter is gone, and not loaded again later.
TEST_F(GatewayTest, AnUnloadSentDuringALoadWaitsForItAndWins) {
  ASSERT_NO_FATAL_FAILURE(
      StartSims(2, "100", {"--runtime-lora-updating", "--lora-load-seconds", "50"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  auto load = std::async(std::launch::async, [&] {
    return HttpPost(port_, "/v1/load_lora_adapter",
                    R"({"lora_name":"sql","lora_path":"/adapters/sql"})");
  });
  std::smatch match;
  for (auto& sim : sims_)
    ASSERT_TRUE(sim->WaitForLine(std::regex("loading LoRA adapter 'sql'"), &match));
  const HttpResult unloaded = HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  EXPECT_EQ(load.get().status, 200);
  EXPECT_EQ(unloaded.status, 200) << unloaded.body;
  EXPECT_EQ(unloaded.body,
            "Success: LoRA adapter 'sql' removed successfully on 2 servers of model 'm'.");
  for (uint16_t sim : sim_ports_)
    EXPECT_EQ(HttpGet(sim, "/v1/models").body.find("sql"), std::string::npos);
  EXPECT_EQ(Admin(port_).at("lora_adapters"), json::array{});  // nor remembered, to load again
}

// The adapters loaded through the gateway are in its state file: a gateway restarted in between
// still loads them on a server back from a restart.
TEST_F(GatewayTest, TheAdaptersLoadedThroughTheGatewayOutliveItsRestart) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  const std::string state = ::testing::TempDir() + "/warden-adapters-state.json";
  std::filesystem::remove(state);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state}));
  ASSERT_NO_FATAL_FAILURE(LoadSqlAdapter());
  ASSERT_EQ(gateway_->Stop(), 0);  // saved as it stops
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state}));
  ASSERT_NO_FATAL_FAILURE(RestartSimWithLoraUpdating(1));
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("lacks LoRA adapter 'sql'.*loaded it"), &match));
  EXPECT_NE(HttpGet(sim_ports_[1], "/v1/models").body.find(R"("id":"sql")"), std::string::npos);
  std::filesystem::remove(state);
}

// A request naming a model the gateway does not know waits while the servers' names are read
// again (2 s here: one server does not answer its /v1/models); other requests run on its thread
// meanwhile. What it read of its own headers before must still be its own after: it once took
// the next request's session key (and could read freed memory).
TEST_F(GatewayTest, ARequestWaitingForTheServersNamesKeepsItsOwnHeaders) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", {"--runtime-lora-updating"}));
  FakeReplica slow([](const std::string&) {
    const std::string body =
        R"({"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}})";
    return FakeAnswer{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body};
  });
  upstream_args_.insert(upstream_args_.end(), {"--url", slow.url()});
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  slow.HoldModelLists();
  ASSERT_EQ(HttpPost(sim_ports_[0], "/v1/load_lora_adapter",
                     R"({"lora_name":"chat","lora_path":"/adapters/chat"})")
                .status,
            200);
  auto waiting = std::async(std::launch::async, [&] {
    return HttpPost(port_, "/v1/chat/completions",
                    R"({"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"x"}]})",
                    {{"X-Session-ID", "waiting"}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // (it waits 2 s: no sync point)
  const HttpResult other = HttpPost(port_, "/v1/chat/completions", ChatBody("other", 5, 4),
                                    {{"X-Session-ID", "other-session"}, {"X-Padding", "p"}});
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(other.header("x-warden-route"), "new");
  const HttpResult waited = waiting.get();
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_EQ(waited.header("x-warden-route"), "new");  // its own key, not the other's (sticky)
  EXPECT_EQ(json::parse(waited.body).at("model"), json::value("chat"));
}

// Loading an adapter changes what the replicas serve: with an admin token, it takes that token
// (a client key does not do); with several models, the body names the one whose servers load it.
TEST_F(GatewayTest, AdapterUpdatesTakeTheAdminTokenAndNameTheirModel) {
  std::vector<uint16_t> ports;
  for (const std::string model : {"m", "n"}) {
    ports.clear();
    sims_.push_back(StartWarden(
        {"sim", "--port", "0", "--model", model, "--time-scale", "100", "--runtime-lora-updating"},
        &ports));
    ASSERT_NE(sims_.back(), nullptr);
    sim_ports_.push_back(ports[0]);
  }
  const std::string config_path = ::testing::TempDir() + "/warden-adapters.yaml";
  {
    std::ofstream f(config_path);
    f << "admin_token: s3cret\napi_keys: [{key: sk-client-key-1}]\nmodels:\n"
      << "  - {name: m, url: 'http://127.0.0.1:" << sim_ports_[0] << "'}\n"
      << "  - {name: n, url: 'http://127.0.0.1:" << sim_ports_[1] << "'}\n";
  }
  ports.clear();
  gateway_ = StartWarden({"serve", "--config", config_path, "--listen", "127.0.0.1:0"}, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];
  const std::string load = R"({"lora_name":"sql","lora_path":"/adapters/sql","model":"n"})";
  const HttpResult keyless = HttpPost(port_, "/v1/load_lora_adapter", load);
  EXPECT_EQ(keyless.status, 401);
  EXPECT_NE(keyless.body.find("admin token"), std::string::npos) << keyless.body;
  // However the path is spelt for vLLM's server (which decodes escapes) or a proxy before it.
  for (const char* path : {"/v1/load%5Flora_adapter", "//v1/load_lora_adapter",
                           "/v1/./load_lora_adapter", "/x/../v1/load_lora_adapter"}) {
    EXPECT_EQ(HttpPost(port_, path, load, {{"Authorization", "Bearer sk-client-key-1"}}).status,
              401)
        << path;
  }
  // SageMaker's adapter endpoints, which vLLM serves too, would load on one server: not passed on.
  const HttpResult sagemaker =
      HttpPost(port_, "/adapters", load, {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(sagemaker.status, 404);
  EXPECT_NE(sagemaker.body.find("/v1/load_lora_adapter"), std::string::npos) << sagemaker.body;
  EXPECT_EQ(
      HttpCall(port_, "DELETE", "/adapters/sql", "", {{"Authorization", "Bearer s3cret"}}).status,
      404);
  EXPECT_EQ(
      HttpPost(port_, "/v1/load_lora_adapter", load, {{"Authorization", "Bearer sk-client-key-1"}})
          .status,
      401);
  // A browser's preflight carries no credentials: it is let through (the request after it is not).
  const HttpResult preflight =
      HttpCall(port_, "OPTIONS", "/v1/load_lora_adapter", "",
               {{"Origin", "http://admin.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_NE(preflight.status, 401) << preflight.body;
  const Headers admin = {{"Authorization", "Bearer s3cret"}};
  // Only a JSON body, as vLLM's route takes (a web page's text/plain POST needs no preflight), and
  // nothing from a page of another site.
  const HttpResult text =
      HttpPost(port_, "/v1/load_lora_adapter", load,
               {{"Authorization", "Bearer s3cret"}, {"Content-Type", "text/plain"}});
  EXPECT_EQ(text.status, 415);
  EXPECT_NE(text.body.find("Only 'application/json' is allowed"), std::string::npos) << text.body;
  for (const Headers& page :
       {Headers{{"Origin", "http://evil.example"}}, Headers{{"Sec-Fetch-Site", "cross-site"}}}) {
    Headers headers = admin;
    headers.insert(headers.end(), page.begin(), page.end());
    EXPECT_EQ(
        HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"x","model":"n"})", headers)
            .status,
        403);
  }
  const HttpResult unnamed = HttpPost(port_, "/v1/load_lora_adapter",
                                      R"({"lora_name":"sql","lora_path":"/adapters/sql"})", admin);
  EXPECT_EQ(unnamed.status, 400);
  EXPECT_NE(unnamed.body.find("several models"), std::string::npos) << unnamed.body;
  // Spelt otherwise, it is the same request.
  const HttpResult loaded = HttpPost(port_, "/v1/load%5Flora_adapter", load, admin);
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  EXPECT_NE(loaded.body.find("of model 'n'"), std::string::npos) << loaded.body;
  EXPECT_EQ(HttpGet(sim_ports_[0], "/v1/models").body.find("sql"), std::string::npos);
  EXPECT_NE(HttpGet(sim_ports_[1], "/v1/models").body.find("sql"), std::string::npos);
  // A client's request for it takes the client's key, as any other.
  const std::string request =
      R"({"model":"sql","max_tokens":4,"messages":[{"role":"user","content":"x"}]})";
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", request, admin).status, 401);
  const HttpResult served = HttpPost(port_, "/v1/chat/completions", request,
                                     {{"Authorization", "Bearer sk-client-key-1"}});
  EXPECT_EQ(served.status, 200) << served.body;
}

}  // namespace
}  // namespace warden::testing
