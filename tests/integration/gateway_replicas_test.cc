// `warden serve`: replicas that fail, drop requests, stall, are drained or come back; what their
// metrics say.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// An operator drains a replica through the admin API (before restarting it): the request it has
// in flight finishes there, its conversations move at their next turn, new ones go elsewhere, and
// taken back it gets new conversations again. With every healthy replica drained, the 503 says so.
TEST_F(GatewayTest, ADrainedReplicaFinishesWhatItHasAndTakesNothingNew) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "10"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto replica = [&](int i) { return Admin(port_).at("replicas").at(i).as_object(); };
  ASSERT_TRUE(Eventually([&] { return replica(0).at("healthy").as_bool(); }));
  Conversation c("drained", 100);
  const Turn first = c.Next(port_);
  ASSERT_EQ(first.status, 200);
  const int home = first.replica, other = 1 - first.replica;

  Conversation long_one = c;  // a long turn, still running when the replica is drained
  Turn in_flight;
  std::thread running([&] { in_flight = long_one.Next(port_, 1500); });
  ASSERT_TRUE(Eventually([&] { return replica(home).at("in_flight").as_int64() == 1; }));
  const std::string drain =
      R"({"replicas": [{"index": )" + std::to_string(home) + R"(, "draining": true}]})";
  const HttpResult drained = HttpCall(port_, "PATCH", "/warden/v1/models/m", drain);
  ASSERT_EQ(drained.status, 200) << drained.body;
  const auto shown = json::parse(drained.body).at("replicas").at(home);
  EXPECT_TRUE(shown.at("draining").as_bool());
  EXPECT_TRUE(shown.at("healthy").as_bool());

  const Turn moved = c.Next(port_);
  EXPECT_EQ(moved.status, 200);
  EXPECT_EQ(moved.replica, other);
  EXPECT_EQ(moved.route, "rehome");
  for (const char* id : {"n1", "n2", "n3"}) {
    const Turn t = Conversation(id, 50).Next(port_);
    EXPECT_EQ(t.replica, other) << id;
    EXPECT_EQ(t.route, "new") << id;
  }
  running.join();
  EXPECT_EQ(in_flight.status, 200);  // finished where it ran
  EXPECT_EQ(in_flight.replica, home);
  EXPECT_EQ(replica(home).at("in_flight").as_int64(), 0);
  EXPECT_EQ(replica(home).at("failed").as_int64(), 0);
  EXPECT_NE(HttpGet(port_, "/metrics")
                .body.find("warden_replica_draining{model=\"m\",replica=\"" + std::to_string(home) +
                           "\"} 1"),
            std::string::npos);

  const std::string both = R"({"replicas": [{"index": 0, "draining": true},)"
                           R"( {"index": 1, "draining": true}]})";
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m", both).status, 200);
  const HttpResult none =
      HttpPost(port_, "/v1/messages",
               json::serialize(json::object{
                   {"model", "m"},
                   {"max_tokens", 4},
                   {"messages", json::array{json::object{{"role", "user"}, {"content", "hi"}}}}}));
  EXPECT_EQ(none.status, 503);
  EXPECT_EQ(json::parse(none.body).at("type").as_string(), "error");
  EXPECT_NE(none.body.find("2 healthy one(s) draining"), std::string::npos) << none.body;

  const std::string back = R"({"replicas": [{"index": 0, "draining": false},)"
                           R"( {"index": 1, "draining": false}]})";
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m", back).status, 200);
  const Turn fresh = Conversation("fresh", 50).Next(port_);
  EXPECT_EQ(fresh.replica, home);  // no conversation homed there any more: the least loaded
  EXPECT_EQ(fresh.route, "new");

  for (const char* bad :
       {R"({"replicas": [{"index": 2, "draining": true}]})", R"({"replicas": [{"index": 0}]})",
        R"({"replicas": {"0": true}})", R"({"replicas": [{"index": 0, "draining": true, "x": 1}]})",
        R"({"replicas": [{"index": 0, "draining": true}, {"index": 5, "draining": true}]})",
        R"({"replicas": [{"index": 0, "draining": true}, {"index": 0, "draining": false}]})",
        R"({"affinity": false, "replicas": [{"index": 1.0, "draining": true}]})"}) {
    const HttpResult r = HttpCall(port_, "PATCH", "/warden/v1/models/m", bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_NE(json::parse(r.body).at("error").at("message").as_string().find("replicas"),
              std::string::npos)
        << r.body;
  }
  // A field given twice is refused, not taken last-one-wins (as the config file refuses it).
  for (const auto& [twice, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"affinity": true, "affinity": false})", "affinity"},
           {R"({"replicas": [{"index": 0, "draining": true, "draining": false}]})", "draining"}}) {
    const HttpResult r = HttpCall(port_, "PATCH", "/warden/v1/models/m", twice);
    EXPECT_EQ(r.status, 400) << twice;
    EXPECT_EQ(json::parse(r.body).at("error").at("message").as_string(), key + ": is given twice");
  }
  EXPECT_FALSE(replica(0).at("draining").as_bool());  // a refused patch changes nothing
  EXPECT_TRUE(Admin(port_).at("affinity").as_bool());
}

// A replica drained while the only other one goes down: rather than an outage, requests go to the
// drained one (counted, and the conversation is not homed there), until the other is back.
TEST_F(GatewayTest, ADrainedReplicaServesWhenTheOnlyOtherOneIsDown) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "10"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto replica = [&](int i) { return Admin(port_).at("replicas").at(i).as_object(); };
  ASSERT_TRUE(Eventually([&] { return replica(0).at("healthy").as_bool(); }));
  ASSERT_TRUE(Eventually([&] { return replica(1).at("healthy").as_bool(); }));
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": true}]})")
                .status,
            200);
  Conversation c("lone", 100);
  ASSERT_EQ(c.Next(port_).replica, 1);
  ASSERT_NO_FATAL_FAILURE(StopSim(1));
  for (int turn = 0; turn < 2; ++turn) {
    const Turn t = c.Next(port_);
    ASSERT_EQ(t.status, 200) << t.body;
    EXPECT_EQ(t.replica, 0);
    EXPECT_EQ(t.route, "overflow");  // its home stays
  }
  const json::object model = Admin(port_);
  EXPECT_EQ(model.at("routed_to_draining").as_int64(), 2);
  EXPECT_TRUE(model.at("replicas").at(0).at("draining").as_bool());
  EXPECT_NE(HttpGet(port_, "/metrics").body.find("warden_routed_to_draining_total{model=\"m\"} 2"),
            std::string::npos);
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(1, {}));
  ASSERT_TRUE(Eventually([&] { return replica(1).at("healthy").as_bool(); }));
  const Turn home = c.Next(port_);  // still homed on the replica that came back
  EXPECT_EQ(home.replica, 1);
  EXPECT_EQ(home.route, "sticky");
  EXPECT_EQ(Admin(port_).at("routed_to_draining").as_int64(), 2);
}

