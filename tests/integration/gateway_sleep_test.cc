// `warden serve`: vLLM's sleep mode and cache resets through the gateway.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// vLLM's cache resets act on the server they reach: through the gateway they reach every server
// (found by review: one, by load), and the answer says which did not do it.
TEST_F(GatewayTest, ACacheResetReachesEveryServer) {
  std::mutex mu;
  std::vector<std::string> seen;
  const auto server = [&](bool refuses) {
    return [&, refuses](const std::string& request) {
      {
        std::lock_guard lock(mu);
        seen.push_back(request.substr(0, request.find("\r\n")));
      }
      FakeAnswer a;
      a.bytes =
          refuses ? "HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\n{}" : JsonResponse("");
      return a;
    };
  };
  FakeReplica one(server(false)), two(server(false)), refusing(server(true));
  upstream_args_ = {"--url", one.url(), "--url", two.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult r = HttpPost(port_, "/reset_prefix_cache?reset_running_requests=true", "");
  EXPECT_EQ(r.status, 200) << r.body;
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(seen.size(), 2u);
    for (const std::string& line : seen)
      EXPECT_EQ(line, "POST /reset_prefix_cache?reset_running_requests=true HTTP/1.1");
  }
  gateway_.reset();
  upstream_args_ = {"--url", one.url(), "--url", refusing.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult failed = HttpPost(port_, "/reset_mm_cache", "");
  EXPECT_EQ(failed.status, 502) << failed.body;
  EXPECT_NE(failed.body.find("done on 1 of 2 servers"), std::string::npos) << failed.body;
  EXPECT_NE(failed.body.find(refusing.url() + " answered 400"), std::string::npos) << failed.body;
  // Every server refusing the gateway's key is not the client's fault: a 502 naming them.
  FakeReplica locked([](const std::string& request) {
    FakeAnswer a;
    a.bytes =
        request.starts_with("GET /health")
            ? JsonResponse("")
            : "HTTP/1.1 401 Unauthorized\r\nContent-Length: 24\r\n\r\n{\"error\":\"Unauthorized\"}";
    return a;
  });
  gateway_.reset();
  upstream_args_ = {"--url", locked.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult key = HttpPost(port_, "/reset_prefix_cache", "");
  EXPECT_EQ(key.status, 502) << key.body;
  EXPECT_NE(key.body.find(locked.url() + " answered 401"), std::string::npos) << key.body;
}

// With client keys and an admin token: sleeps and wakes are the admin's (a client key is refused,
// however the path is spelt), and the admin reads GET /is_sleeping with its token, nothing else.
TEST_F(GatewayTest, SleepAndWakeAreTheAdminsWithClientKeys) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", {"--enable-sleep-mode"}));
  const std::string config_path = ::testing::TempDir() + "/warden-sleep-keys.yaml";
  {
    std::ofstream f(config_path);
    f << "admin_token: s3cret\napi_keys: [{key: sk-client}]\nmodels:\n"
      << "  - {name: m, url: 'http://127.0.0.1:" << sim_ports_[0] << "'}\n";
  }
  std::vector<uint16_t> ports;
  gateway_ = StartWarden({"serve", "--config", config_path, "--listen", "127.0.0.1:0"}, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];
  const Headers client = {{"Authorization", "Bearer sk-client"}};
  const Headers admin = {{"Authorization", "Bearer s3cret"}};
  for (const char* path : {"/sleep", "/%73leep", "//wake_up", "/x/../reset_prefix_cache"})
    EXPECT_EQ(HttpPost(port_, path, "", client).status, 401) << path;
  EXPECT_EQ(HttpGet(port_, "/is_sleeping").status, 401);
  EXPECT_EQ(HttpCall(port_, "GET", "/is_sleeping", "", client).status, 200);
  ASSERT_EQ(HttpPost(port_, "/sleep", "", admin).status, 200);
  const HttpResult read = HttpCall(port_, "GET", "/is_sleeping", "", admin);
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(json::parse(read.body).at("is_sleeping"), json::value(true));
  EXPECT_EQ(HttpPost(port_, "/is_sleeping", "", admin).status, 401);  // a read only
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), admin).status, 401);
  ASSERT_EQ(HttpPost(port_, "/wake_up", "", admin).status, 200);
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), client).status, 200);
  // So are the other routes of vLLM's development mode, which control the engine (found by
  // review: a client key reached /collective_rpc); the admin's go on to a replica.
  for (const char* path : {"/collective_rpc", "/pause/", "/start_profile", "/%73erver_info"}) {
    for (const Headers& who : {client, Headers{}}) {
      const HttpResult refused = HttpPost(port_, path, "{}", who);
      EXPECT_EQ(refused.status, 401) << path;
      EXPECT_NE(refused.body.find("controls the engine"), std::string::npos) << refused.body;
      // Without a body too (found by review: the head's check ran only for one with a body).
      const HttpResult bodiless = HttpCall(port_, "POST", path, "", who);
      EXPECT_EQ(bodiless.status, 401) << path << bodiless.body;
      EXPECT_EQ(HttpCall(port_, "GET", path, "", who).status, 401) << path;
    }
  }
  const HttpResult rpc = HttpPost(port_, "/collective_rpc", "{}", admin);
  EXPECT_EQ(rpc.status, 404) << rpc.body;  // the simulator has no such route
  EXPECT_EQ(rpc.header("x-warden-replica"), "0");
}

