// `warden serve`: configuration: --check, SIGHUP reloads, settings patched at run time, start-up
// errors.
#include <fstream>

#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// The shards share their port (SO_REUSEPORT), but not with another process: a second gateway on
// the same address fails to start instead of taking half the connections.
TEST_F(GatewayTest, ASecondGatewayOnTheSamePortDoesNotStart) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::vector<std::string> argv = {WARDEN_BIN, "serve", "--listen",
                                   "127.0.0.1:" + std::to_string(port_)};
  argv.insert(argv.end(), upstream_args_.begin(), upstream_args_.end());
  argv.insert(argv.end(), {"--model", "m"});
  auto second = ChildProcess::Start(argv);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->Wait(std::chrono::seconds(10)), 1);
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);  // the first one still serves
}

// SIGHUP and SIGUSR2 while the gateway starts (here: waiting for a silent peer's homes) no
// longer end it by their default action: it serves, then reads its config again (found by
// review: a config deploy's reload during a restart took the gateway down).
TEST_F(GatewayTest, AReloadAskedForWhileTheGatewayStartsIsDoneOnceItServes) {
  FakeReplica silent_peer([](const std::string&) { return FakeAnswer{}; });  // never answers
  FakeReplica replica(AnswerOkJson);
  const uint16_t port = FreePort();
  auto gateway =
      ChildProcess::Start({WARDEN_BIN, "serve", "--listen", "127.0.0.1:" + std::to_string(port),
                           "--model", "m", "--url", replica.url(), "--peer", silent_peer.url()});
  ASSERT_NE(gateway, nullptr);
  ASSERT_TRUE(Eventually([&] { return silent_peer.requests() >= 1; }));  // asking for its homes
  EXPECT_FALSE(PortListening(port));
  ASSERT_EQ(::kill(gateway->pid(), SIGHUP), 0);
  std::smatch match;
  EXPECT_TRUE(gateway->WaitForLine(
      std::regex("SIGHUP came while the gateway started: reading the config again"), &match));
  EXPECT_EQ(HttpPost(port, "/v1/chat/completions", ScenarioRequest("x")).status, 200);
  ASSERT_EQ(::kill(gateway->pid(), SIGTERM), 0);
  EXPECT_EQ(gateway->Wait(std::chrono::seconds(20)), 0);
}

// A session table too small for the conversations going on forgets active ones: it says so in
// the log, the admin API and /metrics, rather than only by a count stuck at its bound.
TEST_F(GatewayTest, ASessionTableTooSmallSaysSo) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100"));
  ASSERT_NO_FATAL_FAILURE(
      StartGateway({"--config", TempFile("small-table.yaml", "session: {max_entries: 3}\n")}));
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"),
                       {{"X-Claude-Code-Session-Id", "table-" + std::to_string(i)}})
                  .status,
              200);
  }
  const json::value sessions = Admin(port_).at("sessions");
  EXPECT_EQ(sessions.at("known").as_int64(), 3);
  EXPECT_EQ(sessions.at("evicted").as_int64(), 2);
  EXPECT_EQ(sessions.at("evicted_active").as_int64(), 2);
  EXPECT_EQ(SimMetric(port_, "warden_active_sessions_evicted_total"), 2);
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(the session table is full \(3 conversations now\))"), &match));
}