TEST_F(GatewayTest, KilledReplicaSessionsRehomeNewSessionsAvoidItAndNothingFails) {
  ASSERT_NO_FATAL_FAILURE(StartSims(4, "20"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  constexpr int kSessions = 8;
  std::vector<Conversation> conversations;
  for (int s = 0; s < kSessions; ++s) conversations.emplace_back("k" + std::to_string(s), 120);
  std::vector<int> homes(kSessions);
  for (int s = 0; s < kSessions; ++s) {
    const Turn t = conversations[s].Next(port_);
    ASSERT_EQ(t.status, 200);
    homes[s] = t.replica;
  }
  const int victim = homes[0];

  std::vector<std::vector<Turn>> after(kSessions);
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int s = 0; s < kSessions; ++s) {
    threads.emplace_back([&, s] {
      for (int t = 0; t < 8; ++t) {
        after[s].push_back(conversations[s].Next(port_, 40));
        ++done;
      }
    });
  }
  ASSERT_TRUE(Eventually([&] { return done.load() >= 12; }));
  sims_[victim]->Kill();
  for (auto& t : threads) t.join();

  for (int s = 0; s < kSessions; ++s) {
    bool rehomed = false;
    for (const Turn& t : after[s]) {
      EXPECT_EQ(t.status, 200) << "session " << s << ": " << t.body;  // retried, never failed
      if (t.route == "rehome") rehomed = true;
      if (rehomed) {
        EXPECT_NE(t.replica, victim);
      }
    }
    if (homes[s] == victim) {
      EXPECT_TRUE(rehomed) << "session " << s;
    }
  }
  for (int s = 0; s < 6; ++s) {
    Conversation fresh("fresh" + std::to_string(s), 50);
    const Turn t = fresh.Next(port_);
    EXPECT_EQ(t.status, 200);
    EXPECT_NE(t.replica, victim);
  }
  // Why, and since when: first what the request that found it down saw (if one did), then its
  // health checks' finding.
  ASSERT_TRUE(Eventually([&] {
    const json::value problem = Admin(port_).at("replicas").at(victim).at("health_problem");
    return problem.is_string() &&
           std::string(problem.as_string()).starts_with("cannot connect for /health");
  }));
  const json::value dead = Admin(port_).at("replicas").at(victim);
  EXPECT_FALSE(dead.at("healthy").as_bool());
  EXPECT_TRUE(std::string(dead.at("health_problem").as_string())
                  .starts_with("cannot connect for /health (Connection refused)"))
      << dead;
  EXPECT_GT(dead.at("unhealthy_since_unix").as_double(), 1.7e9);
  EXPECT_TRUE(Admin(port_).at("replicas").at((victim + 1) % 4).at("health_problem").is_null());
  // Noted for the panel's chart, as a change, once: by the request that found it down first, or
  // by its health checks.
  const json::array changes = Admin(port_).at("changes").as_array();
  ASSERT_EQ(changes.size(), 1u) << changes;
  const std::string what(changes[0].at("what").as_string());
  const std::string down = "replica " + std::to_string(victim) + " down: ";
  if (changes[0].at("by").as_string() == "a request") {
    // Refused; or, when the kill came as the gateway connected or sent, failed otherwise.
    EXPECT_TRUE(what == down + "refused a connection" || what == down + "a connection failed")
        << what;
  } else {
    EXPECT_EQ(changes[0].at("by").as_string(), "health checks");
    EXPECT_TRUE(what.starts_with(down + "cannot connect for /health")) << changes;
  }
  // Its cache is no room for the working set while it is down; the others' is.
  const json::object model = Admin(port_);
  int64_t healthy_cache = 0;
  for (const json::value& r : model.at("replicas").as_array())
    if (r.at("healthy").as_bool()) healthy_cache += r.at("kv_cache_tokens").as_int64();
  EXPECT_GT(healthy_cache, 0);
  EXPECT_EQ(model.at("working_set").at("kv_cache_tokens").as_int64(), healthy_cache) << model;
  EXPECT_EQ(model.at("working_set").at("kv_cache_tokens").as_int64(),
            3 * dead.at("kv_cache_tokens").as_int64());
  EXPECT_EQ(model.at("working_set").at("healthy_replicas").as_int64(), 3);
  // Its last scrape is no current figure: none is given, in the admin API or in /metrics.
  for (const char* figure : {"running", "waiting", "kv_cache_usage"})
    EXPECT_TRUE(dead.at(figure).is_null()) << figure;
  const std::string metrics = HttpGet(port_, "/metrics").body;
  const std::string labels = "{model=\"m\",replica=\"" + std::to_string(victim) + "\"}";
  EXPECT_NE(metrics.find("warden_replica_healthy" + labels + " 0"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("warden_replica_running" + labels), std::string::npos);
  EXPECT_EQ(metrics.find("warden_replica_kv_cache_usage" + labels), std::string::npos);
  EXPECT_NE(metrics.find("warden_replica_running{model=\"m\",replica=\"" +
                         std::to_string((victim + 1) % 4) + "\"}"),
            std::string::npos);
}

// A replica a request finds down is noted on the chart by that request (its health checks may be
// seconds away), once; its return by the health checks; and a restart keeps the list, with the
// restart itself marked, and the chart's tokens.
TEST_F(GatewayTest, AReplicaARequestFoundDownIsNotedAndTheNotesOutliveARestart) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const std::string dir = ::testing::TempDir() + "/warden-changes-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::string> config = {"--state-file",          dir + "/state.json",
                                           "--state-save-interval", "0.1",
                                           "--scrape-interval",     "5"};
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  // Once its first check has read it (the next is 5 s away).
  ASSERT_TRUE(Eventually(
      [&] { return Admin(port_).at("replicas").at(1).at("kv_cache_tokens").as_int64() > 0; }));
  sims_[1]->Kill();
  // New conversations alternate between the two idle replicas: one of these tries replica 1.
  for (int s = 0; s < 2; ++s) {
    const Turn t = Conversation("c" + std::to_string(s), 40).Next(port_);
    EXPECT_EQ(t.status, 200) << t.body;
    EXPECT_EQ(t.replica, 0);
  }
  json::array changes = Admin(port_).at("changes").as_array();
  ASSERT_EQ(changes.size(), 1u) << changes;
  EXPECT_EQ(changes[0].at("what").as_string(), "replica 1 down: refused a connection");
  EXPECT_EQ(changes[0].at("by").as_string(), "a request");

  ASSERT_NO_FATAL_FAILURE(StartSimAgain(1, {}));
  ASSERT_TRUE(Eventually([&] { return Admin(port_).at("changes").as_array().size() == 2; }, 15));
  changes = Admin(port_).at("changes").as_array();
  EXPECT_EQ(changes[1].at("what").as_string(), "replica 1 healthy again") << changes;
  EXPECT_EQ(changes[1].at("by").as_string(), "health checks");

  const json::object history = Admin(port_).at("history").as_object();
  const int64_t tokens =
      history.at("cached_tokens").as_int64() + history.at("computed_tokens").as_int64();
  EXPECT_GT(tokens, 0);
  ASSERT_EQ(gateway_->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  // The chart's tokens are kept too, and it says since when it knows them.
  const json::object restarted = Admin(port_);
  const json::object& kept = restarted.at("history").as_object();
  EXPECT_EQ(kept.at("cached_tokens").as_int64() + kept.at("computed_tokens").as_int64(), tokens);
  EXPECT_DOUBLE_EQ(kept.at("since_unix").as_double(), history.at("since_unix").as_double());
  EXPECT_LT(kept.at("since_unix").as_double(), restarted.at("started_unix").as_double());
  // The time it was down is a gap (from the save at its stop to the restart), not zero traffic.
  ASSERT_EQ(kept.at("gaps").as_array().size(), 1u) << kept;
  EXPECT_NEAR(kept.at("gaps").at(0).at(1).as_double(), restarted.at("started_unix").as_double(), 1);
  EXPECT_LT(kept.at("gaps").at(0).at(0).as_double(), kept.at("gaps").at(0).at(1).as_double());
  const json::array after = restarted.at("changes").as_array();
  ASSERT_EQ(after.size(), 3u) << after;
  EXPECT_EQ(after[0], changes[0]);
  EXPECT_EQ(after[1], changes[1]);
  EXPECT_EQ(after[2].at("what").as_string(),
            "gateway restarted: 2 conversations kept their replicas");
  EXPECT_EQ(after[2].at("by").as_string(), "state file");
  // Saved though nothing else changed: the next restart finds it too.
  ASSERT_EQ(gateway_->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  const json::array again = Admin(port_).at("changes").as_array();
  ASSERT_EQ(again.size(), 4u) << again;
  EXPECT_EQ(again[2], after[2]);
  EXPECT_EQ(gateway_->Stop(), 0);
  std::filesystem::remove_all(dir);
}

// vLLM's /metrics does not say its --max-num-seqs: a replica that keeps requests waiting at the
// same running count while its KV cache has room runs fewer than configured, and the log says so
// (the overflow limit, auto, follows max_num_seqs).
// A server restarted under another served name answers every request with 404: the log says so
// as a start does (found by review: nothing was said), and says when it serves the model again.
TEST_F(GatewayTest, AServerRestartedUnderAnotherNameIsNamedInTheLog) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_TRUE(Eventually([&] {
    const json::value replicas = Admin(port_).at("replicas");
    return replicas.at(0).at("healthy").as_bool() && replicas.at(1).at("healthy").as_bool();
  }));
  ASSERT_NO_FATAL_FAILURE(StopSim(1));
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(1, {}, "other"));
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(model m: http://127\.0\.0\.1:[0-9]+ serves 'other', not 'm': it will )"
                 R"(answer every request with 404)"),
      &match));
  ASSERT_NO_FATAL_FAILURE(StopSim(1));
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(1, {}));
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(model m: http://127\.0\.0\.1:[0-9]+ serves 'm' again)"), &match));
}

TEST_F(GatewayTest, AReplicaRunningFewerSequencesThanConfiguredIsNamedInTheLog) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("off"));  // tiny: 4 at once; 32 set
  std::vector<std::thread> clients;
  std::atomic<bool> stop{false};
  for (int i = 0; i < 10; ++i) {
    clients.emplace_back([&, i] {
      for (int n = 0; !stop && n < 100; ++n)
        HttpPost(port_, "/v1/chat/completions", ChatBody("q" + std::to_string(i), 10, 60));
    });
  }
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(its vLLM may run --max-num-seqs 4, not the 32 configured)"), &match));
  stop = true;
  for (auto& c : clients) c.join();
}