// Without vLLM's development mode every server answers 404 to these paths: the gateway says why.
TEST_F(GatewayTest, SleepAndResetOnServersWithoutDevelopmentModeAreExplained) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (const char* path : {"/sleep", "/wake_up"}) {
    const HttpResult r = HttpPost(port_, path, "");
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_NE(r.body.find("VLLM_SERVER_DEV_MODE=1"), std::string::npos) << r.body;
  }
  const HttpResult asked = HttpGet(port_, "/is_sleeping");
  EXPECT_EQ(asked.status, 404) << asked.body;
  EXPECT_NE(asked.body.find("VLLM_SERVER_DEV_MODE=1"), std::string::npos) << asked.body;
}

// A server whose engines sleep (vLLM's sleep mode: vllm:engine_sleep_state{sleep_state="awake"}
// 0) holds neither weights nor cache: out of service, what it holds given up, its conversations
// re-homed, and the chart says why; in service again once awake.
TEST_F(GatewayTest, AServerWhoseEnginesSleepIsOutOfServiceUntilTheyWake) {
  const std::string awake =
      "vllm:engine_sleep_state{model_name=\"m\",engine=\"0\",sleep_state=\"awake\"} ";
  // A request for "stuck" gets no answer there: a sleeping vLLM holds what it had.
  FakeReplica sleeper([](const std::string& request) {
    return request.find("stuck") != std::string::npos ? FakeAnswer{} : AnswerOkJson(request);
  });
  FakeReplica other(AnswerOkJson);
  sleeper.SetMetrics(awake + "1\n");
  upstream_args_ = {"--url", sleeper.url(), "--url", other.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "0.1"}));
  const HttpResult first =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "homed"}});
  ASSERT_EQ(first.header("x-warden-replica"), "0");
  std::future<HttpResult> stuck = std::async(std::launch::async, [&] {
    return HttpPost(port_, "/v1/chat/completions", ScenarioRequest("stuck"),
                    {{"x-session-id", "homed"}});
  });
  ASSERT_TRUE(Eventually([&] { return sleeper.requests() == 2; }));
  sleeper.SetMetrics(awake + "0\n");
  // What it held is given up, and sent to the other server (nothing of it had reached the
  // client): not a wait until the server wakes.
  ASSERT_EQ(stuck.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  const HttpResult resent = stuck.get();
  EXPECT_EQ(resent.status, 200);
  EXPECT_EQ(resent.header("x-warden-replica"), "1");
  ASSERT_TRUE(
      Eventually([&] { return !Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
  const json::object model = Admin(port_);
  EXPECT_NE(model.at("replicas").at(0).at("health_problem").as_string().find("asleep"),
            std::string_view::npos)
      << model.at("replicas").at(0);
  EXPECT_NE(model.at("changes").at(0).at("what").as_string().find("replica 0 down: asleep"),
            std::string_view::npos)
      << model.at("changes");
  const HttpResult moved =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "homed"}});
  EXPECT_EQ(moved.header("x-warden-replica"), "1");  // its new home
  sleeper.SetMetrics(awake + "1\n");
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
}