// SIGHUP reads the clients' keys again: a new key works and a withdrawn one stops, with no
// restart; a client whose name stays keeps its counters; a bad file, or none of the keys, leaves
// the keys as they were. The config file's own api_keys_file, which the flag replaces, is never
// read (here it does not exist), at start or on SIGHUP.
TEST_F(GatewayTest, SighupReadsTheClientKeysAgain) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100"));
  const std::string keys = TempFile("reloaded-keys", "alice sk-alice-1\nbob sk-bob\n");
  const std::string config = TempFile("config.yaml", "api_keys_file: /nonexistent/keys\n");
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--config", config, "--api-keys-file", keys}));
  const std::string small =
      R"({"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]})";
  const auto status_with = [&](const std::string& key) {
    return HttpPost(port_, "/v1/messages", small, {{"x-api-key", key}}).status;
  };
  EXPECT_EQ(status_with("sk-alice-1"), 200);
  EXPECT_EQ(status_with("sk-bob"), 200);
  EXPECT_EQ(status_with("sk-alice-2"), 401);
  const auto reload = [&](const std::string& text, const std::string& logged) {
    std::ofstream(keys, std::ios::trunc) << text;
    ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
    std::smatch match;
    ASSERT_TRUE(gateway_->WaitForLine(std::regex(logged), &match)) << logged;
  };

  // Logged once every shard has the new keys: the next request is checked against them.
  ASSERT_NO_FATAL_FAILURE(
      reload("alice sk-alice-2\ncarol sk-carol\n", R"(SIGHUP: 2 client key\(s\) read again)"));
  EXPECT_EQ(status_with("sk-alice-2"), 200);
  EXPECT_EQ(status_with("sk-alice-1"), 401);
  EXPECT_EQ(status_with("sk-bob"), 401);
  EXPECT_EQ(status_with("sk-carol"), 200);
  const json::value clients = json::parse(HttpGet(port_, "/warden/v1/clients").body);
  ASSERT_EQ(clients.at("clients").as_array().size(), 2u);
  EXPECT_EQ(clients.at("clients").at(0).at("name"), "alice");
  EXPECT_GE(clients.at("clients").at(0).at("requests").as_int64(), 2);  // one on each key
  EXPECT_EQ(clients.at("clients").at(1).at("name"), "carol");
  EXPECT_EQ(clients.at("clients").at(1).at("requests").as_int64(), 1);

  ASSERT_NO_FATAL_FAILURE(
      reload("a b c\n", "is not applied .*line 1 has 3 words.*client keys .* stay"));
  ASSERT_NO_FATAL_FAILURE(reload("# nobody\n", "is not applied .*no key.*client keys .* stay"));
  EXPECT_EQ(status_with("sk-carol"), 200);
  EXPECT_EQ(status_with("sk-bob"), 401);

  // An edit a reload does not apply is named in the log; the keys are read all the same.
  std::ofstream(config, std::ios::trunc) << "api_keys_file: /nonexistent/keys\nbody_limit_mb: 2\n";
  ASSERT_NO_FATAL_FAILURE(reload("bob sk-bob\n", "SIGHUP: body_limit_mb in .*: not applied"));
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(std::regex(R"(SIGHUP: 1 client key\(s\) read again)"), &match));
  EXPECT_EQ(status_with("sk-bob"), 200);

  // A file a start would refuse applies nothing, the keys included.
  std::ofstream(config, std::ios::trunc)
      << "api_keys_file: /nonexistent/keys\ndrain_timeout_s: -1\n";
  ASSERT_NO_FATAL_FAILURE(reload("carol sk-carol\n", "SIGHUP: .* is not applied.*drain_timeout_s"));
  EXPECT_EQ(status_with("sk-bob"), 200);
  EXPECT_EQ(status_with("sk-carol"), 401);
}