// A vLLM with CPU offloading of its KV cache (--kv-offloading-size) counts what it read back from
// host memory apart from its GPU hits: the admin API shows that share beside the prefix-cache
// hit rate (null for an engine without it), and the host memory its cache_config_info names.
TEST_F(GatewayTest, TheShareReadBackFromCpuMemoryIsShown) {
  ASSERT_NO_FATAL_FAILURE(
      StartDpSim(1, "100", {"--profile", "tiny", "--kv-offloading-size", "0.01"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  EXPECT_TRUE(Eventually([&] {
    const json::value gib = Admin(port_).at("replicas").at(0).at("kv_offloading_gib");
    return gib.is_number() && gib.to_number<double>() == 0.01;
  })) << json::serialize(Admin(port_).at("replicas").at(0));
  const auto chat = [&](const std::string& key, const std::string& word, int words) {
    const json::object body{
        {"model", "m"},
        {"max_tokens", 4},
        {"messages", json::array{json::object{{"role", "user"}, {"content", Words(word, words)}}}}};
    return HttpPost(port_, "/v1/chat/completions", json::serialize(body), {{"X-Session-ID", key}});
  };
  ASSERT_EQ(chat("first", "first", 400).status, 200);
  ASSERT_EQ(chat("second", "second", 500).status, 200);  // these two evict most of the first
  ASSERT_EQ(chat("third", "third", 500).status, 200);
  const HttpResult again = chat("first", "first", 400);
  ASSERT_EQ(again.status, 200);
  EXPECT_GT(json::parse(again.body)
                .at("usage")
                .at("prompt_tokens_details")
                .at("cached_tokens")
                .as_int64(),
            300);
  EXPECT_TRUE(Eventually([&] {
    const json::value rate = Admin(port_).at("replicas").at(0).at("external_prefix_hit_rate");
    return rate.is_number() && rate.to_number<double>() > 0.1;
  })) << json::serialize(Admin(port_).at("replicas").at(0));
}

// A vLLM started with --no-enable-prefix-caching says so in vllm:cache_config_info; the gateway
// tells the operator (log, admin API) that affinity gains nothing there. Its turns, sticky as
// ever, read nothing from a cache.
TEST_F(GatewayTest, AReplicaWithoutAPrefixCacheIsNamed) {
  upstream_args_.clear();
  for (bool caching : {true, false}) {
    std::vector<std::string> args = {"sim", "--port",        "0", "--model", "m", "--time-scale",
                                     "100", "--api-latency", "0"};
    if (!caching) args.push_back("--no-enable-prefix-caching");
    std::vector<uint16_t> ports;
    sims_.push_back(StartWarden(args, &ports));
    ASSERT_NE(sims_.back(), nullptr);
    sim_ports_.push_back(ports[0]);
    upstream_args_.insert(upstream_args_.end(),
                          {"--url", "http://127.0.0.1:" + std::to_string(ports[0])});
  }
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::smatch match;
  ASSERT_TRUE(
      gateway_->WaitForLine(std::regex(R"(model m: http://127\.0\.0\.1:(\d+) runs without a )"
                                       R"(prefix cache)"),
                            &match));
  EXPECT_EQ(match[1].str(), std::to_string(sim_ports_.at(1)));  // the one without
  // The log line comes before the scrape reaches the router; each server is scraped on its own.
  EXPECT_TRUE(Eventually([&] {
    const json::array replicas = Admin(port_).at("replicas").as_array();
    return replicas.at(0).at("prefix_caching") == json::value(true) &&
           replicas.at(1).at("prefix_caching") == json::value(false);
  }));
  // Two conversations, one on each replica (new ones go to the least loaded, ties rotate): the
  // second turn of each goes back home; only the one with a cache reads its history.
  Conversation a("nocache-a", 200), b("nocache-b", 200);
  const Turn a1 = a.Next(port_), b1 = b.Next(port_);
  ASSERT_EQ(a1.status, 200);
  ASSERT_EQ(b1.status, 200);
  ASSERT_NE(a1.replica, b1.replica);
  const Turn a2 = a.Next(port_), b2 = b.Next(port_);
  EXPECT_EQ(a2.route, "sticky");
  EXPECT_EQ(b2.route, "sticky");
  const auto cache_read = [](const Turn& t) {
    return json::parse(t.body).at("usage").at("cache_read_input_tokens").as_int64();
  };
  const Turn& cached_turn = a2.replica == 0 ? a2 : b2;
  const Turn& uncached_turn = a2.replica == 0 ? b2 : a2;
  EXPECT_GT(cache_read(cached_turn), 200);
  EXPECT_EQ(cache_read(uncached_turn), 0);
}

// vLLM started with --disable-log-stats answers /metrics with no vllm: series: the gateway says
// so once, and counts the scrapes as errors, rather than take the server for an idle one.
TEST_F(GatewayTest, AServerThatPublishesNoVllmMetricsIsSaidToAndItsScrapesCountAsErrors) {
  FakeReplica fake([](const std::string&) {
    return FakeAnswer{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"};
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(
      std::regex(R"(model m: http://127\.0\.0\.1:(\d+)/metrics cannot be read: no vllm: series)"),
      &match));
  EXPECT_EQ(match[1].str(), std::to_string(fake.port()));
  EXPECT_TRUE(Eventually([&] {  // three scrapes since: none said it again
    const HttpResult metrics = HttpGet(port_, "/metrics");
    return std::regex_search(metrics.body,
                             std::regex(R"(warden_scrape_errors_total\{[^}]*\} ([3-9]|\d\d))"));
  }));
  EXPECT_FALSE(
      gateway_->WaitForLine(std::regex("cannot be read"), &match, std::chrono::milliseconds(200)));
}

// A chunked answer whose body is its last chunk alone, followed by a trailer that comes a byte at a
// time. Beast's parser asserts on it (parse_chunk_header: "n >= 5" when the second look at the
// last chunk has 4 bytes), and the build had Boost's asserts on: one replica's answer aborted the
// whole gateway. Found by fuzzing the relay (fuzz/relay_parser_fuzz.cc).
TEST_F(GatewayTest, AnAnswerBeastsAssertsTookForBrokenDoesNotStopTheGateway) {
  FakeReplica fake([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n";
    a.then = "X";  // the trailer's first byte, alone
    a.then_after_ms = 100;
    a.close_after_ms = 200;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  // A client can send the same: a chunked request body that is its last chunk alone, its trailer's
  // first byte sent apart (the pause lets the gateway read the two apart; were they read together,
  // nothing would be tested, and nothing would fail).
  RawConnection client(port_);
  client.Send(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  client.Send("X");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  client.Send("-Trailer: 1\r\n\r\n");
  EXPECT_NE(client.ReadUntil("\r\n\r\n").find("HTTP/1.1 400"), std::string::npos);  // no JSON
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);
  // And a replica's answer (cut for the client, as the replica cut it): the gateway is still there
  // after it.
  HttpPost(port_, "/v1/chat/completions", ChatBody("c", 5, 5));
  EXPECT_EQ(fake.requests(), 1);
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);
}

// Answers no replica of vLLM's sends, which a gateway must neither wait on forever nor pass on:
// chunk lines ending in a bare LF (Beast waits for the CR), content after an interim 1xx response
// (Beast waits for the rest of a status line), a status above 599. Found by a review that drove
// the gateway with a replica of raw bytes; each hung the client until it gave up, or reached it.
TEST_F(GatewayTest, AnswersAReplicaFramedWronglyAreNotWaitedOn) {
  FakeReplica fake([](const std::string& head) {
    FakeAnswer a;  // the connection is kept open after: nothing but the bytes ends the answer
    if (head.find("x-case: bare-lf") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
          "\r\n2\n{}\n0\n\n";
    } else if (head.find("x-case: trailer-lf") != std::string::npos) {  // only the trailer's
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
          "\r\n2\r\n{}\r\n0\r\nX-T: 1\n\n";
    } else if (head.find("x-case: later-lf") != std::string::npos) {  // after a whole chunk
      const size_t at = head.find("x-case: later-lf") + 16;
      const char* const after_a_chunk[] = {"0\n\n", "2\n{}\r\n0\r\n\r\n"};
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
          "\r\n2\r\n{}\r\n" +
          std::string(after_a_chunk[head[at] - '0']);
    } else if (head.find("x-case: data-lf") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
          "\r\n2\r\n{}\n0\r\n\r\n";
    } else if (head.find("x-case: 199") != std::string::npos) {
      a.bytes = "HTTP/1.1 199 Odd\r\nContent-Length: 2\r\n\r\n{}";
    } else {
      a.bytes = "HTTP/1.1 600 Odd\r\nContent-Length: 2\r\n\r\n{}";
    }
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  const auto send = [&](const std::string& which) {
    RawConnection client(port_);
    client.Send(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        "x-case: " +
        which + "\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(ChatBody("c", 5, 5).size()) + "\r\n\r\n" + ChatBody("c", 5, 5));
    std::string received = client.ReadToClose();
    EXPECT_TRUE(client.closed()) << which << ": " << received;
    return received;
  };
  // The head went out before the bad framing came: the client's response is cut short.
  EXPECT_TRUE(send("bare-lf").starts_with("HTTP/1.1 200 OK"));
  EXPECT_TRUE(send("trailer-lf").starts_with("HTTP/1.1 200 OK"));
  EXPECT_TRUE(send("later-lf0").starts_with("HTTP/1.1 200 OK"));  // the last chunk's line
  EXPECT_TRUE(send("later-lf1").starts_with("HTTP/1.1 200 OK"));  // the next chunk's size line
  EXPECT_TRUE(send("data-lf").starts_with("HTTP/1.1 200 OK"));    // the end of a chunk's data
  EXPECT_TRUE(send("199").starts_with("HTTP/1.1 502"));
  EXPECT_TRUE(send("600").starts_with("HTTP/1.1 502"));
  EXPECT_TRUE(Eventually([&] { return Admin(port_).at("replicas").at(0).at("in_flight") == 0; }));
}

// vLLM sends a stream's head as it queues the request: a replica that dies before the first event
// (queued, or reading the prompt) has given the client nothing yet, as the gateway holds the head
// until that event. The request goes to another replica, and the client gets a whole stream.
TEST_F(GatewayTest, AStreamBrokenOffBeforeItsFirstEventIsSentToAnotherReplica) {
  FakeReplica dies([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    a.close_after_ms = 100;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100"));
  upstream_args_.insert(upstream_args_.end(), {"--url", dies.url()});
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(1).at("healthy").as_bool(); }));
  for (int s = 0; s < 4; ++s) {  // new conversations: placed in turn, on the fake too
    const HttpResult r = HttpPost(
        port_, "/v1/messages",
        json::serialize(json::object{
            {"model", "m"},
            {"max_tokens", 8},
            {"stream", true},
            {"messages", json::array{json::object{
                             {"role", "user"}, {"content", Words("s" + std::to_string(s), 30)}}}}}),
        {{"X-Claude-Code-Session-Id", "dies-" + std::to_string(s)}});
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("x-warden-replica"), "0") << s;
    EXPECT_NE(r.body.find("message_stop"), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find("event: error"), std::string::npos) << r.body;
  }
  ASSERT_GE(dies.requests(), 1);
  const json::object admin = Admin(port_);
  EXPECT_EQ(admin.at("replicas").at(1).at("failed").as_int64(), dies.requests());
  EXPECT_EQ(Total(admin, "in_flight"), 0);
}

// A stream whose head came (vLLM sends it as it queues the request) but no event yet has given
// its client nothing: when its replica is held for lost (its /health fails), it is routed again at
// once, as a request still waiting for its head is, not after stall_timeout_s (found by review:
// it waited 60 s). Here stall_timeout_s is off, so only that rule can move it.
TEST_F(GatewayTest, AQueuedStreamOfAReplicaHeldForLostGoesToAnother) {
  FakeReplica queues([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    a.then = "f\r\ndata: too late\n\r\n0\r\n\r\n";
    a.then_after_ms = 6000;
    return a;
  });
  FakeReplica answers([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        "e\r\ndata: in time\n\r\n0\r\n\r\n";
    return a;
  });
  upstream_args_ = {"--url", queues.url(), "--url", answers.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--stall-timeout", "0"}));
  ASSERT_TRUE(Eventually([&] {
    const json::object admin = Admin(port_);
    return admin.at("replicas").at(0).at("healthy").as_bool() &&
           admin.at("replicas").at(1).at("healthy").as_bool();
  }));
  ASSERT_NO_FATAL_FAILURE(SetDraining(1, true));  // so that it goes to the one that queues it
  HttpResult result;
  std::thread client(
      [&] { result = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("q")); });
  ASSERT_TRUE(Eventually([&] { return queues.requests() == 1; }));
  ASSERT_NO_FATAL_FAILURE(SetDraining(1, false));
  queues.SetHealthy(false);
  client.join();
  EXPECT_EQ(result.status, 200);
  EXPECT_EQ(result.header("x-warden-replica"), "1");
  EXPECT_EQ(result.body, "data: in time\n");
  EXPECT_EQ(answers.requests(), 1);
}

// Connection fields make one list (RFC 9110 §5.3): a close in the second one closes the
// connection after the response, and the request pipelined behind it is not answered.
TEST_F(GatewayTest, ACloseInASecondConnectionFieldClosesTheConnection) {
  FakeReplica fake([](const std::string&) {
    return FakeAnswer{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"};
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  RawConnection client(port_);
  client.Send(
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n"
      "Connection: close\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const std::string received = client.ReadToClose();
  EXPECT_TRUE(client.closed());
  EXPECT_EQ(received.find("HTTP/1.1 200"), received.rfind("HTTP/1.1 200")) << received;
}

// Bytes a replica sends past the end of its response are never taken for the answer to a later
// request: the connection they came on is not used again.
TEST_F(GatewayTest, BytesAReplicaSendsPastItsResponseAreNotTakenForTheNextAnswer) {
  const std::string smuggled = JsonResponse(R"({"smuggled":true})");
  std::atomic<int> n{0};
  FakeReplica fake([&](const std::string&) {
    const int i = ++n;
    FakeAnswer a;
    a.bytes = JsonResponse(R"({"n":)" + std::to_string(i) + "}");
    if (i == 1) a.bytes += smuggled;  // in the same write
    if (i == 2) {                     // a moment after the response
      a.then = smuggled;
      a.then_after_ms = 50;
    }
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("a")).body, R"({"n":1})");
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("b")).body, R"({"n":2})");
  ASSERT_TRUE(Eventually([&] { return fake.answers() == 2; }));  // the late bytes are out
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("c")).body, R"({"n":3})");
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("d")).body, R"({"n":4})");
}

// A request a replica held for a while before closing the connection unanswered may have run:
// it is not sent to the same replica again (one replica here, so the client gets a 502: the
// replica took the request and gave no answer).
TEST_F(GatewayTest, ARequestTheReplicaHeldBeforeDroppingItIsNotSentThereAgain) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    if (request.find("drop") != std::string::npos) {
      a.close_after_ms = 800;  // longer than a stale kept-alive connection would take
    } else if (request.find("partial") != std::string::npos) {
      a.bytes = "HTTP/1.1 200 OK\r\nContent-Le";  // at once: but it had read the request
      a.close_after_ms = 0;
    } else {
      a.bytes = JsonResponse(R"({"ok":true})");
    }
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  const auto healthy = [&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); };
  for (const char* scenario : {"drop", "partial"}) {
    ASSERT_TRUE(Eventually(healthy));
    ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("warm")).status, 200);
    const int before = fake.requests();
    const HttpResult failed = HttpPost(port_, "/v1/chat/completions", ScenarioRequest(scenario));
    EXPECT_EQ(failed.status, 502) << scenario;
    EXPECT_NE(failed.body.find("closed the connection without answering"), std::string::npos)
        << failed.body;
    EXPECT_EQ(fake.requests(), before + 1) << scenario << ": sent once";
  }
}

// A replica that closes the connection on a request that says "poison", unanswered, and answers
// any other.
FakeAnswer DropsPoison(const std::string& request) {
  FakeAnswer a;
  if (request.find("poison") != std::string::npos) {
    a.close_after_ms = 0;
  } else {
    a.bytes = JsonResponse(R"({"ok":true})");
  }
  return a;
}

// A replica (or a proxy in front of it) that answers before it has read a large request, and
// closes, resets the connection while the gateway still writes the body: its answer came first,
// and is what the client gets; the request is not sent again, and the replica stays in service.
TEST_F(GatewayTest, AnAnswerAReplicaSentBeforeResettingTheRequestIsRelayed) {
  const std::string refusal = R"({"error":{"message":"request body too large","code":413}})";
  FakeReplica fake(
      [&](const std::string& head) {
        FakeAnswer a;
        a.bytes =
            "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(refusal.size()) + "\r\n\r\n" + refusal;
        if (head.starts_with("POST /v1/chat/completions")) a.close_after_ms = 0;
        return a;
      },
      /*answer_on_head=*/true);
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  const std::string large = ScenarioRequest(std::string(8 << 20, 'x'));
  const HttpResult refused =
      HttpPost(port_, "/v1/chat/completions", large, {{"X-Claude-Code-Session-Id", "big"}});
  EXPECT_EQ(refused.status, 413);
  EXPECT_EQ(refused.body, refusal);
  EXPECT_EQ(refused.header("x-warden-replica"), "0");
  EXPECT_EQ(fake.requests(), 1);
  EXPECT_TRUE(Admin(port_).at("replicas").at(0).at("healthy").as_bool());
}

// A replica that answers a large request before reading its body, and then neither reads nor
// closes (RFC 9112 §9.3 lets it): the answer reaches the client at once, not when the replica
// closes, and the connection is not used again (the request's body was not all sent).
TEST_F(GatewayTest, AnAnswerAReplicaSentWhileNotReadingTheRequestIsRelayedAtOnce) {
  const std::string refusal = R"({"error":{"message":"request body too large","code":413}})";
  constexpr int kHoldMs = 9000;  // before it closes (the gateway gives up the body after 3 s)
  FakeReplica fake(
      [&](const std::string&) {
        FakeAnswer a;
        a.bytes =
            "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(refusal.size()) + "\r\n\r\n" + refusal;
        a.close_after_ms = kHoldMs;
        return a;
      },
      /*answer_on_head=*/true);
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  const std::string large = ScenarioRequest(std::string(8 << 20, 'x'));
  const auto start = std::chrono::steady_clock::now();
  const HttpResult refused =
      HttpPost(port_, "/v1/chat/completions", large, {{"X-Claude-Code-Session-Id", "big"}});
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(refused.status, 413);
  EXPECT_EQ(refused.body, refusal);
  EXPECT_LT(waited, std::chrono::milliseconds(kHoldMs * 3 / 4));  // 3 s and up to two checks
  EXPECT_EQ(fake.requests(), 1);
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("in_flight").as_int64(), 0);
}

