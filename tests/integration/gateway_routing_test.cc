// `warden serve`: which replica each turn goes to: sessions, keyless conversations, overflow,
// affinity, policies, the Responses API.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

TEST_F(GatewayTest, SixteenSessionsStayOnTheirReplicaAndSpreadOverAll) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  constexpr int kSessions = 16, kTurns = 6;
  std::vector<std::vector<Turn>> turns(kSessions);
  std::vector<std::thread> threads;
  for (int s = 0; s < kSessions; ++s) {
    threads.emplace_back([&, s] {
      Conversation c("s" + std::to_string(s), 150);
      for (int t = 0; t < kTurns; ++t) turns[s].push_back(c.Next(port_));
    });
  }
  for (auto& t : threads) t.join();
  std::set<int> homes;
  for (int s = 0; s < kSessions; ++s) {
    ASSERT_EQ(turns[s].size(), size_t(kTurns));
    EXPECT_EQ(turns[s][0].route, "new");
    for (const Turn& t : turns[s]) {
      EXPECT_EQ(t.status, 200) << t.body;
      EXPECT_EQ(t.replica, turns[s][0].replica) << "session " << s;
    }
    for (int t = 1; t < kTurns; ++t) EXPECT_EQ(turns[s][t].route, "sticky");
    homes.insert(turns[s][0].replica);
  }
  EXPECT_EQ(homes, (std::set<int>{0, 1, 2, 3}));
  const json::object model = Admin(port_);
  EXPECT_EQ(Total(model, "overflow"), 0);
  EXPECT_EQ(Total(model, "requests"), kSessions * kTurns);
  EXPECT_EQ(model.at("stayed_on_replica").as_double(), 1.0);
  // Every turn after the first went home (first turns have none: the share leaves them out, as
  // the panel shows it).
  EXPECT_EQ(model.at("totals").at("sticky").as_int64(), kSessions * (kTurns - 1));
  EXPECT_EQ(model.at("totals").at("sticky_share").as_double(), 1.0);
  // The replicas are `warden sim`s started apart from the gateway: their /v1/models says so, and
  // so do the admin API (and the panel) and the log.
  EXPECT_TRUE(model.at("simulated").is_string() &&
              model.at("simulated").as_string().starts_with("warden sim, profile "))
      << model.at("simulated");
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex(R"(model m: http://\S+ is SIMULATED \(warden sim)"),
                                    &match));
  // Every follow-up turn read its history from the cache: cached tokens were reported.
  EXPECT_GT(Total(model, "cached_prompt_tokens"), Total(model, "computed_prompt_tokens"));
}

// Two gateways in front of the same replicas, each the other's peer, share where each
// conversation lives: a conversation keeps its replica whichever gateway its turns reach, and each
// counts the other's conversations when it balances.
// A data-parallel server with fewer engines than the config says: the ranks it does not have
// (vLLM refuses requests pinned to them) count as unhealthy once its /metrics is read, and every
// conversation goes to a rank that exists.
TEST_F(GatewayTest, RanksADataParallelServerDoesNotHaveGetNoRequests) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  upstream_args_.back() = "4";
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_TRUE(Eventually([&] {
    const json::array replicas = Admin(port_).at("replicas").as_array();
    return replicas.at(0).at("healthy").as_bool() && !replicas.at(2).at("healthy").as_bool() &&
           !replicas.at(3).at("healthy").as_bool();
  }));
  const json::array replicas = Admin(port_).at("replicas").as_array();
  EXPECT_TRUE(replicas.at(1).at("health_problem").is_null());
  EXPECT_EQ(replicas.at(3).at("health_problem"),
            "no rank 3: the server has 2 data-parallel engine(s)");
  EXPECT_GT(replicas.at(3).at("unhealthy_since_unix").as_double(), 1.7e9);
  for (int s = 0; s < 8; ++s) {
    Conversation c("ranks" + std::to_string(s), 40);
    const Turn turn = c.Next(port_);
    EXPECT_EQ(turn.status, 200) << turn.body;
    EXPECT_TRUE(turn.replica == 0 || turn.replica == 1) << turn.replica;
  }
}

// A data-parallel server that comes back with fewer engines, then with all again: the changes
// log (the panel's markers) names the ranks back in service and those its engine count leaves
// out, and the log says so at each change (found by review: it said "replicas 0-3 healthy
// again" with ranks 2-3 still out, and nothing when they left).
TEST_F(GatewayTest, ADataParallelServerBackWithFewerEnginesIsNotedRankByRank) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto healthy = [&](std::vector<bool> expected) {
    return Eventually([&] {
      const json::array replicas = Admin(port_).at("replicas").as_array();
      for (size_t i = 0; i < expected.size(); ++i)
        if (replicas.at(i).at("healthy").as_bool() != expected[i]) return false;
      return true;
    });
  };
  const auto noted = [&](const std::string& what) {
    return Eventually([&] {
      const json::object model = Admin(port_);
      for (const auto& change : model.at("changes").as_array())
        if (change.at("what").as_string() == what) return true;
      return false;
    });
  };
  ASSERT_TRUE(healthy({true, true, true, true}));
  // Ready once the replicas were checked (before, "model m: its replicas not checked yet").
  ASSERT_TRUE(Eventually([&] { return HttpGet(port_, "/ready").status == 200; }));
  EXPECT_EQ(HttpGet(port_, "/ready").body, "ready\n");
  EXPECT_EQ(HttpGet(port_, "/ready?model=m").status, 200);
  EXPECT_EQ(HttpGet(port_, "/ready?model=other").status, 404);
  ASSERT_NO_FATAL_FAILURE(StopSim(0));
  // A load balancer's readiness check says no model can be served (/health, liveness, says ok).
  EXPECT_TRUE(Eventually([&] { return HttpGet(port_, "/ready").status == 503; }));
  EXPECT_EQ(HttpGet(port_, "/ready").body, "model m: no replica in service\n");
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(0, {"--dp", "2"}));
  ASSERT_TRUE(healthy({true, true, false, false}));
  EXPECT_TRUE(noted("replicas 0-1 healthy again"));
  EXPECT_TRUE(noted("replicas 2-3 out of service: the server has 2 data-parallel engine(s)"));
  const json::object model = Admin(port_);
  for (const auto& change : model.at("changes").as_array())
    EXPECT_NE(change.at("what").as_string(), "replicas 0-3 healthy again") << change;
  std::smatch line;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex("reports 2 data-parallel engine\\(s\\) in /metrics, and the config has 4"),
      &line));
  ASSERT_NO_FATAL_FAILURE(StopSim(0));
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(0, {"--dp", "4"}));
  ASSERT_TRUE(healthy({true, true, true, true}));
  EXPECT_TRUE(noted("replicas 2-3 back in service: the server has 4 data-parallel engine(s)"));
  const json::object after = Admin(port_);
  for (const auto& change : after.at("changes").as_array())
    EXPECT_NE(change.at("what").as_string(), "replicas 0-3 healthy again") << change;
}

// Requests with no session key: a prefix-aware policy follows the prompt's prefix, which the
// gateway hashes from the body (system, tools, messages) when the policy asks for it.
TEST_F(GatewayTest, KeylessConversationsFollowTheirPrefixUnderAPrefixAwarePolicy) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--policy", "sglang-cache-aware"}));
  constexpr int kConversations = 8, kTurns = 4;
  std::set<int> replicas;
  for (int c = 0; c < kConversations; ++c) {
    Conversation conversation("k" + std::to_string(c), 400, 30, 16, /*keyed=*/false);
    const Turn first = conversation.Next(port_);
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.route, "balanced");
    replicas.insert(first.replica);
    for (int t = 1; t < kTurns; ++t) {
      const Turn turn = conversation.Next(port_);
      ASSERT_EQ(turn.status, 200) << turn.body;
      EXPECT_EQ(turn.replica, first.replica) << "conversation " << c << " turn " << t;
    }
  }
  // New prefixes go to the replica whose tree is smallest: all four get some.
  EXPECT_EQ(replicas, (std::set<int>{0, 1, 2, 3}));
  EXPECT_GT(Total(Admin(port_), "cached_prompt_tokens"),
            Total(Admin(port_), "computed_prompt_tokens"));
}