// SIGHUP applies a model's affinity, overflow limit and policy from the edited config file at
// once, as the admin API's PATCH does; other edits of the model are named and wait for a restart.
TEST_F(GatewayTest, SighupAppliesAModelsAffinityAndOverflowLimit) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100"));
  const std::string model = "models:\n  - name: m\n    url: http://127.0.0.1:9\n";
  const std::string config = TempFile("config.yaml", model);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--config", config}));
  Conversation conversation("reloaded", 40);
  EXPECT_EQ(conversation.Next(port_).route, "new");
  const auto reload = [&](const std::string& settings, const std::string& logged) {
    std::ofstream(config, std::ios::trunc) << model << settings;
    ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
    std::smatch match;
    ASSERT_TRUE(gateway_->WaitForLine(std::regex(logged), &match)) << logged;
  };

  ASSERT_NO_FATAL_FAILURE(
      reload("    affinity: off\n    overflow_limit: 2\n",
             "SIGHUP: model m: affinity off, overflow limit 2, as .* now says"));
  json::object admin = Admin(port_);
  EXPECT_FALSE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 2);
  EXPECT_FALSE(admin.at("overflow_limit_auto").as_bool());
  EXPECT_EQ(conversation.Next(port_).route, "balanced");

  // Back to auto (a quarter of --max-num-seqs 32), another policy, admission and idle time;
  // tls_verify needs a restart.
  ASSERT_NO_FATAL_FAILURE(
      reload("    policy: round-robin\n    admission: fifo\n    session_idle_timeout_s: 60\n"
             "    tls_verify: false\n",
             "SIGHUP: model m: affinity on, overflow limit 8 \\(auto\\), policy round-robin, "
             "admission fifo, session idle timeout 60 s"));
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(
      std::regex(R"(SIGHUP: models\[0\] \(m\): tls_verify in .*: not applied)"), &match));
  admin = Admin(port_);
  EXPECT_TRUE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 8);
  EXPECT_TRUE(admin.at("overflow_limit_auto").as_bool());
  EXPECT_EQ(admin.at("policy").as_string(), "round-robin");
  EXPECT_EQ(admin.at("admission").as_string(), "fifo");

  // A file a start would refuse changes nothing, and says why.
  ASSERT_NO_FATAL_FAILURE(reload("    affinity: off\n    policy: nonsense\n",
                                 "SIGHUP: .* is not applied .*unknown policy 'nonsense'"));
  EXPECT_TRUE(Admin(port_).at("affinity").as_bool());
  // The two reloads that changed something are noted for the panel's chart.
  std::vector<std::string> noted;
  const json::object last = Admin(port_);
  for (const json::value& c : last.at("changes").as_array()) {
    EXPECT_EQ(c.at("by").as_string(), "SIGHUP") << c;
    noted.emplace_back(c.at("what").as_string());
  }
  EXPECT_EQ(noted, (std::vector<std::string>{
                       "affinity off, overflow limit 2",
                       "affinity on, overflow limit 8 (auto), policy round-robin, admission fifo, "
                       "session idle timeout 60 s"}));
}

// SIGHUP applies a model's edited aliases (a name added is routed, one taken out is not, and
// /v1/models lists them as they are now) and turns the access log on.
TEST_F(GatewayTest, SighupAppliesAModelsAliasesAndTheAccessLog) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100"));
  const std::string model = "models:\n  - name: m\n    url: http://127.0.0.1:9\n";
  const std::string config = TempFile("aliases.yaml", model + "    aliases: [claude-*]\n");
  std::vector<std::string> args = {"serve", "--listen", "127.0.0.1:0", "--config", config};
  args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
  std::vector<uint16_t> ports;
  gateway_ = StartWarden(args, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];
  const auto status = [&](const std::string& name) {
    return HttpPost(port_, "/v1/chat/completions",
                    R"({"model":")" + name +
                        R"(","max_tokens":4,"messages":[{"role":"user","content":"hi"}]})")
        .status;
  };
  EXPECT_EQ(status("claude-sonnet-4-5"), 200);
  EXPECT_EQ(status("gpt-4o"), 404);

  std::ofstream(config, std::ios::trunc) << model << "    aliases: [gpt-4o]\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  std::smatch match;
  ASSERT_TRUE(
      gateway_->WaitForLine(std::regex("SIGHUP: model m: aliases gpt-4o, as .* now says"), &match));
  EXPECT_EQ(status("gpt-4o"), 200);
  EXPECT_EQ(status("claude-sonnet-4-5"), 404);
  EXPECT_NE(HttpGet(port_, "/v1/models").body.find(R"("id":"gpt-4o")"), std::string::npos);
  EXPECT_EQ(Admin(port_).at("aliases"), json::array{"gpt-4o"});

  // The access log, turned on by the file (said once every thread has it): the next request
  // has its line.
  std::ofstream(config, std::ios::trunc) << "access_log: true\n"
                                         << model << "    aliases: [gpt-4o]\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(std::regex("SIGHUP: the access log on"), &match));
  EXPECT_EQ(status("gpt-4o"), 200);
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/chat/completions 200 [0-9.]+ms id=\S+ model=m)"), &match));

  // max_num_seqs: the auto overflow limit follows it at once.
  EXPECT_EQ(Admin(port_).at("overflow_limit").as_int64(), 64);  // a quarter of the default 256
  std::ofstream(config, std::ios::trunc) << "access_log: true\n"
                                         << model << "    aliases: [gpt-4o]\n"
                                         << "    max_num_seqs: 32\n    scrape_interval_s: 0.5\n"
                                         << "    max_sessions: 50\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(
      std::regex(
          R"(SIGHUP: model m: max_num_seqs 32 \(overflow limit 8, auto\), scrape interval 0.5 s, at most 50 sessions, as)"),
      &match));
  const json::object admin = Admin(port_);
  EXPECT_EQ(admin.at("max_num_seqs").as_int64(), 32);
  EXPECT_EQ(admin.at("scrape_interval_s").as_double(), 0.5);
  EXPECT_EQ(admin.at("max_sessions").as_int64(), 50);
  EXPECT_EQ(admin.at("session_idle_timeout_s").as_double(), 600);
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 8);
  EXPECT_TRUE(admin.at("overflow_limit_auto").as_bool());
}