// A request that replicas drop unanswered (it trips something in front of the engine) is tried
// on two of them at most, and takes neither down: the others' conversations go on being served
// where their caches are, with no 503 while the health checks catch up.
TEST_F(GatewayTest, ARequestThatReplicasDropIsTriedTwiceAndTakesNoneDown) {
  FakeReplica first(DropsPoison), second(DropsPoison), third(DropsPoison);
  upstream_args_ = {"--url", first.url(), "--url", second.url(), "--url", third.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_TRUE(Eventually([&] {
    const json::object model = Admin(port_);
    for (const json::value& r : model.at("replicas").as_array())
      if (!r.at("healthy").as_bool()) return false;
    return true;
  }));
  const auto turn = [&](const std::string& session, const std::string& text) {
    return HttpPost(port_, "/v1/chat/completions", ScenarioRequest(text),
                    {{"X-Claude-Code-Session-Id", session}});
  };
  std::map<std::string, std::string> homes;
  for (const char* session : {"s1", "s2", "s3"})
    homes[session] = turn(session, "hello").header("x-warden-replica");
  const auto counts = [&] {
    return std::vector<int>{first.requests(), second.requests(), third.requests()};
  };
  const std::vector<int> before = counts();

  const HttpResult poisoned = turn("s1", "poison");
  EXPECT_EQ(poisoned.status, 502);
  EXPECT_NE(poisoned.body.find("closed the connection without answering"), std::string::npos);
  EXPECT_EQ(poisoned.header("x-should-retry"), "false");  // nor by the client's own retries
  // (the first may have had it twice: on a kept connection, which a close that quick looks like
  // a stale one, then on a new one; the second once, as the request is known to trip replicas)
  const std::vector<int> after = counts();
  int reached = 0, sent = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    reached += after[i] > before[i];
    sent += after[i] - before[i];
  }
  EXPECT_EQ(reached, 2);
  EXPECT_LE(sent, 3);

  const json::object model = Admin(port_);
  for (const json::value& r : model.at("replicas").as_array())
    EXPECT_TRUE(r.at("healthy").as_bool()) << r;
  EXPECT_EQ(Total(model, "rehomed"), 0);
  for (const auto& [session, home] : homes) {
    const HttpResult next = turn(session, "again");
    EXPECT_EQ(next.status, 200) << session;
    EXPECT_EQ(next.header("x-warden-replica"), home) << session;
    EXPECT_EQ(next.header("x-warden-route"), "sticky") << session;
  }
}