TEST_F(GatewayTest, KeylessConversationsStayHomeByTheirOpening) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway({}));
  constexpr int kConversations = 8, kTurns = 4;
  std::set<int> replicas;
  for (int c = 0; c < kConversations; ++c) {
    Conversation conversation("o" + std::to_string(c), 400, 30, 16, /*keyed=*/false);
    const Turn first = conversation.Next(port_);
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.route, "new");
    replicas.insert(first.replica);
    for (int t = 1; t < kTurns; ++t) {
      const Turn turn = conversation.Next(port_);
      ASSERT_EQ(turn.status, 200) << turn.body;
      EXPECT_EQ(turn.route, "sticky");
      EXPECT_EQ(turn.replica, first.replica) << "conversation " << c << " turn " << t;
    }
  }
  EXPECT_EQ(replicas, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(Total(Admin(port_), "sticky"), kConversations * (kTurns - 1));
  EXPECT_EQ(Admin(port_).at("key_sources").at("opening").as_int64(), kConversations * kTurns);
  EXPECT_NE(HttpGet(port_, "/metrics")
                .body.find(R"(warden_requests_by_key_source_total{model="m",source="opening"} 32)"),
            std::string::npos);

  // The same first request again and again (a load test with a fixed body) is not one
  // conversation: each is placed by load.
  std::set<int> spread;
  for (int i = 0; i < 4; ++i) {
    Conversation same("same", 200, 30, 16, /*keyed=*/false);
    const Turn t = same.Next(port_);
    ASSERT_EQ(t.status, 200) << t.body;
    EXPECT_EQ(t.route, "new");
    spread.insert(t.replica);
  }
  EXPECT_GE(spread.size(), 3u);
}

// Keyless conversations that open alike (the same system prompt and first message, as chats that
// all start with "hi") are told apart by their first replies, which the gateway reads as they go
// by: each continues where its own first turn ran, not where the latest of them was placed.
TEST_F(GatewayTest, KeylessConversationsThatOpenAlikeContinueWhereTheyStarted) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway({}));
  constexpr int kConversations = 4, kTurns = 3;
  std::vector<Conversation> conversations;
  std::vector<int> homes;
  for (int c = 0; c < kConversations; ++c) {
    // Replies of different lengths: the simulator's reply to one prompt is always the same.
    conversations.emplace_back("alike", 50, 30, 6 + 3 * c, /*keyed=*/false);
    const Turn first = conversations.back().Next(port_);
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.route, "new");
    homes.push_back(first.replica);
  }
  // Each took its own place: the replicas already holding one had an active conversation more.
  EXPECT_EQ(std::set<int>(homes.begin(), homes.end()).size(), 4u);
  for (int t = 1; t < kTurns; ++t) {
    for (int c = 0; c < kConversations; ++c) {
      const Turn turn = conversations[c].Next(port_);
      ASSERT_EQ(turn.status, 200) << turn.body;
      EXPECT_EQ(turn.route, "sticky");
      EXPECT_EQ(turn.replica, homes[c]) << "conversation " << c << " turn " << t;
    }
  }
  const json::object admin = Admin(port_);
  EXPECT_EQ(Total(admin, "sticky"), kConversations * (kTurns - 1));
  EXPECT_EQ(admin.at("key_sources").at("opening").as_int64(), kConversations * kTurns);
}

// A reply the gateway did not see as it was sent (the client changed it, or the gateway restarted
// in between): the conversation goes on under its first turn's key, where that turn ran.
TEST_F(GatewayTest, AKeylessConversationWhoseReplyChangedStaysWhereItStarted) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway({}));
  const std::string opening =
      R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"Tell me a story."})";
  const HttpResult first = HttpPost(port_, "/v1/messages", opening + "]}");
  ASSERT_EQ(first.status, 200) << first.body;
  for (const char* reply : {"An edited reply.", "Another one."}) {
    const HttpResult later = HttpPost(port_, "/v1/messages",
                                      opening + R"(,{"role":"assistant","content":")" + reply +
                                          R"("},{"role":"user","content":"Go on."}]})");
    ASSERT_EQ(later.status, 200) << later.body;
    EXPECT_EQ(later.header("x-warden-route"), "sticky") << reply;
    EXPECT_EQ(later.header("x-warden-replica"), first.header("x-warden-replica")) << reply;
  }
  // One conversation, counted once (the key the unchanged reply would have named stays idle).
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), 1);
  EXPECT_EQ(Admin(port_).at("sessions").at("active").as_int64(), 1);
}

// The Responses API without stored responses: the client sends the whole history as items each
// turn, the first response's output items included, after a first turn whose input was a string.
TEST_F(GatewayTest, AStatelessResponsesApiConversationStaysWhereItStarted) {
  ASSERT_NO_FATAL_FAILURE(StartSims(4));  // one server a replica: vLLM's DP server balances these
  ASSERT_NO_FATAL_FAILURE(StartGateway({}));
  for (int c = 0; c < 4; ++c) {
    const std::string question = "Tell me story " + std::to_string(c);
    const HttpResult first =
        HttpPost(port_, "/v1/responses",
                 json::serialize(json::object{
                     {"model", "m"}, {"input", question}, {"max_output_tokens", 6 + c}}));
    ASSERT_EQ(first.status, 200) << first.body;
    json::array input;
    input.push_back(json::object{{"role", "user"}, {"content", question}});
    const json::value reply = json::parse(first.body);
    for (const auto& item : reply.at("output").as_array()) input.push_back(item);
    input.push_back(json::object{{"role", "user"}, {"content", "Go on."}});
    const HttpResult next = HttpPost(
        port_, "/v1/responses",
        json::serialize(json::object{{"model", "m"}, {"input", input}, {"max_output_tokens", 4}}));
    ASSERT_EQ(next.status, 200) << next.body;
    EXPECT_EQ(next.header("x-warden-route"), "sticky") << c;
    EXPECT_EQ(next.header("x-warden-replica"), first.header("x-warden-replica")) << c;
  }
}

// A data-parallel server's Responses API requests are placed by vLLM's balancer, which knows
// nothing of a drain: with every rank drained a new one gets the 503 other requests get (it was
// sent on, to a server the operator meant to restart).
TEST_F(GatewayTest, ResponsesRequestsToADataParallelServerDrainedWhollyGetA503) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto respond = [&] {
    return HttpPost(port_, "/v1/responses",
                    R"({"model": "m", "input": "Tell me a story", "max_output_tokens": 4})");
  };
  ASSERT_TRUE(Eventually([&] { return respond().status == 200; }));
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": true}]})")
                .status,
            200);
  EXPECT_EQ(respond().status, 200);  // one rank left: vLLM's balancer places it
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 1, "draining": true}]})")
                .status,
            200);
  const HttpResult refused = respond();
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find("draining"), std::string::npos) << refused.body;
}

// A hashing policy places a keyless conversation's turns by its first turn's key: the reply in the
// later turns' key does not move them on the ring.
TEST_F(GatewayTest, AHashingPolicyKeepsAKeylessConversationsTurnsTogether) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--policy", "session-hash"}));
  for (int c = 0; c < 4; ++c) {
    Conversation conversation("hashed" + std::to_string(c), 60, 20, 8, /*keyed=*/false);
    const Turn first = conversation.Next(port_);
    ASSERT_EQ(first.status, 200) << first.body;
    for (int t = 1; t < 3; ++t) {
      const Turn turn = conversation.Next(port_);
      ASSERT_EQ(turn.status, 200) << turn.body;
      EXPECT_EQ(turn.replica, first.replica) << "conversation " << c << " turn " << t;
    }
  }
}

TEST_F(GatewayTest, WithoutTheOpeningKeyKeylessRequestsAreBalanced) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--key-from-opening", "off"}));
  Conversation conversation("b", 100, 30, 16, /*keyed=*/false);
  for (int t = 0; t < 3; ++t) {
    const Turn turn = conversation.Next(port_);
    ASSERT_EQ(turn.status, 200) << turn.body;
    EXPECT_EQ(turn.route, "balanced");
  }
  EXPECT_EQ(Total(Admin(port_), "sticky"), 0);
  EXPECT_EQ(Admin(port_).at("key_sources").at("none").as_int64(), 3);
}

TEST_F(GatewayTest, OverflowGoesElsewhereWithoutMovingTheHome) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2, "10"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--overflow-limit", "1"}));
  Conversation c("over", 100);
  const Turn first = c.Next(port_);
  ASSERT_EQ(first.status, 200);
  const int home = first.replica;

  // Three turns of the session at once (a client firing side requests in parallel).
  std::vector<Turn> parallel(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      Conversation copy = c;
      parallel[i] = copy.Next(port_, 300);
    });
  }
  for (auto& t : threads) t.join();
  int sticky = 0, overflow = 0;
  for (const Turn& t : parallel) {
    EXPECT_EQ(t.status, 200);
    if (t.route == "sticky") {
      ++sticky;
      EXPECT_EQ(t.replica, home);
    } else {
      EXPECT_EQ(t.route, "overflow");
      EXPECT_NE(t.replica, home);
      ++overflow;
    }
  }
  EXPECT_EQ(sticky, 1);
  EXPECT_EQ(overflow, 2);
  EXPECT_EQ(Total(Admin(port_), "overflow"), 2);
  const Turn later = c.Next(port_);
  EXPECT_EQ(later.route, "sticky");
  EXPECT_EQ(later.replica, home);
}