// What a PATCH set outlives a restart through the state file while the config says what it
// said then; a setting the config changes afterwards (at a restart or on SIGHUP) is the config's.
TEST_F(GatewayTest, APatchedSettingOutlivesARestartUntilTheConfigChangesIt) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100"));
  const std::string model = "models:\n  - name: m\n    url: http://127.0.0.1:9\n";
  const std::string config = TempFile("config.yaml", model);
  const std::string state = ::testing::TempDir() + "/warden-patched-state.json";
  std::filesystem::remove(state);
  const std::vector<std::string> flags = {"--config", config, "--state-file", state};
  ASSERT_NO_FATAL_FAILURE(StartGateway(flags));
  ASSERT_EQ(
      HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"affinity": false, "overflow_limit": 3})")
          .status,
      200);
  const json::object patched = {{"affinity", {{"value", "off"}, {"config", "on"}}},
                                {"overflow_limit", {{"value", "3"}, {"config", "auto"}}}};
  EXPECT_EQ(Admin(port_).at("patched"), patched);
  ASSERT_EQ(gateway_->Stop(), 0);  // saved as it stops

  ASSERT_NO_FATAL_FAILURE(StartGateway(flags));
  json::object admin = Admin(port_);
  EXPECT_FALSE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 3);
  EXPECT_EQ(admin.at("patched"), patched);
  // (Logged before the gateway listens: among the lines already read.)
  const auto logged = [&](const std::string& pattern) {
    return std::any_of(
        gateway_->lines().begin(), gateway_->lines().end(),
        [&](const std::string& l) { return std::regex_search(l, std::regex(pattern)); });
  };
  EXPECT_TRUE(logged("model m: affinity off as set through the admin API before the restart"));
  // The summary says what is in effect, not the config's values.
  EXPECT_TRUE(logged("model m: 2 replica\\(s\\) at .*, affinity off, overflow limit 3,"));
  EXPECT_EQ(Conversation("after-restart", 40).Next(port_).route, "balanced");
  ASSERT_EQ(gateway_->Stop(), 0);

  // The file now gives an overflow limit: it wins; the affinity PATCH still holds.
  std::ofstream(config, std::ios::trunc) << model << "    overflow_limit: 5\n";
  ASSERT_NO_FATAL_FAILURE(StartGateway(flags));
  admin = Admin(port_);
  EXPECT_FALSE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 5);
  EXPECT_EQ(admin.at("patched"),
            (json::object{{"affinity", {{"value", "off"}, {"config", "on"}}}}));
  EXPECT_TRUE(logged(
      "model m: overflow_limit 3, set through the admin API before the restart, is dropped: the "
      "config says 5 now"));
  std::smatch match;

  // A SIGHUP that finds the file changed the affinity applies the file's: nothing is patched.
  std::ofstream(config, std::ios::trunc) << model << "    overflow_limit: 5\n    affinity: on\n"
                                         << "    policy: round-robin\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(std::regex("SIGHUP: model m: policy round-robin"), &match));
  admin = Admin(port_);
  EXPECT_FALSE(admin.at("affinity").as_bool());  // the file's affinity did not change: on
  EXPECT_EQ(admin.at("patched").as_object().size(), 1u);
  std::ofstream(config, std::ios::trunc) << model << "    overflow_limit: 5\n    affinity: off\n"
                                         << "    policy: round-robin\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(std::regex("SIGHUP: model m: affinity off"), &match));
  EXPECT_EQ(Admin(port_).at("patched"), json::object{});
  std::filesystem::remove(state);
}