// In layout (a) every rank is the same server: a request it dropped is not tried on another rank.
TEST_F(GatewayTest, ARequestADataParallelServerDroppedIsNotSentToItsOtherRanks) {
  FakeReplica fake(DropsPoison);
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--dp", "2", "--threads", "1"}));
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(1).at("healthy").as_bool(); }));
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("warm")).status, 200);
  const int before = fake.requests();
  const HttpResult poisoned = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("poison"),
                                       {{"X-Claude-Code-Session-Id", "s"}});
  EXPECT_EQ(poisoned.status, 502);
  // Once, and once more on a new connection (a close that quick looks like a stale kept one).
  EXPECT_LE(fake.requests(), before + 2);
  // Every copy past the first is counted.
  EXPECT_EQ(SimMetric(port_, "warden_requests_resent_total"), fake.requests() - before - 1);
  const json::object model = Admin(port_);
  for (const json::value& r : model.at("replicas").as_array())
    EXPECT_TRUE(r.at("healthy").as_bool());
}

// A data-parallel server that does not answer takes all its ranks out of service at once: the
// request is not tried on each of its other ranks in turn, and the log does not say it was.
TEST_F(GatewayTest, ADataParallelServerThatDoesNotAnswerTakesAllItsRanksOut) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  // Health checks far apart: the request, not a check, finds the server gone.
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "30"}));
  // The first check and scrape done (its KV-cache size read): the next is 30 s away.
  ASSERT_TRUE(Eventually(
      [&] { return Admin(port_).at("replicas").at(3).at("kv_cache_tokens").as_int64() > 0; }));
  sims_[0]->Kill();
  const HttpResult refused = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("gone"));
  EXPECT_EQ(refused.status, 503) << refused.body;
  const json::object model = Admin(port_);
  for (const json::value& r : model.at("replicas").as_array())
    EXPECT_FALSE(r.at("healthy").as_bool()) << r;
  std::smatch match;
  EXPECT_TRUE(
      gateway_->WaitForLine(std::regex(R"(did not answer; no other healthy replica)"), &match))
      << ::testing::PrintToString(gateway_->lines());
  for (const std::string& line : gateway_->lines())
    EXPECT_EQ(line.find("did not answer; trying another"), std::string::npos) << line;
}

// With read_timeout_s, a replica that sends nothing for that long has its connection closed:
// a 504 in the API's shape when no response head came (not sent again: the replica has the
// request), a cut stream when its body stopped. Either way the replica stays in service.
TEST_F(GatewayTest, AReplicaSilentForTheReadTimeoutIsCutOff) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    if (request.find("stall") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
          "chunked\r\n\r\nf\r\ndata: {\"n\":1}\n\n\r\n";  // one 15-byte chunk, then nothing
    } else if (request.find("steady") != std::string::npos) {
      a.bytes = JsonResponse(R"({"ok":true})");
    }  // "silent": nothing at all
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--read-timeout", "1"}));

  const HttpResult silent = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("silent"));
  EXPECT_EQ(silent.status, 504);
  EXPECT_NE(silent.body.find("sent no response in 1 s"), std::string::npos) << silent.body;
  EXPECT_NE(silent.body.find(R"("error":{)"), std::string::npos);
  EXPECT_EQ(fake.requests(), 1);                        // not sent again
  EXPECT_EQ(silent.header("x-should-retry"), "false");  // nor by the OpenAI and Anthropic clients

  // The stream stopped between two events: the client is told in an error event, and the body
  // ends (BrokenStreamEvent); the connection stays open for the client's next request.
  RawConnection stalled(port_);
  stalled.Send(ChatRequestBytes(ScenarioRequest("stall")));
  const std::string cut = stalled.ReadUntil("\r\n0\r\n\r\n");
  EXPECT_FALSE(stalled.closed());
  EXPECT_NE(cut.find("data: {\"n\":1}\n\n"), std::string::npos) << cut;
  EXPECT_NE(cut.find("data: {\"error\":{\"message\":\"replica 0 sent nothing for 1 s"),
            std::string::npos)
      << cut;
  EXPECT_TRUE(cut.ends_with("\n\n\r\n0\r\n\r\n")) << "the last chunk: " << cut;

  EXPECT_TRUE(Admin(port_).at("replicas").at(0).at("healthy").as_bool());
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("steady")).status, 200);
  EXPECT_EQ(SimMetric(port_, "warden_read_timeouts_total", "where", "head"), 1);
  EXPECT_EQ(SimMetric(port_, "warden_read_timeouts_total", "where", "body"), 1);
}