TEST_F(GatewayTest, AffinityOffThroughTheAdminApiSpreadsTurnsByLoad) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--when-affinity-off", "gateway"}));
  const HttpResult off = HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"affinity": false})");
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_FALSE(json::parse(off.body).at("affinity").as_bool());
  EXPECT_FALSE(Admin(port_).at("affinity").as_bool());
  // The gateway's start is one number however often it is read (found by review: it was the Unix
  // time of now less the time since, rounded differently from read to read, so a monitor that
  // compares it saw restarts that never were).
  const json::object first = Admin(port_);
  for (int i = 0; i < 20; ++i) {
    const json::object again = Admin(port_);
    EXPECT_EQ(again.at("started_unix").as_double(), first.at("started_unix").as_double());
    EXPECT_EQ(again.at("history").at("since_unix").as_double(),
              first.at("history").at("since_unix").as_double());
  }

  Conversation c("wander", 100);
  std::set<int> replicas;
  for (int t = 0; t < 8; ++t) {
    const Turn turn = c.Next(port_);
    EXPECT_EQ(turn.route, "balanced");
    replicas.insert(turn.replica);
  }
  EXPECT_GE(replicas.size(), 3u);

  const HttpResult on =
      HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"affinity": true, "overflow_limit": 3})");
  ASSERT_EQ(on.status, 200);
  EXPECT_EQ(json::parse(on.body).at("overflow_limit").as_int64(), 3);
  EXPECT_FALSE(json::parse(on.body).at("overflow_limit_auto").as_bool());
  const HttpResult back =
      HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"overflow_limit": "auto"})");
  EXPECT_EQ(json::parse(back.body).at("overflow_limit").as_int64(), 8);  // 32 / 4
  EXPECT_TRUE(json::parse(back.body).at("overflow_limit_auto").as_bool());
  const HttpResult bad =
      HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"overflow_limit": 0})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("overflow_limit"), std::string::npos);
  // A refused admission mode is named, and nothing else in the body is applied.
  const HttpResult mode = HttpCall(port_, "PATCH", "/warden/v1/models/m",
                                   R"({"affinity": false, "admission": "reserve:1"})");
  EXPECT_EQ(mode.status, 400);
  EXPECT_NE(mode.body.find("got 'reserve:1'"), std::string::npos) << mode.body;
  EXPECT_TRUE(Admin(port_).at("affinity").as_bool());
  EXPECT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/nope", "{}").status, 404);
}

// The policy is chosen at runtime through the admin API: the next turns follow it at once, and a
// prefix-aware one has the prompts of requests without a key hashed from then on.
TEST_F(GatewayTest, APolicyChosenThroughTheAdminApiRoutesTheNextTurns) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  // Requests without a key are then placed by the policy alone (not kept home by their opening).
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--key-from-opening", "off"}));
  const auto patch = [&](const std::string& body) {
    return HttpCall(port_, "PATCH", "/warden/v1/models/m", body);
  };
  Conversation c("chosen", 100);
  const Turn first = c.Next(port_);
  ASSERT_EQ(first.status, 200);
  const HttpResult rr = patch(R"({"policy": "round-robin"})");
  ASSERT_EQ(rr.status, 200) << rr.body;
  EXPECT_EQ(json::parse(rr.body).at("policy").as_string(), "round-robin");
  std::set<int> replicas;
  for (int t = 0; t < 4; ++t) replicas.insert(c.Next(port_).replica);
  EXPECT_EQ(replicas.size(), 4u);  // load-blind and session-blind: every replica in turn

  for (const char* bad : {R"({"policy": "nope"})", R"({"policy": 3})"}) {
    const HttpResult r = patch(bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_NE(r.body.find("policy: must be one of warden-seed, "), std::string::npos) << r.body;
  }
  EXPECT_EQ(Admin(port_).at("policy").as_string(), "round-robin");

  ASSERT_EQ(patch(R"({"policy": "sglang-cache-aware"})").status, 200);
  std::set<int> openings;
  for (int k = 0; k < 6; ++k) {
    Conversation keyless("unkeyed" + std::to_string(k), 400, 30, 16, /*keyed=*/false);
    const Turn opening = keyless.Next(port_);
    ASSERT_EQ(opening.status, 200) << opening.body;
    openings.insert(opening.replica);
    for (int t = 1; t < 3; ++t) EXPECT_EQ(keyless.Next(port_).replica, opening.replica) << k;
  }
  EXPECT_GE(openings.size(), 2u);
}

TEST_F(GatewayTest, AffinityOffOnADataParallelServerLeavesPlacementToVllmsBalancer) {
  ASSERT_NO_FATAL_FAILURE(
      StartDpSim(4));  // its balancer: vLLM 0.26's, round-robin for dense models
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--access-log"}));
  // The engine's series are there from the start, at 0: a series that appeared with its first
  // request would lose it to Prometheus' rate().
  EXPECT_NE(HttpGet(port_, "/metrics")
                .body.find(R"(warden_requests_total{model="m",replica="engine",route="engine"} 0)"),
            std::string::npos);
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"affinity": false})").status, 200);
  Conversation c("delegated", 100);
  for (int t = 0; t < 8; ++t) {
    const Turn turn = c.Next(port_);
    EXPECT_EQ(turn.status, 200);
    EXPECT_EQ(turn.route, "engine");
    EXPECT_EQ(turn.replica, -1);  // the gateway does not know the rank
  }
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex(R"(POST /v1/\S+ 200 .* route=engine)"), &match));
  // vLLM's balancers (one per API server; the gateway's connections may land on several) go
  // round the ranks: the turns are spread, none of them following the conversation.
  double served = 0;
  int ranks_used = 0;
  for (const char* rank : {"0", "1", "2", "3"}) {
    const double n = SimMetric(sim_ports_[0], "vllm:request_success_total", "engine", rank);
    served += n;
    ranks_used += n > 0 ? 1 : 0;
  }
  EXPECT_EQ(served, 8);
  EXPECT_GE(ranks_used, 2);
  const json::object model = Admin(port_);
  EXPECT_EQ(model.at("engine_balanced").at("requests").as_int64(), 8);
  EXPECT_EQ(model.at("totals").at("requests").as_int64(), 8);
  EXPECT_EQ(model.at("when_affinity_off").as_string(), "engine");
  // The panel's hour of prompt tokens has them too, apart from the replicas'.
  const json::object& history = model.at("history").as_object();
  EXPECT_GT(history.at("cached_tokens").as_int64() + history.at("computed_tokens").as_int64(), 0);
  EXPECT_EQ(history.at("replicas").as_array().size(), 4u);
  int64_t engine_placed = 0;
  for (const auto& v : history.at("engine_balanced").at("computed").as_array())
    engine_placed += v.as_int64();
  EXPECT_GT(engine_placed, 0);
  // In /metrics they are counted under replica="engine", which is no replica: no health or
  // conversations of its own.
  const std::string metrics = HttpGet(port_, "/metrics").body;
  EXPECT_NE(metrics.find(R"(warden_requests_total{model="m",replica="engine",route="engine"} 8)"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find(R"(warden_replica_healthy{model="m",replica="engine"})"),
            std::string::npos);
  EXPECT_EQ(metrics.find(R"(warden_active_conversations{model="m",replica="engine"})"),
            std::string::npos);

  // vLLM's balancer knows nothing of a drain: while rank 2 drains, the gateway places by load,
  // elsewhere; resumed, placement is vLLM's again.
  const double rank_2_served =
      SimMetric(sim_ports_[0], "vllm:request_success_total", "engine", "2");
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 2, "draining": true}]})")
                .status,
            200);
  for (int t = 0; t < 6; ++t) {
    const Turn turn = c.Next(port_);
    EXPECT_EQ(turn.status, 200);
    EXPECT_EQ(turn.route, "balanced");
    EXPECT_NE(turn.replica, 2);
    EXPECT_GE(turn.replica, 0);
  }
  EXPECT_EQ(SimMetric(sim_ports_[0], "vllm:request_success_total", "engine", "2"), rank_2_served);
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 2, "draining": false}]})")
                .status,
            200);
  EXPECT_EQ(c.Next(port_).route, "engine");
}