// The same with the simulator's sleep mode, as vLLM's: a turn sent as the server falls asleep (held
// there, or routed after the gateway saw it) is answered by the other server, the conversation
// moves, and the server is back in service once woken.
TEST_F(GatewayTest, ASimulatorPutToSleepIsPassedOverUntilWoken) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--enable-sleep-mode"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "0.1"}));
  const HttpResult first =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "homed"}});
  ASSERT_EQ(first.status, 200);
  const int home = std::stoi(first.header("x-warden-replica"));
  ASSERT_EQ(HttpPost(sim_ports_[home], "/sleep?level=1", "").status, 200);
  const HttpResult next =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "homed"}});
  EXPECT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(next.header("x-warden-replica"), std::to_string(1 - home));
  ASSERT_TRUE(
      Eventually([&] { return !Admin(port_).at("replicas").at(home).at("healthy").as_bool(); }));
  EXPECT_NE(Admin(port_).at("replicas").at(home).at("health_problem").as_string().find("asleep"),
            std::string_view::npos);
  ASSERT_EQ(HttpPost(sim_ports_[home], "/wake_up", "").status, 200);
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(home).at("healthy").as_bool(); }));
  const HttpResult fresh =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "new-one"}});
  EXPECT_EQ(fresh.header("x-warden-replica"), std::to_string(home));  // the emptier one again
}

// vLLM's sleep mode and cache reset through the gateway reach every server, and routing knows
// when the answer comes (a scrape out of turn: the interval here is 30 s): asleep by hand, both
// are out of service even with idle_sleep on (a request would not wake them); woken, the next
// request is served.
TEST_F(GatewayTest, SleepWakeAndCacheResetReachEveryServerAndRoutingKnowsAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--enable-sleep-mode"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "30", "--idle-sleep", "on"}));
  const std::string turn = R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":")" +
                           Words("history", 200) + R"("}]})";
  const auto cached = [](const HttpResult& r) {
    return json::parse(r.body)
        .at("usage")
        .at("prompt_tokens_details")
        .at("cached_tokens")
        .as_int64();
  };
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", turn, {{"x-session-id", "s"}}).status, 200);
  EXPECT_GT(cached(HttpPost(port_, "/v1/chat/completions", turn, {{"x-session-id", "s"}})), 0);

  const HttpResult slept = HttpPost(port_, "/sleep?level=1", "");
  EXPECT_EQ(slept.status, 200) << slept.body;
  EXPECT_EQ(json::parse(slept.body), json::parse(R"({"status":"sleeping","level":1})"));
  for (uint16_t sim : sim_ports_)
    EXPECT_EQ(HttpGet(sim, "/is_sleeping").body, R"({"is_sleeping":true})");
  const std::string metrics = HttpGet(port_, "/metrics").body;
  for (const char* replica : {"0", "1"}) {
    const std::string labels = std::string(R"({model="m",replica=")") + replica + R"("})";
    EXPECT_NE(metrics.find("warden_replica_asleep" + labels + " 1"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("warden_replica_healthy" + labels + " 0"), std::string::npos);
  }
  const json::value sleeping = json::parse(HttpGet(port_, "/is_sleeping").body);
  EXPECT_EQ(sleeping.at("is_sleeping"), json::value(true));
  EXPECT_EQ(sleeping.at("servers").as_array().size(), 2u);
  // Asleep, and not waking though requests went there just before: no request wakes them.
  const json::object asleep = Admin(port_);
  for (const auto& r : asleep.at("replicas").as_array()) {
    EXPECT_TRUE(r.at("asleep").as_bool()) << r;
    EXPECT_FALSE(r.at("waking").as_bool()) << r;
  }
  const HttpResult refused = HttpPost(port_, "/v1/chat/completions", turn, {{"x-session-id", "s"}});
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("2 asleep"), std::string::npos) << refused.body;
  EXPECT_NE(refused.body.find("POST /wake_up to the gateway wakes every server"), std::string::npos)
      << refused.body;
  // Put to sleep by hand: idle_sleep is no fix (found by review: the message said to set it).
  EXPECT_EQ(refused.body.find("idle_sleep"), std::string::npos) << refused.body;

  ASSERT_EQ(HttpPost(port_, "/wake_up", "").status, 200);
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", turn, {{"x-session-id", "s"}}).status, 200);
  EXPECT_EQ(json::parse(HttpGet(port_, "/is_sleeping").body).at("is_sleeping"), json::value(false));
  EXPECT_GT(cached(HttpPost(port_, "/v1/chat/completions", turn, {{"x-session-id", "s"}})), 0);
  ASSERT_EQ(HttpPost(port_, "/reset_prefix_cache", "").status, 200);
  EXPECT_EQ(cached(HttpPost(port_, "/v1/chat/completions", turn, {{"x-session-id", "s"}})), 0);
  // Every server refusing alike: the request's fault, passed on (not a 502).
  const HttpResult bad = HttpPost(port_, "/sleep?level=7", "");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(json::parse(bad.body).at("error").at("param"), "query.level");
  // Asleep, a server still takes a cache reset (it is out of service, not down).
  ASSERT_EQ(HttpPost(port_, "/sleep?level=0", "").status, 200);
  EXPECT_EQ(HttpPost(port_, "/reset_prefix_cache", "").status, 200);
  ASSERT_EQ(HttpPost(port_, "/wake_up", "").status, 200);

  sims_[1]->Kill();
  const HttpResult half = HttpPost(port_, "/sleep", "");
  EXPECT_EQ(half.status, 502);
  EXPECT_NE(half.body.find("done on 1 of 2 servers"), std::string::npos) << half.body;
  EXPECT_NE(half.body.find("127.0.0.1:" + std::to_string(sim_ports_[1])), std::string::npos)
      << half.body;
  EXPECT_EQ(HttpGet(sim_ports_[0], "/is_sleeping").body, R"({"is_sleeping":true})");
  EXPECT_EQ(HttpGet(port_, "/is_sleeping").status, 502);
}