// A read_timeout_s under a second is kept to within a quarter of it (the watch looks more often
// than once a second): a stream that pauses for 0.6 s is cut at a 0.2 s limit.
TEST_F(GatewayTest, AReadTimeoutUnderASecondIsKept) {
  FakeReplica fake([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
        "chunked\r\n\r\nf\r\ndata: {\"n\":1}\n\n\r\n";
    a.then = "f\r\ndata: {\"n\":2}\n\n\r\n0\r\n\r\n";
    a.then_after_ms = 600;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--read-timeout", "0.2"}));
  RawConnection paused(port_);
  paused.Send(ChatRequestBytes(ScenarioRequest("paused")));
  const std::string cut = paused.ReadToClose();
  EXPECT_NE(cut.find("sent nothing for 0.2 s"), std::string::npos) << cut;
  EXPECT_EQ(cut.find("data: {\"n\":2}"), std::string::npos) << cut;
}

// A replica that closes each kept-alive connection right after its answer (a keep-alive timeout
// of nothing): the gateway does not send on the closed connection but on a new one. The client
// sees none of it, and the replica gets each request once.
TEST_F(GatewayTest, AKeptAliveConnectionTheReplicaClosedIsReplacedUnseen) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    const size_t at = request.find("\"content\":\"");
    a.bytes = JsonResponse(R"({"echo":")" + request.substr(at + 11, 1) + R"("})");
    a.close_after_ms = 0;
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  for (const char* scenario : {"a", "b", "c", "d"}) {
    const HttpResult r = HttpPost(port_, "/v1/chat/completions", ScenarioRequest(scenario));
    EXPECT_EQ(r.status, 200) << scenario;
    EXPECT_EQ(r.body, std::string(R"({"echo":")") + scenario + R"("})");
  }
  EXPECT_EQ(fake.requests(), 4);
}

// Kept-alive upstream connections are closed after a few idle seconds (inside vLLM's 5 s
// keep-alive timeout, so the gateway never sends on one the server is closing), not held for ever.
TEST_F(GatewayTest, IdleUpstreamConnectionsAreClosedAfterAFewSeconds) {
  // The burst's requests are all answered once all have come, so that each has its own connection.
  std::latch burst(6);
  std::atomic<int> seen{0};
  FakeReplica slow([&](const std::string&) {
    if (++seen <= 6) burst.arrive_and_wait();
    FakeAnswer a;
    a.bytes = JsonResponse(R"({"ok":true})");
    return a;
  });
  upstream_args_ = {"--url", slow.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  std::vector<std::future<HttpResult>> results;
  for (int i = 0; i < 6; ++i) {
    results.push_back(std::async(std::launch::async, [this] {
      return HttpPost(port_, "/v1/chat/completions", ScenarioRequest("burst"));
    }));
  }
  for (auto& r : results) EXPECT_EQ(r.get().status, 200);
  EXPECT_GE(slow.open_connections(), 6);
  // The scrape's connection, used every 0.2 s, stays.
  EXPECT_TRUE(Eventually([&] { return slow.open_connections() <= 1; }, 8))
      << slow.open_connections();
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("after")).status, 200);
}

// A replica that took a request and then answers its health check with an error instead (its
// engine died; or vLLM, which listens before it has loaded its model, is still loading): the
// request is routed again to a healthy replica instead of waiting for an answer that never comes.
TEST_F(GatewayTest, ARequestWaitingOnAReplicaThatTurnsUnhealthyIsRoutedAgain) {
  FakeReplica silent([](const std::string&) { return FakeAnswer{}; });  // holds every request
  FakeReplica good([](const std::string&) {
    FakeAnswer a;
    a.bytes = JsonResponse(R"({"ok":true})");
    return a;
  });
  upstream_args_ = {"--url", silent.url(), "--url", good.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_TRUE(Eventually([&] {
    const json::array replicas = Admin(port_).at("replicas").as_array();
    return replicas.at(0).at("healthy").as_bool() && replicas.at(1).at("healthy").as_bool();
  }));
  // Two new conversations at once: one is placed on each replica (least in flight).
  auto send = [&](const char* session) {
    return std::async(std::launch::async, [this, session] {
      return HttpPost(port_, "/v1/chat/completions", ScenarioRequest(session),
                      {{"X-Session-ID", session}});
    });
  };
  auto first = send("one");
  auto second = send("two");
  ASSERT_TRUE(Eventually([&] { return silent.requests() == 1 && good.requests() >= 1; }));
  silent.SetHealthy(false);
  for (auto* result : {&first, &second}) {
    ASSERT_EQ(result->wait_for(std::chrono::seconds(20)), std::future_status::ready)
        << "a request still waits on the replica that was lost";
    const HttpResult r = result->get();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, R"({"ok":true})");
    EXPECT_EQ(r.header("x-warden-replica"), "1");
  }
  EXPECT_EQ(silent.requests(), 1);
  EXPECT_EQ(good.requests(), 2);
}

// A port that answers /health with another protocol's bytes is out of service at once, as for an
// error answer, and the problem says so rather than "no answer".
TEST_F(GatewayTest, AReplicaAnsweringHealthChecksWithNoHttpIsSaidToAndTakenOut) {
  FakeReplica fake(AnswerOkJson);
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--scrape-interval", "0.2"}));
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"),
                     {{"X-Claude-Code-Session-Id", "going-on"}})
                .status,
            200);
  EXPECT_EQ(Admin(port_).at("working_set").at("healthy_replicas").as_int64(), 1);
  fake.AnswerHealthChecksWith("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n");
  ASSERT_TRUE(
      Eventually([&] { return !Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
  const json::value problem = Admin(port_).at("replicas").at(0).at("health_problem");
  EXPECT_EQ(problem, json::value("/health answered with no valid HTTP (bad version)")) << problem;
  // With no replica in service, a conversation going on fits in no cache (found by review: the
  // working set said it fitted).
  const json::object working_set = Admin(port_).at("working_set").as_object();
  EXPECT_EQ(working_set.at("healthy_replicas").as_int64(), 0) << working_set;
  EXPECT_GT(working_set.at("recent_context_tokens").as_int64(), 0) << working_set;
  EXPECT_FALSE(working_set.at("fits").as_bool()) << working_set;
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x")).status, 503);
  fake.AnswerHealthChecksWith("");
  EXPECT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
}

// One health check a replica leaves unanswered in time (a vLLM busy streaming can answer late)
// does not take it out of service: its conversations keep their home, and with one server nothing
// is refused. Two in a row do.
TEST_F(GatewayTest, OneLateHealthCheckDoesNotTakeAReplicaOutOfService) {
  FakeReplica fake(AnswerOkJson);
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--scrape-interval", "0.2"}));
  const auto changes = [&] { return Admin(port_).at("changes").as_array(); };
  fake.LeaveHealthChecksUnanswered(1);
  const int before = fake.health_checks();
  // The unanswered check (given up after 0.5 s) and two answered after it.
  ASSERT_TRUE(Eventually([&] { return fake.health_checks() >= before + 3; }));
  EXPECT_TRUE(changes().empty()) << changes();
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x")).status, 200);

  fake.LeaveHealthChecksUnanswered(2);
  ASSERT_TRUE(Eventually([&] { return !changes().empty(); }));
  EXPECT_TRUE(std::string(changes()[0].at("what").as_string())
                  .starts_with("replica 0 down: no answer on /health"))
      << changes();
  // Back at the next answered check.
  ASSERT_TRUE(Eventually([&] { return changes().size() == 2; }));
  EXPECT_EQ(changes()[1].at("what").as_string(), "replica 0 healthy again");
}

// A replica that answers that it did not take a request (503, 429) has it sent to another server,
// whose answer the client gets, and gets no new conversation for a while; a 500, which it may
// have run, is the client's. Both are counted
// as the replica's error answers. With no other server, its own answer is the client's.
TEST_F(GatewayTest, ARequestAReplicaDidNotTakeIsSentToAnother) {
  const auto answering = [](int status, const char* reason) {
    return [status, reason](const std::string&) {
      FakeAnswer a;
      const std::string body =
          R"({"error":{"message":"busy","code":)" + std::to_string(status) + "}}";
      a.bytes = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                "\r\nRetry-After: 7\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body;
      return a;
    };
  };
  FakeReplica unavailable(answering(503, "Service Unavailable"));
  FakeReplica fine(AnswerOkJson);
  upstream_args_ = {"--url", unavailable.url(), "--url", fine.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (int s = 0; s < 4; ++s) {
    const HttpResult r = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"),
                                  {{"x-session-id", "s" + std::to_string(s)}});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), "1");
  }
  json::object model = Admin(port_);
  // The first new conversation tried there first (it homes none, so it looks the least loaded);
  // the next ones, within ModelRouter::kRefusalCooldownS of its refusal, were placed elsewhere.
  EXPECT_EQ(model.at("replicas").at(0).at("error_answers").as_int64(), 1);
  EXPECT_EQ(model.at("replicas").at(0).at("failed").as_int64(), 0);
  // Requests are counted where they were served: the refusals are not replica 0's requests.
  EXPECT_EQ(model.at("replicas").at(0).at("requests").as_int64(), 0);
  EXPECT_EQ(model.at("replicas").at(0).at("new").as_int64(), 0);
  EXPECT_EQ(model.at("totals").at("requests").as_int64(), 4);
  EXPECT_TRUE(model.at("replicas").at(0).at("healthy").as_bool());  // its /health answers
  EXPECT_NE(HttpGet(port_, "/metrics")
                .body.find(R"(warden_replica_error_answers_total{model="m",replica="0"} )"),
            std::string::npos);
  ASSERT_EQ(gateway_->Stop(), 0);

  // A 500 may have run: it is the client's, as is a 503 with no other server to go to.
  FakeReplica broken(answering(500, "Internal Server Error"));
  upstream_args_ = {"--url", broken.url(), "--url", fine.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  int errors = 0;
  for (int s = 0; s < 4; ++s) {
    const HttpResult r = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"),
                                  {{"x-session-id", "t" + std::to_string(s)}});
    if (r.status == 500) {
      ++errors;
      EXPECT_EQ(r.header("x-warden-replica"), "0");
    }
  }
  EXPECT_EQ(errors, 2);
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("error_answers").as_int64(), 2);
  ASSERT_EQ(gateway_->Stop(), 0);
  upstream_args_ = {"--url", unavailable.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult alone = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"));
  EXPECT_EQ(alone.status, 503);
  EXPECT_EQ(alone.header("retry-after"), "7");  // the replica's own answer
  EXPECT_NE(alone.body.find("busy"), std::string::npos) << alone.body;
}