// dynamo counts the blocks of the requests in flight on each replica until they end: one that has
// ended weighs on its replica no more (the gateway tells the policy), so the small requests after
// a large one are spread by chance rather than all sent away from where it ran.
TEST_F(GatewayTest, DynamoStopsCountingARequestOnceItEnds) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--policy", "dynamo"}));
  const HttpResult large = HttpPost(port_, "/v1/chat/completions", ChatBody("large", 3000, 4));
  ASSERT_EQ(large.status, 200) << large.body;
  std::set<std::string> replicas;
  for (int i = 0; i < 16; ++i) {
    const HttpResult small =
        HttpPost(port_, "/v1/chat/completions", ChatBody("small" + std::to_string(i), 10, 4));
    ASSERT_EQ(small.status, 200) << small.body;
    replicas.insert(small.header("x-warden-replica"));
  }
  EXPECT_EQ(replicas, (std::set<std::string>{"0", "1"}));
}

// warden counts each replica's cache in the 64-byte chunks it hashes prompts into: it learns from
// whole answers' usage how many tokens a chunk holds (16 until then). Prompts of long words hold
// few tokens a chunk, about 64 / 19.
TEST_F(GatewayTest, WardenLearnsHowManyTokensItsPromptChunksHold) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--policy", "warden"}));
  const auto tokens_per_chunk = [&] {
    return Admin(port_).at("prefix_tokens_per_chunk").to_number<double>();
  };
  EXPECT_EQ(tokens_per_chunk(), 16);
  for (int i = 0; i < 20; ++i) {
    const HttpResult turn = HttpPost(port_, "/v1/chat/completions",
                                     ChatBody("wordsofeighteen" + std::to_string(i), 200, 4),
                                     {{"X-Session-ID", "s" + std::to_string(i)}});
    ASSERT_EQ(turn.status, 200) << turn.body;
  }
  EXPECT_TRUE(Eventually([&] { return tokens_per_chunk() < 8; })) << tokens_per_chunk();
  EXPECT_GT(tokens_per_chunk(), 2);
}

// Conversations idle past the timeout stop counting as active in the admin API with no request
// coming to expire them.
TEST_F(GatewayTest, IdleConversationsStopCountingAsActiveWithoutTraffic) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  const std::string config_path = ::testing::TempDir() + "/warden-idle.yaml";
  {
    std::ofstream f(config_path);
    f << "session:\n  idle_timeout_s: 2\nmodels:\n"
      << "  - name: m\n    aliases: ['claude-*']\n    url: http://127.0.0.1:" << sim_ports_[0]
      << "\n    data_parallel_size: 2\n    scrape_interval_s: 0.1\n";
  }
  std::vector<uint16_t> ports;
  gateway_ = StartWarden({"serve", "--config", config_path, "--listen", "127.0.0.1:0"}, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];
  for (int s = 0; s < 3; ++s) {
    Conversation c("idle-" + std::to_string(s), 20);
    ASSERT_EQ(c.Next(port_).status, 200);
  }
  const auto active = [&] { return Admin(port_).at("sessions").at("active").as_int64(); };
  EXPECT_GE(active(), 1);  // the last one, at least, is not yet idle (2 s: a slow machine too)
  EXPECT_TRUE(Eventually([&] { return active() == 0; }, 10));
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), 3);
}

// Claude Code's turn `turns` of a conversation: each of its turns ends with a system message (the
// token budget left), which it keeps in the history.
std::string ReminderTurn(const std::string& tag, int turns) {
  json::array messages;
  for (int t = 0; t < turns; ++t) {
    if (t > 0) messages.push_back(json::object{{"role", "assistant"}, {"content", "done"}});
    messages.push_back(
        json::object{{"role", "user"}, {"content", Words(tag + std::to_string(t), 200)}});
    messages.push_back(json::object{{"role", "system"},
                                    {"content", "<total_tokens>" + std::to_string(900000 - t) +
                                                    " tokens left</total_tokens>"}});
  }
  return json::serialize(json::object{
      {"model", "m"}, {"max_tokens", 4}, {"system", "be brief"}, {"messages", messages}});
}

// Where the chat template refuses a system message after the first, vLLM merges Claude Code's
// into the system prompt: each turn's prompt then differs from the last one's right after the
// system prompt. Passed on as user messages (inline_system_as_user), the history is read from the
// cache again.
TEST_F(GatewayTest, InlineSystemMessagesAsUserMessagesKeepTheHistoryCached) {
  std::vector<uint16_t> ports;
  sims_.push_back(StartWarden({"sim", "--port", "0", "--model", "m", "--time-scale", "100",
                               "--api-latency", "0", "--merge-inline-system"},
                              &ports));
  ASSERT_NE(sims_.back(), nullptr);
  upstream_args_ = {"--url", "http://127.0.0.1:" + std::to_string(ports[0])};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  std::vector<uint16_t> rewriting_ports;
  std::vector<std::string> args = {"serve", "--listen",  "127.0.0.1:0", "--model",
                                   "m",     "--threads", "1",           "--inline-system-as-user",
                                   "on"};
  args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
  const std::unique_ptr<ChildProcess> rewriting = StartWarden(args, &rewriting_ports);
  ASSERT_NE(rewriting, nullptr);

  // The cache reads of each turn after the first, through `port`.
  const auto cached_reads = [](uint16_t port, const std::string& tag) {
    std::vector<int64_t> reads;
    for (int turns = 1; turns <= 3; ++turns) {
      const HttpResult r = HttpPost(port, "/v1/messages", ReminderTurn(tag, turns),
                                    {{"X-Claude-Code-Session-Id", tag}});
      EXPECT_EQ(r.status, 200) << r.body;
      if (r.status != 200) return reads;
      const json::object usage = json::parse(r.body).at("usage").as_object();
      if (turns > 1) reads.push_back(usage.at("cache_read_input_tokens").as_int64());
    }
    return reads;
  };
  const std::vector<int64_t> merged = cached_reads(port_, "merged");
  const std::vector<int64_t> as_user = cached_reads(rewriting_ports[0], "asuser");
  ASSERT_EQ(merged.size(), 2u);
  ASSERT_EQ(as_user.size(), 2u);
  // The system prompt and the reminders before the new one, at most: not the conversation.
  for (int64_t read : merged) EXPECT_LE(read, 48) << merged[0] << " " << merged[1];
  EXPECT_GE(as_user[0], 200);  // turn 1's prompt
  EXPECT_GE(as_user[1], 400);  // turns 1 and 2
  EXPECT_EQ(Admin(rewriting_ports[0]).at("inline_system_rewrites").as_int64(), 3);
  EXPECT_EQ(Admin(port_).at("inline_system_rewrites").as_int64(), 0);
  // A byte-order mark before the JSON is taken off, and the body rewritten all the same (found by
  // review: it went on unchanged).
  EXPECT_EQ(HttpPost(rewriting_ports[0], "/v1/messages", "\xEF\xBB\xBF" + ReminderTurn("bom", 2),
                     {{"X-Claude-Code-Session-Id", "bom"}})
                .status,
            200);
  EXPECT_EQ(Admin(rewriting_ports[0]).at("inline_system_rewrites").as_int64(), 4);
}

// A first turn that gets no answer (a stream's head, then nothing for read_timeout_s; no head at
// all) leaves no conversation going on: its opening's entry is handed over, as one that ended
// with an error is, and the same opening sent again is placed afresh.
TEST_F(GatewayTest, AFirstTurnWithNoAnswerLeavesNoConversationGoingOn) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    if (request.find("head-only") != std::string::npos)
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
          "chunked\r\n\r\n";
    return a;  // else nothing at all
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--read-timeout", "1"}));
  const HttpResult head_only =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("head-only"));
  EXPECT_EQ(head_only.status, 504);
  EXPECT_NE(head_only.body.find("the replica sent no event in 1 s"), std::string::npos)
      << head_only.body;
  EXPECT_EQ(head_only.header("x-should-retry"), "false");  // (found by review)
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("nothing")).status, 504);
  const json::object admin = Admin(port_);
  EXPECT_EQ(admin.at("sessions").at("active").as_int64(), 0) << admin.at("sessions");
  EXPECT_EQ(admin.at("replicas").at(0).at("active_conversations").as_int64(), 0);
  EXPECT_EQ(admin.at("replicas").at(0).at("in_flight").as_int64(), 0);
  EXPECT_EQ(admin.at("replicas").at(0).at("failed").as_int64(), 2);
}