// vLLM's --sleep-idle-ttl puts idle servers to sleep and wakes them at their next request: with
// idle_sleep on, a sleeping server stays in service (its conversations stay home and wake it);
// without, it is out of service, and the reason says what to set.
TEST_F(GatewayTest, ServersThatSleepWhenIdleStayInServiceWithIdleSleep) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "20", {"--enable-sleep-mode", "--sleep-idle-ttl", "2"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "0.1", "--idle-sleep", "on"}));
  EXPECT_TRUE(Admin(port_).at("idle_sleep").as_bool());
  const HttpResult first =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "napper"}});
  ASSERT_EQ(first.status, 200);
  const int home = std::stoi(first.header("x-warden-replica"));
  const auto replica = [&] { return Admin(port_).at("replicas").at(home).as_object(); };
  ASSERT_TRUE(Eventually([&] { return replica().at("asleep").as_bool(); }));
  EXPECT_TRUE(replica().at("healthy").as_bool());
  // The other server (idle from the start) is asleep too, as the gateway last read it: with one
  // awake, the conversation would move there rather than wake its home (a flake under load, when
  // a scrape of the other was late).
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(1 - home).at("asleep").as_bool(); }));
  const HttpResult again =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "napper"}});
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.header("x-warden-replica"), std::to_string(home));
  EXPECT_EQ(again.header("x-warden-route"), "sticky");
  EXPECT_EQ(Total(Admin(port_), "rehomed"), 0);

  EXPECT_EQ(gateway_->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "0.1"}));
  ASSERT_TRUE(Eventually([&] { return !replica().at("healthy").as_bool(); }));
  EXPECT_NE(replica().at("health_problem").as_string().find("set idle_sleep: on"),
            std::string_view::npos)
      << replica();
  // With both asleep, the 503 says why, and what to set.
  ASSERT_TRUE(Eventually([&] {
    int out = 0;
    const json::object model = Admin(port_);
    for (const auto& r : model.at("replicas").as_array())
      out += r.at("asleep").as_bool() && !r.at("healthy").as_bool();
    return out == 2;
  }));
  const HttpResult none =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "napper"}});
  EXPECT_EQ(none.status, 503);
  EXPECT_NE(none.body.find("2 asleep"), std::string::npos) << none.body;
  EXPECT_NE(none.body.find("set idle_sleep: on"), std::string::npos) << none.body;
  // One that dies asleep is down, not asleep any more: it may come back awake.
  sims_[0]->Kill();
  ASSERT_TRUE(
      Eventually([&] { return !Admin(port_).at("replicas").at(0).at("asleep").as_bool(); }));
  const HttpResult one_left =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "napper"}});
  EXPECT_NE(one_left.body.find("1 asleep"), std::string::npos) << one_left.body;
}