// A request is counted where it is sent once the replica takes it: one held there and then refused
// was never among that replica's requests, so no counter went up and came down again (a
// Prometheus counter that goes down reads as a restart, and rate() as a burst of traffic).
TEST_F(GatewayTest, ARequestRefusedAfterAWaitIsNeverCountedWhereItWasRefused) {
  std::promise<void> release;
  const std::shared_future<void> released = release.get_future().share();
  FakeReplica refusing([released](const std::string&) {
    released.wait();
    return FakeAnswer{"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"};
  });
  FakeReplica fine(AnswerOkJson);
  upstream_args_ = {"--url", refusing.url(), "--url", fine.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::thread client([&] {
    const HttpResult r =
        HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "held"}});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), "1");
  });
  ASSERT_TRUE(Eventually(
      [&] { return Admin(port_).at("replicas").at(0).at("in_flight").as_int64() == 1; }));
  const json::object held = Admin(port_);
  EXPECT_EQ(held.at("replicas").at(0).at("requests").as_int64(), 0);
  EXPECT_EQ(held.at("replicas").at(0).at("new").as_int64(), 0);
  EXPECT_NE(HttpGet(port_, "/metrics")
                .body.find(R"(warden_requests_total{model="m",replica="0",route="new"} 0)"),
            std::string::npos);
  release.set_value();
  client.join();
  const json::object after = Admin(port_);
  EXPECT_EQ(after.at("replicas").at(0).at("requests").as_int64(), 0);
  EXPECT_EQ(after.at("replicas").at(0).at("error_answers").as_int64(), 1);
  EXPECT_EQ(after.at("replicas").at(1).at("requests").as_int64(), 1);
  EXPECT_EQ(after.at("replicas").at(1).at("new").as_int64(), 1);
}

// A request a replica refused (503), sent on to another whose admission holds it, whose client
// then leaves: it is let go, and nothing of the refused connection is touched (the gateway once
// crashed here: the client's watch still pointed at that freed connection).
TEST_F(GatewayTest, AClientLeavingWhileItsRefusedRequestIsHeldElsewhereIsLetGo) {
  FakeReplica refusing([](const std::string& request) {
    FakeAnswer a;
    if (request.find("refused") == std::string::npos) return FakeAnswer{JsonResponse("{}")};
    const std::string body = R"({"error":{"message":"busy","code":503}})";
    a.bytes =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    return a;
  });
  std::vector<uint16_t> ports;
  sims_.push_back(StartWarden({"sim", "--port", "0", "--model", "m", "--profile", "tiny",
                               "--time-scale", "1", "--api-latency", "0"},
                              &ports));
  ASSERT_NE(sims_.back(), nullptr);
  upstream_args_ = {"--url", refusing.url(), "--url",
                    "http://127.0.0.1:" + std::to_string(ports[0])};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--admission", "fifo"}));
  ASSERT_TRUE(Eventually(
      [&] { return Admin(port_).at("replicas").at(1).at("kv_cache_tokens").as_int64() > 0; }));
  // A conversation homed on the fake, then a long one on the simulator (the fake has one more).
  ASSERT_EQ(KeyedChatTurn(port_, "w", "warm").status, 200);
  const auto send = [&](RawConnection& c, const std::string& session, const std::string& body) {
    c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-ID: " + session +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body);
  };
  RawConnection running(port_);
  send(running, "long", ChatBody("long", 150, 600));
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(1).at("running").as_int64() == 1; }));
  // The least loaded is the fake, which refuses it; the simulator has no room for it.
  {
    RawConnection held(port_);
    send(held, "refused", ChatBody("refused", 150, 60));
    ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 1; }));
  }  // its client leaves
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 0; }));
  const json::object model = Admin(port_);
  EXPECT_EQ(model.at("replicas").at(0).at("error_answers").as_int64(), 1);
  EXPECT_EQ(model.at("replicas").at(0).at("requests").as_int64(), 1);   // the warm-up only
  EXPECT_EQ(model.at("replicas").at(1).at("in_flight").as_int64(), 1);  // the long one
  EXPECT_EQ(KeyedChatTurn(port_, "w", "again").status, 200);            // still serving
}

// A body sent compressed (Content-Encoding: gzip, deflate, zstd), which vLLM's server cannot
// read, is decoded: routed by the model and session it names, and passed on plain. What cannot be
// decoded gets an error in the API's shape.
// A replica whose /health answers but whose engine answers nothing (a hung engine behind a live
// API server): once it has held a request for stall_timeout_s with no answer and no work counted
// in its metrics, it is taken out of service and the request waiting there is routed again
// (found by review: its conversations' turns went home and waited, turn after turn).
TEST_F(GatewayTest, AReplicaThatHoldsRequestsAndDoesNoWorkIsTakenOutAndItsRequestsRoutedAgain) {
  FakeReplica hung([](const std::string&) { return FakeAnswer{}; });  // holds every request
  hung.SetMetrics(
      "vllm:num_requests_running{model_name=\"m\"} 1\n"
      "vllm:generation_tokens_total{model_name=\"m\"} 5\n");
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  upstream_args_.insert(upstream_args_.begin(), {"--url", hung.url()});  // replica 0
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--stall-timeout", "1"}));
  ASSERT_NO_FATAL_FAILURE(SetDraining(1, true));  // so that the conversation goes to the hung one
  auto stuck = std::async(std::launch::async, [&] {
    return HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"),
                    {{"x-session-id", "stuck"}});
  });
  ASSERT_TRUE(Eventually([&] { return hung.requests() == 1; }));
  ASSERT_NO_FATAL_FAILURE(SetDraining(1, false));
  const HttpResult answered = stuck.get();
  ASSERT_EQ(answered.status, 200) << answered.body;
  EXPECT_EQ(answered.header("x-warden-replica"), "1");
  EXPECT_EQ(answered.header("x-warden-route"), "new");  // its first turn, placed afresh
  const json::value replica = Admin(port_).at("replicas").at(0);
  EXPECT_FALSE(replica.at("healthy").as_bool()) << replica;
  EXPECT_NE(json::serialize(replica.at("health_problem")).find("no answer"), std::string::npos)
      << replica;
  // New conversations go where the work is done.
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "new"}})
                .header("x-warden-replica"),
            "1");
}