// A later turn that fails on every try no longer counts among the conversations going on
// (before, its turn stayed "in flight" until the conversation went idle).
TEST_F(GatewayTest, ALaterTurnWithNoAnswerLeavesNoConversationGoingOn) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    if (request.find("fails") != std::string::npos) {
      a.close_after_ms = 0;  // closed with no answer, each try
    } else {
      a.bytes =
          JsonResponse(R"({"id":"c","object":"chat.completion","choices":[{"index":0,"message":)"
                       R"({"role":"assistant","content":"ok"},"finish_reason":"stop"}],)"
                       R"("usage":{"prompt_tokens":5,"completion_tokens":2}})");
    }
    return a;
  });
  // A tenth of the idle timeout is the window of "going on": 1 s.
  const std::string config_path = ::testing::TempDir() + "/warden-recent.yaml";
  {
    std::ofstream f(config_path);
    f << "session: {idle_timeout_s: 10}\n";
  }
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--config", config_path}));
  const std::vector<std::pair<std::string, std::string>> session = {
      {"X-Claude-Code-Session-Id", "turns"}};
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("works"), session).status, 200);
  const HttpResult failed =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("fails"), session);
  EXPECT_EQ(failed.status, 502) << failed.body;
  const auto going_on = [&] {
    return Admin(port_).at("working_set").at("recent_conversations").as_int64();
  };
  EXPECT_TRUE(Eventually([&] { return going_on() == 0; }, 8)) << going_on();
  EXPECT_EQ(Admin(port_).at("sessions").at("active").as_int64(), 1);  // not idle yet
}

// A request opening the same way as one still in flight is kept off that one's key, on its retries
// too: the first one's conversation stays where it runs (found by review: a retry took the key,
// and its reply handed the other's entry over).
TEST_F(GatewayTest, ARetryOfARequestKeptOffAnotherOpeningsKeyLeavesItsEntryAlone) {
  std::atomic<int> refusals{0};
  const auto answer = [&](const std::string& request) {
    FakeAnswer a;
    if (request.find("x-who: b") != std::string::npos && refusals.fetch_add(1) == 0) {
      a.bytes = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
      return a;
    }
    const std::string reply = JsonResponse(
        std::string(R"({"id":"c","object":"chat.completion","choices":[{"index":0,"message":)") +
        R"({"role":"assistant","content":")" +
        (request.find("x-who: a") != std::string::npos ? "first reply" : "second reply") +
        R"("},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}})");
    if (request.find("x-who: a") != std::string::npos) {
      a.bytes = reply.substr(0, reply.size() - 1);  // the last byte after a pause
      a.then = reply.substr(reply.size() - 1);
      a.then_after_ms = 1500;
    } else {
      a.bytes = reply;
    }
    return a;
  };
  FakeReplica zero(answer), one(answer), two(answer);
  upstream_args_ = {"--url", zero.url(), "--url", one.url(), "--url", two.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string body = ScenarioRequest("the same opening");
  std::thread a([&] {
    EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", body, {{"x-who", "a"}}).status, 200);
  });
  int a_replica = -1;
  ASSERT_TRUE(Eventually([&] {
    const json::object admin = Admin(port_);
    for (int r = 0; r < 3; ++r)
      if (admin.at("replicas").at(r).at("in_flight").as_int64() == 1) a_replica = r;
    return a_replica >= 0;
  }));
  const HttpResult b = HttpPost(port_, "/v1/chat/completions", body, {{"x-who", "b"}});
  EXPECT_EQ(b.status, 200) << b.body;
  const json::object during = Admin(port_);
  EXPECT_EQ(during.at("replicas").at(a_replica).at("in_flight").as_int64(), 1);  // a still runs
  EXPECT_EQ(during.at("replicas").at(a_replica).at("active_conversations").as_int64(), 1)
      << during.at("replicas");
  a.join();
}

// Agents that open alike and whose first replies are tool calls, streamed: the calls' ids, unique
// per call as engines make them, tell the conversations apart, so each continues where it started.
TEST_F(GatewayTest, KeylessAgentsThatOpenAlikeAreToldApartByTheirToolCalls) {
  std::atomic<int> calls{0};
  const auto answer = [&](const std::string&) {
    const std::string body =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{"
        "\"index\":0,\"id\":\"call_" +
        std::to_string(++calls) +
        "\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]}}]}\n\n"
        "data: [DONE]\n\n";
    FakeAnswer a;
    a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n" + body;
    return a;
  };
  FakeReplica a(answer), b(answer);
  upstream_args_ = {"--url", a.url(), "--url", b.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string opening =
      R"({"model":"m","stream":true,"messages":[{"role":"system","content":"You are an agent."},)"
      R"({"role":"user","content":"List the files."})";
  std::map<std::string, int> home_of_call;  // the tool call each conversation's reply made
  for (int c = 0; c < 2; ++c) {
    const HttpResult first = HttpPost(port_, "/v1/chat/completions", opening + "]}");
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.header("x-warden-route"), "new");
    const size_t at = first.body.find("call_");
    ASSERT_NE(at, std::string::npos) << first.body;
    home_of_call[first.body.substr(at, first.body.find('"', at) - at)] =
        std::stoi(first.header("x-warden-replica"));
  }
  ASSERT_EQ(home_of_call.size(), 2u);
  EXPECT_NE(home_of_call.begin()->second, home_of_call.rbegin()->second);
  for (const auto& [call, home] : home_of_call) {
    const std::string next = opening +
                             R"(,{"role":"assistant","content":null,"tool_calls":[{"id":")" + call +
                             R"(","type":"function","function":{"name":"ls","arguments":"{}"}}]},)"
                             R"({"role":"tool","tool_call_id":")" +
                             call + R"(","content":"a.txt"}]})";
    const HttpResult turn = HttpPost(port_, "/v1/chat/completions", next);
    ASSERT_EQ(turn.status, 200) << turn.body;
    EXPECT_EQ(turn.header("x-warden-route"), "sticky") << call;
    EXPECT_EQ(turn.header("x-warden-replica"), std::to_string(home)) << call;
  }
}

// Qwen Code opens every session with the same canned exchange (its context message and the
// assistant's "Got it. Thanks for the context!") before the real prompt, and sends no session id.
// Sessions opened alike this way are still separate conversations: each placed as new, each going
// on where it started (before, all of them shared the key of the canned reply and piled onto the
// first one's replica).
TEST_F(GatewayTest, KeylessAgentsThatOpenWithTheSameCannedExchangeStayApart) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway({}));
  const std::string opening =
      R"({"model":"m","max_tokens":8,"messages":[{"role":"system","content":"You are Qwen Code."},)"
      R"({"role":"user","content":"Today is Monday. The folder holds a.c and b.c."},)"
      R"({"role":"assistant","content":"Got it. Thanks for the context!"},)";
  constexpr int kSessions = 3, kTurns = 3;
  std::vector<std::string> messages;
  std::vector<std::string> homes;
  for (int c = 0; c < kSessions; ++c) {
    messages.push_back(opening + R"({"role":"user","content":"Task )" + std::to_string(c) +
                       R"(: fix the build."})");
    const HttpResult first = HttpPost(port_, "/v1/chat/completions", messages.back() + "]}");
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.header("x-warden-route"), "new") << c;
    homes.push_back(first.header("x-warden-replica"));
    const std::string reply = json::value_to<std::string>(
        json::parse(first.body).at_pointer("/choices/0/message/content"));
    messages.back() +=
        R"(,{"role":"assistant","content":)" + json::serialize(json::value(reply)) + "}";
  }
  EXPECT_EQ(std::set<std::string>(homes.begin(), homes.end()).size(), size_t{kSessions});
  for (int t = 1; t < kTurns; ++t) {
    for (int c = 0; c < kSessions; ++c) {
      const HttpResult turn = HttpPost(
          port_, "/v1/chat/completions",
          messages[c] + R"(,{"role":"user","content":"Go on )" + std::to_string(t) + R"("}]})");
      ASSERT_EQ(turn.status, 200) << turn.body;
      EXPECT_EQ(turn.header("x-warden-route"), "sticky") << c << " turn " << t;
      EXPECT_EQ(turn.header("x-warden-replica"), homes[c]) << c << " turn " << t;
    }
  }
  EXPECT_EQ(Total(Admin(port_), "new"), kSessions);
}