// A server woken by a request (idle_sleep) and then put to sleep through the gateway is asleep,
// and not waking: no request wakes it now (the admin API said waking, as the request had come).
TEST_F(GatewayTest, AServerPutToSleepThroughTheGatewayIsNotWaking) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "20", {"--enable-sleep-mode", "--sleep-idle-ttl", "2"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "0.1", "--idle-sleep", "on"}));
  const auto replica = [&] { return Admin(port_).at("replicas").at(0).as_object(); };
  ASSERT_TRUE(Eventually([&] { return replica().at("asleep").as_bool(); }));
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x")).status, 200);
  ASSERT_EQ(HttpPost(port_, "/sleep?level=1", "").status, 200);
  ASSERT_TRUE(Eventually([&] { return replica().at("asleep").as_bool(); }));
  EXPECT_FALSE(replica().at("waking").as_bool()) << replica();
}

// With idle_sleep, a wake (seconds with vLLM) is spent only when the awake servers are busy: a
// conversation whose home fell asleep (its cache went with the sleep) moves to an awake server
// with room, and so does a new one, though the sleeping server has nothing in flight; with the
// awake one at the overflow limit, a new conversation wakes the sleeping server.
TEST_F(GatewayTest, WithIdleSleepASleepingServerIsWokenOnlyWhenTheAwakeOnesAreBusy) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "20", {"--enable-sleep-mode", "--sleep-idle-ttl", "4"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "0.05", "--idle-sleep", "on"}));
  const HttpResult first =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "napper"}});
  ASSERT_EQ(first.status, 200);
  const int home = std::stoi(first.header("x-warden-replica"));
  const int other = 1 - home;
  const auto asleep = [&](int replica) {
    const json::object model = Admin(port_);
    return model.at("replicas").at(replica).at("asleep").as_bool();
  };
  ASSERT_TRUE(Eventually([&] { return asleep(0) && asleep(1); }));
  // A request sent to the other server directly keeps it awake (the gateway counts nothing in
  // flight there).
  BackgroundStream keeps_awake(sim_ports_[other], "direct", 16000, "stay awake");
  ASSERT_TRUE(Eventually([&] { return keeps_awake.started() && !asleep(other); }));
  const HttpResult moved =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "napper"}});
  EXPECT_EQ(moved.status, 200) << moved.body;
  EXPECT_EQ(moved.header("x-warden-replica"), std::to_string(other));
  EXPECT_EQ(moved.header("x-warden-route"), "rehome");
  const HttpResult fresh =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "fresh"}});
  EXPECT_EQ(fresh.header("x-warden-replica"), std::to_string(other));
  EXPECT_EQ(fresh.header("x-warden-route"), "new");
  EXPECT_TRUE(asleep(home));
  // At the overflow limit (1, with this stream in flight through the gateway), the next new
  // conversation wakes the sleeping server.
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"overflow_limit": 1})").status,
            200);
  BackgroundStream busy(port_, "busy", 16000, "keep it busy");
  ASSERT_TRUE(Eventually([&] { return busy.started(); }));
  const HttpResult waker =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "waker"}});
  EXPECT_EQ(waker.status, 200) << waker.body;
  EXPECT_EQ(waker.header("x-warden-replica"), std::to_string(home));
  EXPECT_EQ(waker.header("x-warden-route"), "new");
  EXPECT_EQ(HttpGet(sim_ports_[home], "/is_sleeping").body, R"({"is_sleeping":false})");
  {  // waking until a scrape says it woke
    const json::object woken = Admin(port_).at("replicas").at(home).as_object();
    EXPECT_TRUE(woken.at("waking").as_bool() || !woken.at("asleep").as_bool()) << woken;
  }
  ASSERT_TRUE(Eventually([&] { return !asleep(home); }));
  EXPECT_FALSE(Admin(port_).at("replicas").at(home).at("waking").as_bool());
  sims_[other]->Kill();  // ends both streams
}

}  // namespace
}  // namespace warden::testing