// `serve --check-replicas` asks each server once, as a start's first scrape does: a server as
// configured exits 0; engines other than data_parallel_size, a server serving another name, one
// that does not report cached prompt tokens or none answering exit 3, each named with the
// warning a start would log.
TEST_F(GatewayTest, CheckReplicasSaysWhetherEachServerIsAsConfigured) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  const std::string url = upstream_args_[1];
  const auto check = [&](std::vector<std::string> args, const std::string& expected) {
    args.insert(args.begin(), {WARDEN_BIN, "serve", "--check-replicas"});
    auto process = ChildProcess::Start(args);
    EXPECT_NE(process, nullptr);
    std::smatch line;
    EXPECT_TRUE(process->WaitForLine(std::regex(expected), &line)) << expected;
    return process->Wait(std::chrono::seconds(20));
  };
  EXPECT_EQ(check({"--model", "m", "--url", url, "--dp", "2"},
                  "model m: " + url +
                      " answers: serves m, 2 engines, [0-9]+ tokens of KV cache "
                      "each, SIMULATED"),
            0);
  EXPECT_EQ(check({"--model", "m", "--url", url, "--dp", "4"},
                  "reports 2 data-parallel engine\\(s\\) in /metrics, and the config has 4"),
            3);
  EXPECT_EQ(check({"--model", "qwen", "--url", url, "--dp", "2"}, "serves 'm', not 'qwen'"), 3);
  // A server that leaves the cached share out of its usage (vLLM without
  // --enable-prompt-tokens-details) is found by two one-token requests.
  std::vector<uint16_t> quiet_ports;
  const auto quiet = StartWarden({"sim", "--port", "0", "--model", "m", "--time-scale", "100",
                                  "--api-latency", "0", "--no-prompt-tokens-details"},
                                 &quiet_ports);
  ASSERT_NE(quiet, nullptr);
  EXPECT_EQ(check({"--model", "m", "--url", "http://127.0.0.1:" + std::to_string(quiet_ports[0])},
                  "does not say how many prompt tokens it read from its prefix cache .*start "
                  "vLLM with --enable-prompt-tokens-details"),
            3);
  // A vLLM from before its API server had Anthropic's Messages API: Claude Code's requests
  // would all get 404 (found by review). A warning: a server for OpenAI's clients alone is right.
  FakeReplica old_vllm([](const std::string& request) {
    const auto answer = [](const std::string& status, const std::string& body) {
      return FakeAnswer{.bytes = "HTTP/1.1 " + status +
                                 "\r\nContent-Type: application/json\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body};
    };
    if (request.starts_with("GET /v1/models"))
      return answer("200 OK", R"({"object":"list","data":[{"id":"m","object":"model"}]})");
    if (request.starts_with("POST /v1/completions"))
      return answer("200 OK",
                    R"({"choices":[{"text":"a"}],"usage":{"prompt_tokens":90,)"
                    R"("completion_tokens":1,"prompt_tokens_details":{"cached_tokens":80}}})");
    return answer("404 Not Found", R"({"detail":"Not Found"})");
  });
  old_vllm.SetMetrics(
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\n"
      "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"100\"} 1\n");
  EXPECT_EQ(
      check({"--model", "m", "--url", old_vllm.url()},
            "has no /v1/messages \\(HTTP 404\\): Claude Code"),
      3);  // (for its model list, which the fake does not serve; the warning alone fails nothing)
  const std::string nobody = "http://127.0.0.1:" + std::to_string(FreePort());
  EXPECT_EQ(check({"--model", "m", "--url", url, "--url", nobody},
                  "replicas NOT OK: 2 of 2 server\\(s\\) not as configured"),
            3);
}