// Claude Code asks for max_tokens 32000 on every turn, and a vLLM whose context is shorter refuses
// it; Claude Code sends the turn again at once with a max_tokens that fits. Only the answered
// requests are turns: each conversation's follow-up turns are counted once, all stayed.
TEST_F(GatewayTest, ARefusedRequestIsNoTurnOfItsConversation) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2, "100", {"--strict-max-tokens"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({}));
  json::array messages{json::object{{"role", "user"}, {"content", Words("refused", 100)}}};
  for (int turn = 0; turn < 3; ++turn) {
    for (int max_tokens : {10000000, 8}) {
      const json::object body{{"model", "m"}, {"max_tokens", max_tokens}, {"messages", messages}};
      const HttpResult r = HttpPost(port_, "/v1/messages", json::serialize(body),
                                    {{"X-Claude-Code-Session-Id", "refused"}});
      EXPECT_EQ(r.status, max_tokens == 8 ? 200 : 400) << r.body;
    }
    messages.push_back(json::object{{"role", "assistant"}, {"content", "Done."}});
    messages.push_back(json::object{{"role", "user"}, {"content", Words("next", 10)}});
  }
  const json::object model = Admin(port_);
  EXPECT_EQ(model.at("follow_up_turns").as_int64(), 2);
  EXPECT_EQ(model.at("stayed_on_replica").as_double(), 1.0);
  EXPECT_EQ(Total(model, "requests"), 6);
}

// An opening refused by the replica names no conversation: the next sessions that open alike (with
// Qwen Code's canned exchange, so that their first request's key is already a reply's) are each a
// new conversation of their own, not turns of the refused one.
TEST_F(GatewayTest, AKeylessOpeningThatWasRefusedLeavesTheNextOnesApart) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4, "100", {"--strict-max-tokens"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({}));
  const auto opening = [](int max_tokens) {
    return R"({"model":"m","max_tokens":)" + std::to_string(max_tokens) +
           R"(,"messages":[{"role":"system","content":"You are Qwen Code."},)"
           R"({"role":"user","content":"Today is Monday. The folder holds a.c and b.c."},)"
           R"({"role":"assistant","content":"Got it. Thanks for the context!"},)"
           R"({"role":"user","content":"Fix the build."}]})";
  };
  const HttpResult refused = HttpPost(port_, "/v1/chat/completions", opening(10000000));
  ASSERT_EQ(refused.status, 400) << refused.body;
  std::set<std::string> homes;
  for (int c = 0; c < 2; ++c) {
    const HttpResult first = HttpPost(port_, "/v1/chat/completions", opening(8));
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.header("x-warden-route"), "new") << c;
    homes.insert(first.header("x-warden-replica"));
  }
  EXPECT_EQ(homes.size(), 2u);
}

// A client that stops a first turn's stream keeps the part it got, and sends that part as the reply
// next: the gateway names the conversation by what it relayed, so conversations that open alike
// still go on where they started.
TEST_F(GatewayTest, AKeylessConversationWhoseFirstReplyWasCutOffStaysWhereItStarted) {
  std::atomic<int> replies{0};
  const auto answer = [&](const std::string& request) {
    FakeAnswer a;
    if (request.find("Go on.") != std::string::npos) {
      a.bytes = JsonResponse(R"({"content":[{"type":"text","text":"ok"}]})");
      return a;
    }
    const std::string n = std::to_string(++replies);
    std::string events;
    for (const char* word : {"Once ", "upon ", "a time "}) {
      events +=
          "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
          "\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
          std::string(word) + n + "\"}}\n\n";
    }
    std::ostringstream size;
    size << std::hex << events.size();
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        "Transfer-Encoding: chunked\r\n\r\n" +
        size.str() + "\r\n" + events + "\r\n";
    a.then = "0\r\n\r\n";  // the rest of the reply, long after the client stopped reading
    a.then_after_ms = 1000;
    return a;
  };
  FakeReplica a(answer), b(answer);
  upstream_args_ = {"--url", a.url(), "--url", b.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string opening =
      R"({"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"Tell me a story."})";
  std::vector<std::pair<std::string, std::string>> started;  // the text kept, the replica
  for (int c = 0; c < 2; ++c) {
    std::string received;
    {
      RawConnection connection(port_);
      connection.Send(MessagesRequestBytes(opening + "]}"));
      received = connection.ReadUntil("}}\n\n", 3);
    }  // closed: the client stopped the stream
    std::string kept;
    const std::regex text(R"re("text":"([^"]*)")re");
    for (auto it = std::sregex_iterator(received.begin(), received.end(), text);
         it != std::sregex_iterator(); ++it)
      kept += (*it)[1].str();
    std::smatch replica;
    ASSERT_TRUE(std::regex_search(received, replica, std::regex(R"(x-warden-replica: (\d))")))
        << received;
    started.emplace_back(kept, replica[1].str());
    ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  }
  ASSERT_NE(started[0].second, started[1].second);
  for (const auto& [kept, replica] : started) {
    const HttpResult next = HttpPost(port_, "/v1/messages",
                                     opening + R"(,{"role":"assistant","content":")" + kept +
                                         R"("},{"role":"user","content":"Go on."}]})");
    ASSERT_EQ(next.status, 200) << next.body;
    EXPECT_EQ(next.header("x-warden-route"), "sticky") << kept;
    EXPECT_EQ(next.header("x-warden-replica"), replica) << kept;
  }
}

// OpenAI's Responses API (what Codex speaks): keyed by "prompt_cache_key", each conversation's
// turns stay on its replica (one server per replica: vLLM reads no rank header there), their
// cache reads are counted from the usage in response.completed (streamed) or in the whole
// response.
TEST_F(GatewayTest, ResponsesApiTurnsAreStickyAndTheirCacheReadsCounted) {
  ASSERT_NO_FATAL_FAILURE(StartSims(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  int64_t cached = 0;
  std::set<std::string> homes;
  for (int c = 0; c < 4; ++c) {
    const std::string conversation = "codex-" + std::to_string(c);
    json::array input;
    std::string home;
    for (int t = 0; t < 3; ++t) {
      input.push_back(json::object{
          {"role", "user"},
          {"content", json::array{json::object{
                          {"type", "input_text"},
                          {"text", Words(conversation + std::to_string(t), t == 0 ? 200 : 20)}}}}});
      const json::object body{{"model", "m"},     {"instructions", "You are a coding agent."},
                              {"input", input},   {"max_output_tokens", 8},
                              {"stream", t != 1}, {"prompt_cache_key", conversation}};
      const HttpResult r = HttpPost(port_, "/v1/responses", json::serialize(body));
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.header("x-warden-route"), t == 0 ? "new" : "sticky");
      if (t == 0) home = r.header("x-warden-replica");
      EXPECT_EQ(r.header("x-warden-replica"), home);
      json::value response;
      if (t == 1) {
        response = json::parse(r.body);
      } else {
        for (const SseEvent& e : ParseSse(r.body)) {
          if (e.event == "response.completed" || e.event == "response.incomplete")
            response = json::parse(e.data).at("response");
        }
      }
      const json::value& usage = response.at("usage");
      cached += usage.at("input_tokens_details").at("cached_tokens").as_int64();
      std::string said;
      for (const auto& part : response.at("output").at(0).at("content").as_array())
        said += part.at("text").as_string();
      input.push_back(json::object{{"role", "assistant"}, {"content", said}});
    }
    homes.insert(home);
  }
  EXPECT_EQ(homes.size(), 4u);  // four new conversations on four idle replicas
  ASSERT_GT(cached, 0);
  const json::object model = Admin(port_);
  EXPECT_EQ(Total(model, "cached_prompt_tokens"), cached);
  EXPECT_EQ(Total(model, "usage_unknown"), 0);
  EXPECT_EQ(Total(model, "cache_unreported"), 0);
  EXPECT_EQ(Total(model, "sticky"), 8);
}

// vLLM does not read X-data-parallel-rank on its Responses API: on a data-parallel server its own
// balancer places those requests, and the gateway says so instead of claiming a replica.
TEST_F(GatewayTest, OnADataParallelServerResponsesApiRequestsArePlacedByTheEngine) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (int t = 0; t < 2; ++t) {
    const json::object body{{"model", "m"},
                            {"input", Words("codex" + std::to_string(t), 50)},
                            {"max_output_tokens", 4},
                            {"prompt_cache_key", "codex"}};
    const HttpResult r = HttpPost(port_, "/v1/responses", json::serialize(body));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-route"), "engine");
    EXPECT_EQ(r.header("x-warden-replica"), "");
  }
  const json::object model = Admin(port_);
  EXPECT_EQ(model.at("engine_balanced").at("requests").as_int64(), 2);
  EXPECT_EQ(Total(model, "requests"), 0);
}