// A stream's head is no answer (vLLM sends it as it queues the request): a replica that sends
// heads and nothing more, with no work in its metrics, is held stalled all the same, and the
// stream, of which the client had nothing yet, goes to another replica (found by review: heads
// reset the stall clock).
TEST_F(GatewayTest, AReplicaThatSendsStreamHeadsAndNoEventsIsHeldStalled) {
  FakeReplica heads_only([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    return a;  // and nothing more
  });
  heads_only.SetMetrics("vllm:generation_tokens_total{model_name=\"m\"} 5\n");
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  upstream_args_.insert(upstream_args_.begin(), {"--url", heads_only.url()});  // replica 0
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--stall-timeout", "1"}));
  ASSERT_NO_FATAL_FAILURE(SetDraining(1, true));  // so that the conversation goes to replica 0
  auto stream = std::async(std::launch::async, [&] {
    return HttpPost(
        port_, "/v1/chat/completions",
        R"({"model":"m","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"x"}]})",
        {{"x-session-id", "heads"}});
  });
  ASSERT_TRUE(Eventually([&] { return heads_only.requests() == 1; }));
  ASSERT_NO_FATAL_FAILURE(SetDraining(1, false));
  const HttpResult answered = stream.get();
  ASSERT_EQ(answered.status, 200) << answered.body;
  EXPECT_EQ(answered.header("x-warden-replica"), "1");
  EXPECT_NE(answered.body.find("data: [DONE]"), std::string::npos) << answered.body;
  const json::value replica = Admin(port_).at("replicas").at(0);
  EXPECT_FALSE(replica.at("healthy").as_bool()) << replica;
  // Said as the gateway's verdict, not as the replica dropping the request.
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(replica 0 \(.*\) is held stalled \(stall_timeout_s\) with a stream it had )"
                 R"(not begun: sent to another server)"),
      &match));
  EXPECT_FALSE(
      std::any_of(gateway_->lines().begin(), gateway_->lines().end(), [](const std::string& l) {
        return l.find("closed the connection without answering") != std::string::npos;
      }));
}

// A replica that answers every request with a server error while its /health is fine looks the
// least loaded (it finishes everything at once): after three in a row (for more than one
// conversation), its own conversation's
// turns go elsewhere for a while (as overflow, the home kept), and so do new conversations
// (found by review: they were placed there, and every turn of theirs failed).
TEST_F(GatewayTest, AReplicaAnsweringServerErrorsInARowIsPassedOver) {
  FakeReplica fails([](const std::string&) {
    const std::string body =
        R"({"error":{"message":"engine trouble","type":"InternalServerError"}})";
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  upstream_args_.insert(upstream_args_.begin(), {"--url", fails.url()});  // replica 0
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_NO_FATAL_FAILURE(SetDraining(1, true));  // so that the conversation is homed on 0
  const auto turn = [&](const char* session) {
    return HttpPost(port_, "/v1/chat/completions", ScenarioRequest("hello"),
                    {{"X-Claude-Code-Session-Id", session}});
  };
  EXPECT_EQ(turn("s").status, 500);
  EXPECT_EQ(turn("t").status, 500);  // two conversations homed there (not one retrying)
  ASSERT_NO_FATAL_FAILURE(SetDraining(1, false));
  EXPECT_EQ(turn("s").header("x-warden-replica"), "0");  // two errors: still home
  const HttpResult after = turn("s");
  EXPECT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(after.header("x-warden-replica"), "1");
  EXPECT_EQ(after.header("x-warden-route"), "overflow");
  for (const char* session : {"n1", "n2"}) EXPECT_EQ(turn(session).header("x-warden-replica"), "1");
  EXPECT_EQ(fails.requests(), 3);
  const json::value failing = Admin(port_).at("replicas").at(0);
  EXPECT_EQ(failing.at("rehomed"), 0);
  EXPECT_EQ(failing.at("failing"), true);  // shown, for the panel's Healthy column
  EXPECT_EQ(Admin(port_).at("replicas").at(1).at("failing"), false);
}

// A replica that froze (SIGSTOP: its /health, metrics and streams all silent) is taken out of
// service, and a stream it had begun, silent since, is cut once it has sent nothing for
// stall_timeout_s, with an error event that says so, rather than left to wait for ever (found by
// review: it waited until the client's own timeout).
TEST_F(GatewayTest, AStreamOfAFrozenReplicaIsCutOnceSilentForTheStallTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "1"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--stall-timeout", "1"}));
  RawConnection c(port_);
  c.Send(MessagesRequestBytes(
      R"({"model":"m","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"hi"}]})",
      "frozen"));
  ASSERT_NE(c.ReadUntil("event: content_block_delta").find("event: content_block_delta"),
            std::string::npos);
  ASSERT_EQ(::kill(sims_[0]->pid(), SIGSTOP), 0);
  std::string received = c.ReadUntil("event: error");  // (each read waits 5 s of silence)
  for (int i = 0; i < 3 && received.find("event: error") == std::string::npos && !c.closed(); ++i)
    received = c.ReadUntil("event: error");
  ::kill(sims_[0]->pid(), SIGCONT);
  EXPECT_NE(received.find("out of service and sent nothing for 1 s"), std::string::npos)
      << received.substr(received.size() > 600 ? received.size() - 600 : 0);
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(is out of service and sent nothing for 1 s \(stall_timeout_s\))"), &match));
  EXPECT_TRUE(Eventually([&] { return Admin(port_).at("replicas").at(0).at("in_flight") == 0; }));
}

// A stream that a replica began, then stalled in (no event, no work in its metrics): cut once the
// replica is held stalled, with an error event and a proper end, rather than left to wait as long
// as the hang (found by review).
TEST_F(GatewayTest, AStreamFromAStalledReplicaEndsWithAnErrorEvent) {
  FakeReplica stalls([](const std::string&) {
    const std::string event = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", event.size());
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
        std::string(size) + event + "\r\n";
    return a;  // and nothing more
  });
  stalls.SetMetrics("vllm:generation_tokens_total{model_name=\"m\"} 5\n");
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(stalls, {"--stall-timeout", "1"}));
  const HttpResult r = HttpPost(
      port_, "/v1/messages",
      R"({"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]})",
      {{"X-Claude-Code-Session-Id", "stalled"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("event: ping"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("event: error"), std::string::npos) << r.body;
  EXPECT_FALSE(Admin(port_).at("replicas").at(0).at("healthy").as_bool());
  EXPECT_TRUE(Eventually([&] { return Admin(port_).at("replicas").at(0).at("in_flight") == 0; }));
}

// A gateway out of file descriptors answers 503 with Retry-After, in the API's shape, and does
// not blame the replicas: their health and their conversations stay, so a conversation goes
// back to its cache once descriptors are free again (before, each replica a request tried was
// marked down and the conversation re-homed).
TEST_F(GatewayTest, OutOfFileDescriptorsTheReplicasKeepTheirHealthAndConversations) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "5"));
  gateway_file_limit_ = 64;
  // One pool of kept connections; connections past the descriptors (max_connections would keep
  // them below).
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1", "--max-connections", "1000"}));
  const auto turn = [](const std::string& text) {
    const std::string body =
        R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":")" + text + R"("}]})";
    return "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           "X-Claude-Code-Session-Id: s1\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  RawConnection streaming(port_), conversation(port_);
  conversation.Send(turn("first"));
  const std::string placed = conversation.ReadUntil("}]");
  std::smatch home;
  ASSERT_TRUE(std::regex_search(placed, home, std::regex("x-warden-replica: ([0-9])"))) << placed;

  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 80; ++i) idle.push_back(std::make_unique<RawConnection>(port_));
  const std::string fd_dir = "/proc/" + std::to_string(gateway_->pid()) + "/fd";
  const auto open_files = [&] {
    return std::distance(std::filesystem::directory_iterator(fd_dir),
                         std::filesystem::directory_iterator());
  };
  ASSERT_TRUE(Eventually([&] { return open_files() >= 63; })) << open_files();
  // The connection kept from the first turn goes to this stream (the conversation's too, so to
  // the same replica); the next turn needs a new one.
  const std::string long_body =
      R"({"model":"m","max_tokens":100,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"long"}]})";
  streaming.Send(
      "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "X-Claude-Code-Session-Id: s1\r\nContent-Length: " +
      std::to_string(long_body.size()) + "\r\n\r\n" + long_body);
  ASSERT_NE(streaming.ReadUntil("content_block_delta").find("content_block_delta"),
            std::string::npos);
  conversation.Send(turn("second"));
  const std::string refused = conversation.ReadUntil("open files");
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos);
  EXPECT_NE(refused.find(R"("type":"overloaded_error")"), std::string::npos);
  EXPECT_NE(refused.find("cannot open a connection to a replica now (Too many open files)"),
            std::string::npos);

  idle.clear();
  ASSERT_NE(streaming.ReadUntil("message_stop").find("message_stop"), std::string::npos);
  const json::object model = Admin(port_);
  for (const json::value& replica : model.at("replicas").as_array())
    EXPECT_TRUE(replica.at("healthy").as_bool()) << replica;
  EXPECT_EQ(Total(model, "rehomed"), 0);
  EXPECT_EQ(SimMetric(port_, "warden_local_connect_failures_total"), 1);
  conversation.Send(turn("third"));
  const std::string third = conversation.ReadUntil("}]", 2).substr(refused.size());
  EXPECT_NE(third.find(home[0].str()), std::string::npos) << third;
  EXPECT_NE(third.find("x-warden-route: sticky"), std::string::npos) << third;
}

}  // namespace
}  // namespace warden::testing