// `serve --check` reads the config as serve would, says what it would serve and exits 0, starting
// nothing; a wrong config, or a certificate it cannot read, exits 2 with the reason.
TEST(GatewayCheckTest, CheckSaysWhetherAConfigIsRightAndStartsNothing) {
  const uint16_t port = FreePort();
  const std::string good =
      TempFile("check-good.yaml", "listen: 127.0.0.1:" + std::to_string(port) +
                                      "\nmodels:\n  - name: m\n    url: http://127.0.0.1:9\n"
                                      "    data_parallel_size: 2\n");
  auto check = ChildProcess::Start({WARDEN_BIN, "serve", "--config", good, "--check"});
  ASSERT_NE(check, nullptr);
  std::smatch line;
  EXPECT_TRUE(check->WaitForLine(
      std::regex("model m: 2 replica\\(s\\) at http://127.0.0.1:9.*overflow limit "
                 "64 \\(auto: max_num_seqs 256 / 4\\)"),
      &line));
  // Where it would listen, and the auto overflow limit's source (found by review).
  EXPECT_TRUE(check->WaitForLine(std::regex("configuration OK: 1 model\\(s\\), 2 replica\\(s\\), "
                                            "to listen on 127.0.0.1:" +
                                            std::to_string(port)),
                                 &line));
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 0);
  EXPECT_FALSE(PortListening(port));
  // An empty config path (an unset variable in a unit file) is an error, not the demo.
  check = ChildProcess::Start(
      {WARDEN_BIN, "serve", "--config", "", "--listen", "127.0.0.1:" + std::to_string(port)});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);
  EXPECT_FALSE(PortListening(port));

  const std::string bad = TempFile("check-bad.yaml", "models:\n  - name: m\n    url: 5\n");
  check = ChildProcess::Start({WARDEN_BIN, "serve", "--config", bad, "--check"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);

  // A traffic log where a folder is: refused by --check as by serve, 2 both, the file named (found
  // by review: --check said OK, and serve then failed with 1).
  const std::string folder_log = TempFile(
      "check-folder-log.yaml", "listen: 127.0.0.1:" + std::to_string(port) +
                                   "\ntraffic_log: " + ::testing::TempDir() +
                                   "\nmodels:\n  - name: m\n    url: http://127.0.0.1:9\n");
  for (const std::string flag : {" --check", ""}) {
    FILE* pipe = ::popen(
        (std::string(WARDEN_BIN) + " serve --config " + folder_log + flag + " 2>&1").c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string said;
    char chunk[512];
    while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) said.append(chunk, n);
    EXPECT_EQ(WEXITSTATUS(::pclose(pipe)), 2) << flag;
    EXPECT_NE(said.find(folder_log + ": traffic_log: cannot open"), std::string::npos) << said;
    EXPECT_NE(said.find("Is a directory"), std::string::npos) << said;
    EXPECT_FALSE(PortListening(port));
  }

  // A state file a start would set aside is said by --check, which still exits 0 (a start goes on
  // without it); found by review: nothing was said.
  const std::string state = ::testing::TempDir() + "/check-state-" + std::to_string(::getpid());
  {
    std::ofstream damaged(state);
    damaged << "{ not a state file";
  }
  const std::string with_state =
      TempFile("check-state.yaml", "listen: 127.0.0.1:" + std::to_string(port) +
                                       "\nsession:\n  state_file: " + state +
                                       "\nmodels:\n  - name: m\n    url: http://127.0.0.1:9\n");
  {
    FILE* pipe = ::popen(
        (std::string(WARDEN_BIN) + " serve --config " + with_state + " --check 2>&1").c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string said;
    char chunk[512];
    while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) said.append(chunk, n);
    EXPECT_EQ(WEXITSTATUS(::pclose(pipe)), 0);
    EXPECT_NE(said.find("a start would set it aside and begin with no conversations"),
              std::string::npos)
        << said;
    EXPECT_NE(said.find("configuration OK"), std::string::npos) << said;
  }
  std::remove(state.c_str());

  check = ChildProcess::Start({WARDEN_BIN, "serve", "--config", good, "--check", "--tls-cert-file",
                               ::testing::TempDir() + "/no-such-cert.pem", "--tls-key-file",
                               ::testing::TempDir() + "/no-such-key.pem"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);
  EXPECT_FALSE(PortListening(port));

  // A repeatable flag takes one value: CLI11 read "[]" as an empty list and took the --check after
  // it for the value, and the gateway started.
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  check = ChildProcess::Start({WARDEN_BIN, "serve", "--listen", listen, "--model", "m", "--url",
                               "http://127.0.0.1:9", "--alias", "[]", "--check"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 0);
  EXPECT_FALSE(PortListening(port));
  // Nor does a flag whose value is missing take the next flag for it.
  check = ChildProcess::Start({WARDEN_BIN, "serve", "--listen", listen, "--url",
                               "http://127.0.0.1:9", "--model", "m", "--alias", "--check"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);
  EXPECT_FALSE(PortListening(port));
  // A flag the parser refuses is a usage error too: 2, as the config's.
  check = ChildProcess::Start({WARDEN_BIN, "serve", "--listen", listen, "--model", "m", "--url",
                               "http://127.0.0.1:9", "--max-num-seqs", "abc", "--check"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);
  // A value out of range names the flag that gave it, not a config key nobody wrote.
  const std::string command = std::string(WARDEN_BIN) +
                              " serve --model m --url http://127.0.0.1:9 --scrape-interval 0 "
                              "--check 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string said;
  char chunk[512];
  while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) said.append(chunk, n);
  EXPECT_EQ(WEXITSTATUS(::pclose(pipe)), 2);
  EXPECT_NE(said.find("command line: --scrape-interval: 0 must be"), std::string::npos) << said;
  // The demo's too (checked before its replicas start).
  const std::string demo = std::string(WARDEN_BIN) + " serve --demo --drain-delay 7200 2>&1";
  pipe = ::popen(demo.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  said.clear();
  while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) said.append(chunk, n);
  EXPECT_EQ(WEXITSTATUS(::pclose(pipe)), 2);
  EXPECT_NE(said.find("command line: --drain-delay: must be"), std::string::npos) << said;
}

// A bad flag stops the demo before its simulated replicas start (they were started, and said so,
// before the listen address was checked).
TEST(GatewayCheckTest, TheDemosFlagsAreCheckedBeforeItsReplicasStart) {
  auto demo = ChildProcess::Start({WARDEN_BIN, "serve", "--listen", "127.0.0.1:99999"});
  ASSERT_NE(demo, nullptr);
  std::smatch line;
  EXPECT_FALSE(demo->WaitForLine(std::regex("DEMO"), &line, std::chrono::seconds(10)));
  EXPECT_EQ(demo->Wait(std::chrono::seconds(10)), 2);
}

}  // namespace
}  // namespace warden::testing