// Stateful Responses API: each request sends only its new input and the id of the response it
// continues; the gateway remembers which conversation made each response, so the chain stays on
// one replica (with one vLLM server per GPU, the only one that stored those responses).
TEST_F(GatewayTest, ResponsesContinuingAStoredResponseFollowItsConversation) {
  ASSERT_NO_FATAL_FAILURE(StartSims(4));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::string previous, home;
  for (int t = 0; t < 4; ++t) {
    json::object body{{"model", "m"},
                      {"input", Words("chain" + std::to_string(t), t == 0 ? 200 : 20)},
                      {"max_output_tokens", 4},
                      {"stream", t % 2 == 0}};
    if (t > 0) body["previous_response_id"] = previous;
    const HttpResult r = HttpPost(port_, "/v1/responses", json::serialize(body));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-route"), t == 0 ? "new" : "sticky");
    if (t == 0) home = r.header("x-warden-replica");
    EXPECT_EQ(r.header("x-warden-replica"), home);
    if (t % 2 == 1) {
      previous = json::parse(r.body).at("id").as_string();
    } else {
      for (const SseEvent& e : ParseSse(r.body)) {
        if (e.event == "response.created")
          previous = json::parse(e.data).at("response").at("id").as_string();
      }
    }
    ASSERT_FALSE(previous.empty());
  }
  EXPECT_EQ(Admin(port_).at("key_sources").at("previous-response").as_int64(), 3);
  // Reading the stored response goes where it was made, and finds it there.
  const auto counted = [&] {
    const json::object admin = Admin(port_);
    const json::object& replica = admin.at("replicas").as_array().at(std::stoi(home)).as_object();
    return std::vector<int64_t>{admin.at("follow_up_turns").as_int64(),
                                replica.at("computed_prompt_tokens").as_int64(),
                                replica.at("cached_prompt_tokens").as_int64()};
  };
  const std::vector<int64_t> before_reads = counted();
  const HttpResult read = HttpGet(port_, "/v1/responses/" + previous);
  EXPECT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(read.header("x-warden-replica"), home);
  // Counted as balanced (below), and said so: it follows the conversation but is no turn of it.
  EXPECT_EQ(read.header("x-warden-route"), "balanced");
  // The stored response carries its turn's usage, counted when it ran: a read is no turn and
  // reads no prompt (found by review: each read added the prompt's tokens again).
  EXPECT_NE(read.body.find(R"("usage")"), std::string::npos) << read.body;
  ASSERT_EQ(HttpGet(port_, "/v1/responses/" + previous).status, 200);
  EXPECT_EQ(counted(), before_reads);
  // Nor a sticky turn in the counts (found by review): placed where it must be, counted balanced.
  const json::object after_reads = Admin(port_);
  const json::object& at_home =
      after_reads.at("replicas").as_array().at(std::stoi(home)).as_object();
  EXPECT_EQ(at_home.at("sticky").as_int64(), 3);
  EXPECT_EQ(at_home.at("balanced").as_int64(), 2);

  // Its replica drained: what continues a response stored there still goes there, keyed by its
  // response or otherwise (a `user` field); a new conversation does not.
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": )" + home + R"(, "draining": true}]})")
                .status,
            200);
  for (bool keyed : {false, true}) {
    json::object body{{"model", "m"},
                      {"input", Words(keyed ? "keyed" : "plain", 20)},
                      {"max_output_tokens", 4},
                      {"previous_response_id", previous}};
    if (keyed) body["user"] = "someone";
    const HttpResult r = HttpPost(port_, "/v1/responses", json::serialize(body));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), home) << keyed;
    if (!keyed) previous = json::parse(r.body).at("id").as_string();
  }
  EXPECT_EQ(HttpGet(port_, "/v1/responses/" + previous).header("x-warden-replica"), home);
  const HttpResult fresh =
      HttpPost(port_, "/v1/responses",
               json::serialize(json::object{
                   {"model", "m"}, {"input", Words("fresh", 200)}, {"max_output_tokens", 4}}));
  EXPECT_NE(fresh.header("x-warden-replica"), home);
}

// With one server per replica, only the one that stored a response has it: a request about it
// goes there though that replica is past the overflow limit, or its conversation has moved since
// (re-homed off it while it drains).
TEST_F(GatewayTest, ARequestAboutAStoredResponseGoesWhereItIsStored) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "5"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--overflow-limit", "2"}));
  const auto respond = [&](const std::string& words, const std::string& previous) {
    json::object body{{"model", "m"}, {"input", Words(words, 30)}, {"max_output_tokens", 4}};
    if (!previous.empty()) body["previous_response_id"] = previous;
    return HttpPost(port_, "/v1/responses", json::serialize(body), {{"session-id", "S1"}});
  };
  const HttpResult first = respond("first", "");
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string stored = first.header("x-warden-replica");
  const std::string id(json::parse(first.body).at("id").as_string());

  // Two long turns of the conversation at its home: at the overflow limit of 2.
  BackgroundStream a(port_, "S1", 600, Words("a", 20)), b(port_, "S1", 600, Words("b", 20));
  ASSERT_TRUE(Eventually([&] {
    return a.started() && b.started() &&
           Admin(port_).at("replicas").at(std::stoi(stored)).at("in_flight").as_int64() == 2;
  }));
  const HttpResult busy_read = HttpGet(port_, "/v1/responses/" + id);
  EXPECT_EQ(busy_read.status, 200) << busy_read.body;  // found: the replica that has it
  EXPECT_EQ(busy_read.header("x-warden-replica"), stored);
  EXPECT_EQ(busy_read.header("x-warden-route"), "balanced");  // no turn: it generates nothing
  const HttpResult busy_turn = respond("busy", id);
  EXPECT_EQ(busy_turn.status, 200) << busy_turn.body;
  EXPECT_EQ(busy_turn.header("x-warden-replica"), stored);
  EXPECT_EQ(a.Finish().status, 200);
  EXPECT_EQ(b.Finish().status, 200);

  // Drained: the conversation moves, what is stored there does not.
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": )" + stored + R"(, "draining": true}]})")
                .status,
            200);
  const HttpResult moved = respond("moved", "");
  EXPECT_EQ(moved.header("x-warden-route"), "rehome");
  ASSERT_NE(moved.header("x-warden-replica"), stored);
  const HttpResult drained_read = HttpGet(port_, "/v1/responses/" + id);
  EXPECT_EQ(drained_read.status, 200) << drained_read.body;
  EXPECT_EQ(drained_read.header("x-warden-replica"), stored);
  const HttpResult branch = respond("branch", id);
  EXPECT_EQ(branch.status, 200) << branch.body;
  EXPECT_EQ(branch.header("x-warden-replica"), stored);
  // The response made by that continuation is stored there too.
  const std::string branch_id(json::parse(branch.body).at("id").as_string());
  EXPECT_EQ(HttpGet(port_, "/v1/responses/" + branch_id).header("x-warden-replica"), stored);
  EXPECT_EQ(respond("later", "").header("x-warden-replica"), moved.header("x-warden-replica"));
}

// A response stored where the gateway does not know (made at a server directly, or before a
// restart without a state file): each server is asked in turn until one has it; one that none has
// gets the last server's 404, and no server counts the requests that went on.
TEST_F(GatewayTest, AResponseStoredWhereTheGatewayDoesNotKnowIsSoughtOnEachServer) {
  ASSERT_NO_FATAL_FAILURE(StartSims(3));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::vector<std::string> ids;  // one stored on each server, made there directly
  for (uint16_t sim : sim_ports_) {
    const HttpResult made =
        HttpPost(sim, "/v1/responses",
                 json::serialize(json::object{
                     {"model", "m"}, {"input", Words("direct", 30)}, {"max_output_tokens", 4}}));
    ASSERT_EQ(made.status, 200) << made.body;
    ids.emplace_back(json::parse(made.body).at("id").as_string());
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const HttpResult read = HttpGet(port_, "/v1/responses/" + ids[i]);
    EXPECT_EQ(read.status, 200) << read.body;
    EXPECT_EQ(read.header("x-warden-replica"), std::to_string(i));
    for (bool stream : {false, true}) {
      const HttpResult next =
          HttpPost(port_, "/v1/responses",
                   json::serialize(json::object{{"model", "m"},
                                                {"input", Words("next", 20)},
                                                {"max_output_tokens", 4},
                                                {"stream", stream},
                                                {"previous_response_id", ids[i]}}));
      EXPECT_EQ(next.status, 200) << next.body;
      EXPECT_EQ(next.header("x-warden-replica"), std::to_string(i)) << stream;
      if (stream) continue;
      // The response made there is known: its continuation goes straight to it, as a turn of the
      // conversation it opened.
      const HttpResult after =
          HttpPost(port_, "/v1/responses",
                   json::serialize(json::object{
                       {"model", "m"},
                       {"input", Words("after", 20)},
                       {"max_output_tokens", 4},
                       {"previous_response_id", json::parse(next.body).at("id").as_string()}}));
      EXPECT_EQ(after.status, 200) << after.body;
      EXPECT_EQ(after.header("x-warden-replica"), std::to_string(i));
      EXPECT_EQ(after.header("x-warden-route"), "sticky");
    }
  }
  const HttpResult nowhere =
      HttpPost(port_, "/v1/responses",
               json::serialize(json::object{{"model", "m"},
                                            {"input", Words("lost", 20)},
                                            {"max_output_tokens", 4},
                                            {"previous_response_id", "resp_nowhere"}}));
  EXPECT_EQ(nowhere.status, 404);
  EXPECT_NE(nowhere.body.find("resp_nowhere"), std::string::npos) << nowhere.body;
  EXPECT_EQ(HttpGet(port_, "/v1/responses/resp_nowhere").status, 404);
  // A known conversation's request sought on every server keeps its home.
  const auto keyed = [&](const std::string& previous) {
    json::object body{
        {"model", "m"}, {"input", Words("keyed", 20)}, {"max_output_tokens", 4}, {"user", "u1"}};
    if (!previous.empty()) body["previous_response_id"] = previous;
    return HttpPost(port_, "/v1/responses", json::serialize(body));
  };
  const std::string home = keyed("").header("x-warden-replica");
  EXPECT_EQ(keyed("resp_nowhere").status, 404);
  const HttpResult back = keyed("");
  EXPECT_EQ(back.header("x-warden-replica"), home);
  EXPECT_EQ(back.header("x-warden-route"), "sticky");
  // Counted once each, where answered: 3 reads and 9 continuations found, 3 requests not, and 2
  // turns.
  const json::object admin = Admin(port_);
  EXPECT_EQ(Total(admin, "requests"), 17);
  EXPECT_EQ(Total(admin, "in_flight"), 0);

  // A drained server still holds what it stored: asked after those in service.
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 1, "draining": true}]})")
                .status,
            200);
  const HttpResult read = HttpGet(port_, "/v1/responses/" + ids[1]);
  EXPECT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(read.header("x-warden-replica"), "1");
  const HttpResult next = HttpPost(port_, "/v1/responses",
                                   json::serialize(json::object{{"model", "m"},
                                                                {"input", Words("drained", 20)},
                                                                {"max_output_tokens", 4},
                                                                {"previous_response_id", ids[1]}}));
  EXPECT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(next.header("x-warden-replica"), "1");
  EXPECT_EQ(HttpGet(port_, "/v1/responses/resp_nowhere").status, 404);
}

// Sought on each server, a response is sought on past a server that refuses the request (503) as
// past one that does not have it (404): in whatever order they are asked, the one that has it
// answers (found by review: a 503 after a 404 ended the search).
TEST_F(GatewayTest, AResponseIsSoughtPastAServerThatRefuses) {
  FakeReplica lacks([](const std::string&) {
    const std::string body =
        R"({"error":{"message":"Response with id 'resp_x' not found.","type":"NotFoundError","code":404}})";
    return FakeAnswer{
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body};
  });
  FakeReplica refuses([](const std::string&) {
    return FakeAnswer{"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"};
  });
  FakeReplica has([](const std::string&) { return FakeAnswer{JsonResponse(R"({"id":"r2"})")}; });
  upstream_args_ = {"--url", lacks.url(), "--url", refuses.url(), "--url", has.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (int i = 0; i < 6; ++i) {  // new requests' first places rotate
    const HttpResult r =
        HttpPost(port_, "/v1/responses",
                 json::serialize(json::object{{"model", "m"},
                                              {"input", Words("seek" + std::to_string(i), 10)},
                                              {"previous_response_id", "resp_x"}}));
    EXPECT_EQ(r.status, 200) << i << ": " << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), "2") << i;
  }
  // The one that has it drained: asked last, after a refusal as after a 404.
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 2, "draining": true}]})")
                .status,
            200);
  for (int i = 0; i < 4; ++i) {
    const HttpResult r =
        HttpPost(port_, "/v1/responses",
                 json::serialize(json::object{{"model", "m"},
                                              {"input", Words("drained" + std::to_string(i), 10)},
                                              {"previous_response_id", "resp_x"}}));
    EXPECT_EQ(r.status, 200) << i << ": " << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), "2") << i;
  }
}

// Claude Code sends a title or a quota probe under the session's id, on its small model and
// without the history: the gateway sends it home and keeps the conversation's context, whose
// next turn goes home and reads its history from the cache.
TEST_F(GatewayTest, ASideRequestUnderASessionsIdLeavesTheConversationAsItWas) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--access-log"}));
  const std::string history = Words("hist", 1500);
  // Claude Code's turns offer its tools (tens of KB); its side requests do not.
  const std::string tools = R"(,"tools":[{"name":"Bash","description":")" + Words("tool", 4000) +
                            R"(","input_schema":{"type":"object"}}])";
  const auto turn = [&](const std::string& model, const std::string& text, bool with_tools = true) {
    return HttpPost(port_, "/v1/messages?beta=true",
                    R"({"model":")" + model +
                        R"(","max_tokens":8,"messages":[{"role":"user","content":")" + text +
                        R"("}])" + (with_tools ? tools : "") + "}",
                    {{"X-Claude-Code-Session-Id", "with-titles"}});
  };
  const HttpResult first = turn("claude-sonnet-4-5", history);
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string home = first.header("x-warden-replica");
  const auto context_at_home = [&] {
    return Admin(port_).at("replicas").at(std::stoi(home)).at("active_context_tokens").as_int64();
  };
  const int64_t context = context_at_home();
  ASSERT_GT(context, 1500);
  const HttpResult title =
      turn("claude-haiku-4-5", "Write a title for this conversation", /*with_tools=*/false);
  ASSERT_EQ(title.status, 200) << title.body;
  EXPECT_EQ(title.header("x-warden-route"), "sticky");
  EXPECT_EQ(title.header("x-warden-replica"), home);
  std::smatch logged;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/messages\?beta=true 200 .* route=sticky side)"), &logged));
  EXPECT_EQ(context_at_home(), context);
  const HttpResult second = turn("claude-sonnet-4-5", history + " more");
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.header("x-warden-route"), "sticky");
  EXPECT_EQ(second.header("x-warden-replica"), home);
  EXPECT_GT(json::parse(second.body).at("usage").at("cache_read_input_tokens").as_int64(), 1400)
      << second.body;
  // Claude Code 2.1.3xx sends them on the conversation's own model (found by review: counted as
  // turns), told by the tools they do not offer.
  const int64_t after_second = context_at_home();
  const HttpResult topic =
      turn("claude-sonnet-4-5", "Is this a new topic? Answer in JSON", /*with_tools=*/false);
  ASSERT_EQ(topic.status, 200) << topic.body;
  EXPECT_EQ(topic.header("x-warden-replica"), home);
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/messages\?beta=true 200 .* route=sticky side)"), &logged));
  EXPECT_EQ(context_at_home(), after_second);
}

// A keyless conversation's first reply is hashed as it streams (its later turns are keyed by it),
// not held: a long one costs the gateway no more memory than a short one.
TEST_F(GatewayTest, AKeylessConversationsFirstReplyIsNotHeldWhole) {
  std::string events;
  const std::string piece(4000, 'w');
  for (int i = 0; i < 12000; ++i) {  // 48 MB of text
    events +=
        "event: content_block_delta\ndata: "
        R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":")" +
        piece + "\"}}\n\n";
  }
  events += "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  FakeReplica fake([&](const std::string& request) {
    FakeAnswer a;
    a.bytes = request.find("Write.") == std::string::npos
                  ? JsonResponse(R"({"ok":true})")
                  : "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                        std::to_string(events.size()) + "\r\n\r\n" + events;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--threads", "1"}));
  const auto peak_kib = [&] { return ProcStatusKib(gateway_->pid(), "VmHWM:"); };
  const std::string opening =
      R"({"model":"m","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"Write."}]})";
  ASSERT_EQ(HttpPost(port_, "/v1/messages", R"({"model":"m","max_tokens":1,"messages":[]})").status,
            200);
  const long before = peak_kib();
  const HttpResult r = HttpPost(port_, "/v1/messages", opening);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body.size(), events.size());
  EXPECT_EQ(Admin(port_).at("key_sources").at("opening").as_int64(), 1);
  EXPECT_LT(peak_kib() - before, 16 * 1024) << "KiB";
}

}  // namespace
}  // namespace warden::testing
