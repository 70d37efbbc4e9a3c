// `warden serve`: several gateways in front of the same replicas, sharing their conversations'
// homes.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

TEST_F(GatewayTest, PeerGatewaysKeepEachConversationOnOneReplica) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  const std::unique_ptr<ChildProcess> a = StartPeerGateway(a_port, b_port);
  const std::unique_ptr<ChildProcess> b = StartPeerGateway(b_port, a_port);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto received = [](uint16_t port, int64_t at_least) {
    return [=] {
      const HttpResult r = HttpGet(port, "/warden/v1/peers");
      return r.status == 200 && json::parse(r.body).at("homes_received").as_int64() >= at_least;
    };
  };

  // Half the conversations start on A, half on B; then every turn goes to the other gateway.
  constexpr int kSessions = 8;
  std::vector<Conversation> conversations;
  std::vector<int> homes;
  std::set<int> used;
  for (int s = 0; s < kSessions; ++s) {
    conversations.emplace_back("peer" + std::to_string(s), 80);
    const Turn first = conversations.back().Next(s % 2 ? b_port : a_port);
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.route, "new");
    homes.push_back(first.replica);
    used.insert(first.replica);
  }
  EXPECT_EQ(used.size(), 4u);
  ASSERT_TRUE(Eventually(received(a_port, kSessions / 2)));
  ASSERT_TRUE(Eventually(received(b_port, kSessions / 2)));
  // Each counts all eight as active on their homes, and the homes agree. (A conversation's home
  // and then its context are two pieces of news: half the count can be half the conversations.)
  for (uint16_t port : {a_port, b_port}) {
    EXPECT_TRUE(Eventually([&] {
      return Admin(port).at("working_set").at("active_conversations").as_int64() == kSessions;
    })) << port;
  }
  for (int round = 0; round < 2; ++round) {
    for (int s = 0; s < kSessions; ++s) {
      const Turn next = conversations[s].Next((s + round) % 2 ? a_port : b_port);
      ASSERT_EQ(next.status, 200) << next.body;
      EXPECT_EQ(next.replica, homes[s]) << "session " << s << " round " << round;
      EXPECT_EQ(next.route, "sticky");
    }
  }
  for (uint16_t port : {a_port, b_port}) {
    const auto peer_status = [&] {
      return json::parse(HttpGet(port, "/warden/v1/peers").body).as_object();
    };
    EXPECT_TRUE(Eventually([&] {
      return peer_status().at("peers").at(0).at("homes_sent").as_int64() >= kSessions / 2;
    }));
    const json::object status = peer_status();
    EXPECT_FALSE(status.at("peers").at(0).at("instance").as_string().empty());
    const std::string metrics = HttpGet(port, "/metrics").body;
    EXPECT_NE(metrics.find("warden_peer_homes_sent_total{peer=\"http://"), std::string::npos);
    EXPECT_TRUE(
        std::regex_search(metrics, std::regex("warden_peer_up\\{peer=\"http://[^\"]+\"\\} 1")))
        << metrics;
  }

  // Refused in the admin API's shape, nothing taken: other replicas, a replica that does not
  // exist, a time that is not a number, a key too long to be one this gateway makes, garbage.
  const std::string bad[] = {
      R"({"models":[{"name":"m","replicas":4,"homes":[[")" + std::string(300, 'k') +
          R"(",0,1.0]]}]})",
      R"({"models":[{"name":"m","replicas":3,"homes":[["x",0,1.0]]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[["x",4294967297,1.0]]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[["x",1,1e400]]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[["x",1]]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[["x",1,1.0,0]],"seen":["soon"]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[["x",1,1.0,0]],"seen":[]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[["x",1,1.0,0]],"turns":[[1.0,0,0]]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[["x",1,1.0,0]],"turns":[]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[["x",1,1.0,0]],"turns":[["a",0,0,0]]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[],"in_flight":[1,2]}]})",
      R"({"models":[{"name":"m","replicas":4,"homes":[]},{"name":"m","replicas":4,"homes":[]}]})",
      "{not json"};
  for (const std::string& body : bad) {
    const HttpResult r = HttpPost(b_port, "/warden/v1/peer/homes", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_TRUE(json::parse(r.body).as_object().contains("error")) << r.body;
  }
  EXPECT_EQ(Admin(b_port).at("working_set").at("active_conversations").as_int64(), kSessions);
  // What a starting peer asks for: every home known here.
  const json::value all = json::parse(HttpGet(b_port, "/warden/v1/peer/homes").body);
  EXPECT_EQ(all.at("models").at(0).at("homes").as_array().size(), static_cast<size_t>(kSessions));
  EXPECT_EQ(HttpCall(b_port, "DELETE", "/warden/v1/peer/homes").status, 405);

  // A home the peer last saw longer ago than the idle timeout (600 s) is known, not active.
  const double unix_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const int64_t known = Admin(b_port).at("sessions").at("known").as_int64();
  const HttpResult aged = HttpPost(b_port, "/warden/v1/peer/homes",
                                   R"({"models":[{"name":"m","replicas":4,"homes":[["aged",1,)" +
                                       std::to_string(unix_now - 900) + R"(,4000]],"seen":[)" +
                                       std::to_string(unix_now - 700) + "]}]}");
  ASSERT_EQ(aged.status, 200) << aged.body;
  EXPECT_EQ(Admin(b_port).at("sessions").at("known").as_int64(), known + 1);
  EXPECT_EQ(Admin(b_port).at("working_set").at("active_conversations").as_int64(), kSessions);
  // A context no model has is taken at most as 2^30 tokens, as the state file keeps it (larger,
  // the conversation was dropped at the next restart). (Read from the home itself: A's messages
  // may still change the other conversations' contexts.)
  const HttpResult huge = HttpPost(b_port, "/warden/v1/peer/homes",
                                   R"({"models":[{"name":"m","replicas":4,"homes":[["huge",1,)" +
                                       std::to_string(unix_now) + R"(,1099511627776]]}]})");
  ASSERT_EQ(huge.status, 200) << huge.body;
  int64_t huge_context = -1;
  const json::value listed = json::parse(HttpGet(b_port, "/warden/v1/peer/homes").body);
  for (const json::value& home : listed.at("models").at(0).at("homes").as_array()) {
    if (home.at(0) == "huge") huge_context = home.at(3).to_number<int64_t>();
  }
  EXPECT_EQ(huge_context, int64_t{1} << 30);
  // A later turn's smaller context is taken (a compacted conversation), with where that turn ran
  // and its prompt, and passed on as such.
  const std::string now_text = std::to_string(unix_now);
  const HttpResult compacted =
      HttpPost(b_port, "/warden/v1/peer/homes",
               R"({"models":[{"name":"m","replicas":4,"homes":[["huge",1,)" + now_text +
                   R"(,2000]],"turns":[[)" + now_text + R"(,3,1900,3]]}]})");
  ASSERT_EQ(compacted.status, 200) << compacted.body;
  const json::value relisted = json::parse(HttpGet(b_port, "/warden/v1/peer/homes").body);
  const json::array& listed_homes = relisted.at("models").at(0).at("homes").as_array();
  const json::array& turns = relisted.at("models").at(0).at("turns").as_array();
  ASSERT_EQ(listed_homes.size(), turns.size());
  bool found = false;
  for (size_t i = 0; i < listed_homes.size(); ++i) {
    if (listed_homes[i].at(0) != "huge") continue;
    found = true;
    EXPECT_EQ(listed_homes[i].at(3).to_number<int64_t>(), 2000);
    EXPECT_NEAR(turns[i].at(0).to_number<double>(), unix_now, 1.0);
    EXPECT_EQ(turns[i].at(1).to_number<int64_t>(), 3);
    EXPECT_EQ(turns[i].at(2).to_number<int64_t>(), 1900);
    EXPECT_EQ(turns[i].at(3).to_number<int64_t>(), 3);
  }
  EXPECT_TRUE(found);

  // Each counts the other's requests in flight: a peer posting 3 on replica 2 weighs there until
  // its messages stop.
  const HttpResult load = HttpPost(
      b_port, "/warden/v1/peer/homes",
      R"({"instance":"test-peer","models":[{"name":"m","replicas":4,"homes":[],"in_flight":[0,0,3,0]}]})");
  ASSERT_EQ(load.status, 200) << load.body;
  // (at least 3: A's own message may still count a turn it had in flight when it was built)
  EXPECT_GE(Admin(b_port).at("replicas").at(2).at("peer_in_flight").as_int64(), 3);
  ASSERT_TRUE(Eventually(
      [&] { return Admin(b_port).at("replicas").at(2).at("peer_in_flight").as_int64() == 0; }));
}

// One config shared by every gateway lists each as its own peer: it finds out from its first
// message's answer, sends itself no more, and never counts its own requests in flight twice.
TEST_F(GatewayTest, AGatewayListedAsItsOwnPeerLeavesItselfOut) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  const uint16_t port = FreePort();
  std::vector<std::string> args = {
      "serve", "--listen", "127.0.0.1:" + std::to_string(port),        "--model",
      "m",     "--peer",   "http://127.0.0.1:" + std::to_string(port), "--peer-sync-interval",
      "0.05"};
  args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
  std::vector<uint16_t> ports;
  const std::unique_ptr<ChildProcess> gateway = StartWarden(args, &ports);
  ASSERT_NE(gateway, nullptr);
  ASSERT_TRUE(Eventually([&] {
    const json::value peers = json::parse(HttpGet(port, "/warden/v1/peers").body);
    return peers.at("peers").at(0).at("self").as_bool();
  }));
  const json::value peers = json::parse(HttpGet(port, "/warden/v1/peers").body);
  EXPECT_EQ(peers.at("peers").at(0).at("last_error").as_string(), "");
  EXPECT_EQ(peers.at("peers").at(0).at("instance"), peers.at("instance"));
  EXPECT_EQ(peers.at("gateways").as_int64(), 1);  // not counted twice in the ranking
  EXPECT_EQ(peers.at("rank").as_int64(), 0);
  EXPECT_EQ(peers.at("homes_received").as_int64(), 0);
  EXPECT_EQ(Total(Admin(port), "peer_in_flight"), 0);
  // Nor is it a peer in /metrics (a dashboard counting peers would count it).
  const std::string metrics = HttpGet(port, "/metrics").body;
  EXPECT_EQ(metrics.find("warden_peer_homes_sent_total{"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("warden_peer_up{"), std::string::npos) << metrics;
}

// Peers name replicas by their place: two that list the same servers in another order would send
// a conversation to a different server on each side, so their messages are refused, and both logs
// say why.
TEST_F(GatewayTest, PeersListingTheSameReplicasInAnotherOrderAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  auto start = [&](uint16_t port, uint16_t peer, const std::vector<std::string>& urls) {
    return StartPeer(port, peer, urls);
  };
  const std::vector<std::string> reversed = {upstream_args_[2], upstream_args_[3],
                                             upstream_args_[0], upstream_args_[1]};
  const std::unique_ptr<ChildProcess> a = start(a_port, b_port, upstream_args_);
  const std::unique_ptr<ChildProcess> b = start(b_port, a_port, reversed);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto last_error = [](uint16_t port) {
    const json::value peers = json::parse(HttpGet(port, "/warden/v1/peers").body);
    return std::string(peers.at("peers").at(0).at("last_error").as_string());
  };
  ASSERT_TRUE(Eventually([&] {
    return last_error(a_port).find("the same replicas in another order") != std::string::npos;
  })) << last_error(a_port);
  // (B may have logged it before it listened: its first pull of A's homes meets the same, said
  // with A's name.)
  const std::regex refused(
      "(a peer's message refused: (instance \\S+: )?|its homes were not taken: )model m: the same "
      "replicas in another order");
  std::smatch match;
  const bool logged_early =
      std::any_of(b->lines().begin(), b->lines().end(),
                  [&](const std::string& l) { return std::regex_search(l, refused); });
  EXPECT_TRUE(logged_early || b->WaitForLine(refused, &match));
  EXPECT_EQ(json::parse(HttpGet(b_port, "/warden/v1/peers").body).at("homes_received").as_int64(),
            0);
}

// A gateway that lists a peer which does not list it back hears nothing from it: the peer says
// so in its log, once.
TEST_F(GatewayTest, AGatewayNotAmongThePeersThatSendsHomesIsNamedInTheLog) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const uint16_t a_port = FreePort(), b_port = FreePort(), d_port = FreePort();
  auto start = [&](uint16_t port, uint16_t peer) { return StartPeer(port, peer); };
  const std::unique_ptr<ChildProcess> a = start(a_port, b_port);
  const std::unique_ptr<ChildProcess> b = start(b_port, a_port);
  const std::unique_ptr<ChildProcess> d = start(d_port, a_port);  // A does not list D
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(d, nullptr);
  const std::string d_instance(
      json::parse(HttpGet(d_port, "/warden/v1/peers").body).at("instance").as_string());
  std::smatch match;
  ASSERT_TRUE(a->WaitForLine(std::regex("a gateway not among this one's peers, or listed but not "
                                        "answering \\(instance (\\S+)\\)"),
                             &match));
  EXPECT_EQ(match[1].str(), d_instance);
  // B, a peer A lists, is never taken for one.
  for (const std::string& line : a->lines()) {
    EXPECT_EQ(line.find("not among this one's peers") != std::string::npos &&
                  line.find(d_instance) == std::string::npos,
              false)
        << line;
  }
}

// A peer that takes the start-up pull's connection and never answers holds the start for the
// pull's budget (2 s): the log says which peer it was.
TEST_F(GatewayTest, APeerThatDoesNotAnswerTheStartUpPullIsNamed) {
  FakeReplica silent([](const std::string&) { return FakeAnswer{}; });  // holds every request
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--peer", silent.url()}));
  const std::string said = "peer " + silent.url() + ": no homes to start from (";
  EXPECT_TRUE(
      std::any_of(gateway_->lines().begin(), gateway_->lines().end(),
                  [&](const std::string& line) { return line.find(said) != std::string::npos; }));
}

// A peer that serves the model under another name shares nothing of it: the sender is told, and
// says so once.
TEST_F(GatewayTest, APeerThatServesNoModelOfThatNameIsNamed) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  auto start = [&](uint16_t port, uint16_t peer, const std::string& model) {
    return StartPeer(port, peer, {}, model);
  };
  const std::unique_ptr<ChildProcess> a = start(a_port, b_port, "m");
  const std::unique_ptr<ChildProcess> b = start(b_port, a_port, "m-typo");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::smatch match;
  EXPECT_TRUE(a->WaitForLine(std::regex(R"(peer \S+ serves no model named m: )"), &match));
  const json::value peers = json::parse(HttpGet(a_port, "/warden/v1/peers").body);
  EXPECT_EQ(peers.at("peers").at(0).at("models_not_served"), json::parse(R"(["m"])"));
}

// One peers list shared by both gateways (each listed in its own): each counts two gateways and
// takes its own place among them, so that they start their rotations apart.
TEST_F(GatewayTest, GatewaysSharingOnePeersListRankThemselvesApart) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  auto start = [&](uint16_t port) {
    std::vector<std::string> args = {"serve",   "--listen", "127.0.0.1:" + std::to_string(port),
                                     "--model", "m",        "--peer-sync-interval",
                                     "0.05"};
    for (uint16_t p : {a_port, b_port})
      args.insert(args.end(), {"--peer", "http://127.0.0.1:" + std::to_string(p)});
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  };
  const std::unique_ptr<ChildProcess> a = start(a_port);
  const std::unique_ptr<ChildProcess> b = start(b_port);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto peers = [](uint16_t port) {
    return json::parse(HttpGet(port, "/warden/v1/peers").body);
  };
  ASSERT_TRUE(Eventually([&] {
    return peers(a_port).at("gateways").as_int64() == 2 &&
           peers(b_port).at("gateways").as_int64() == 2;
  }));
  EXPECT_NE(peers(a_port).at("rank"), peers(b_port).at("rank"));
}

// A peer that restarts learns every home from the others before it places what it does not know,
// those it had placed itself too: the survivor wakes at the restarted peer's first message
// instead of waiting out its backoff.
TEST_F(GatewayTest, ARestartedPeerKnowsEveryHomeBeforeItsFirstRequest) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  auto start = [&](uint16_t port, uint16_t peer) {
    std::vector<std::string> args = {"serve", "--listen", "127.0.0.1:" + std::to_string(port)};
    const std::vector<std::string> rest = {"--model",
                                           "m",
                                           "--alias",
                                           "claude-*",
                                           "--peer",
                                           "http://127.0.0.1:" + std::to_string(peer),
                                           "--peer-sync-interval",
                                           "0.05"};
    args.insert(args.end(), rest.begin(), rest.end());
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  };
  const std::unique_ptr<ChildProcess> a = start(a_port, b_port);
  std::unique_ptr<ChildProcess> b = start(b_port, a_port);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto peers = [](uint16_t port) { return json::parse(HttpGet(port, "/warden/v1/peers").body); };

  constexpr int kSessions = 8;
  std::vector<Conversation> conversations;
  std::vector<int> homes;
  for (int s = 0; s < kSessions; ++s) {
    conversations.emplace_back("restart" + std::to_string(s), 80);
    for (int t = 0; t < 2; ++t) {
      const Turn turn = conversations.back().Next(s % 2 == 0 ? a_port : b_port);
      ASSERT_EQ(turn.status, 200) << turn.body;
      if (t == 0) homes.push_back(turn.replica);
    }
  }
  ASSERT_TRUE(Eventually([&] {  // each has heard of every conversation the other homed
    return Admin(b_port).at("working_set").at("active_conversations").as_int64() == kSessions &&
           Admin(a_port).at("working_set").at("active_conversations").as_int64() == kSessions;
  }));

  b.reset();  // B stops; A's sends to it fail and back off
  ASSERT_TRUE(Eventually(
      [&] { return peers(a_port).at("peers").at(0).at("failures_in_a_row").as_int64() >= 7; }));
  b = start(b_port, a_port);
  ASSERT_NE(b, nullptr);
  // B asked A for every home before it listened: its first request finds them all (A's backoff
  // was 5 s by then, and even A's wake-up would have left a moment with none).
  EXPECT_EQ(Admin(b_port).at("sessions").at("known").as_int64(), kSessions);
  for (int s = 0; s < kSessions; ++s) {
    const Turn turn = conversations[s].Next(b_port);
    ASSERT_EQ(turn.status, 200) << turn.body;
    EXPECT_EQ(turn.route, "sticky") << "conversation " << s;
    EXPECT_EQ(turn.replica, homes[s]) << "conversation " << s;
  }
}

// A gateway on `port` for model m at the replica `url`, with the gateway on `peer` as its peer.
std::unique_ptr<ChildProcess> StartPeeredGateway(uint16_t port, uint16_t peer,
                                                 const std::string& url,
                                                 const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "serve", "--listen", "127.0.0.1:" + std::to_string(port),       "--model", "m", "--url",
      url,     "--peer",   "http://127.0.0.1:" + std::to_string(peer)};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<uint16_t> ports;
  return StartWarden(args, &ports);
}

// Two gateways on `a_port` and `b_port`, each the other's peer, for model m at the replica `url`.
struct PeeredPair {
  std::unique_ptr<ChildProcess> a, b;
};

PeeredPair StartPeeredPair(uint16_t a_port, uint16_t b_port, const std::string& url,
                           const std::vector<std::string>& extra) {
  PeeredPair pair{StartPeeredGateway(a_port, b_port, url, extra), nullptr};
  if (pair.a) pair.b = StartPeeredGateway(b_port, a_port, url, extra);
  return pair;
}

// A replica that answers with a small JSON body, holding each request that mentions "hold" until
// `release` counts down.
std::function<FakeAnswer(const std::string&)> AnswerOkJsonHoldingUntil(std::latch& release) {
  return [&release](const std::string& request) {
    if (request.find("hold") != std::string::npos) release.wait();
    return AnswerOkJson(request);
  };
}

// A request's end reaches the peers at once, not with the next periodic message: until then they
// count it in flight at its replica, and a conversation's next turn through another gateway found
// its home busy (with overflow limit 1, it went elsewhere).
TEST_F(GatewayTest, PeersHearARequestEndedAtOnce) {
  std::latch release(1);
  FakeReplica fake(AnswerOkJsonHoldingUntil(release));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  const PeeredPair gateways =
      StartPeeredPair(a_port, b_port, fake.url(), {"--peer-sync-interval", "5"});
  ASSERT_NE(gateways.b, nullptr);
  const auto peer_in_flight = [&] {
    return Admin(b_port).at("replicas").at(0).at("peer_in_flight").as_int64();
  };
  // Each has reached the other (the first to start failed its first message, and waits before
  // the next: a nudge does not hurry a peer that is not answering).
  const auto linked = [](uint16_t port) {
    const json::value p = json::parse(HttpGet(port, "/warden/v1/peers").body).at("peers").at(0);
    return p.at("sends_ok").as_int64() > 0 && p.at("failures_in_a_row").as_int64() == 0;
  };
  ASSERT_TRUE(Eventually([&] { return linked(a_port) && linked(b_port); }));
  std::thread held([&] {
    EXPECT_EQ(HttpPost(a_port, "/v1/chat/completions", ScenarioRequest("hold"),
                       {{"X-Claude-Code-Session-Id", "busy"}})
                  .status,
              200);
  });
  EXPECT_TRUE(Eventually([&] { return peer_in_flight() == 1; }));  // sent with the new home
  release.count_down();
  held.join();
  // At once (a nudge goes at most ten times an interval: 0.5 s), not with the next periodic
  // message 5 s after the last.
  EXPECT_TRUE(Eventually([&] { return peer_in_flight() == 0; }, 2));
}

// A gateway that drains tells its peers the requests it finished on its way out (a last message):
// they counted them in flight until its counts went stale.
TEST_F(GatewayTest, ADrainingGatewayTellsItsPeersTheRequestsItFinished) {
  std::latch release(1);
  FakeReplica fake(AnswerOkJsonHoldingUntil(release));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  const PeeredPair gateways =
      StartPeeredPair(a_port, b_port, fake.url(), {"--peer-sync-interval", "5"});
  ASSERT_NE(gateways.b, nullptr);
  const auto peer_in_flight = [&] {
    return Admin(b_port).at("replicas").at(0).at("peer_in_flight").as_int64();
  };
  std::thread held([&] {
    EXPECT_EQ(HttpPost(a_port, "/v1/chat/completions", ScenarioRequest("hold"),
                       {{"X-Claude-Code-Session-Id", "busy"}})
                  .status,
              200);
  });
  ASSERT_TRUE(Eventually([&] { return peer_in_flight() == 1; }));
  ASSERT_EQ(::kill(gateways.a->pid(), SIGTERM), 0);
  release.count_down();
  held.join();
  EXPECT_EQ(gateways.a->Wait(std::chrono::seconds(10)), 0);
  // Not 25 s later, when A's counts go stale (five of its 5 s intervals).
  EXPECT_TRUE(Eventually([&] { return peer_in_flight() == 0; }, 2));
}

// Homes a gateway learned from a peer are no news for that peer: they are not sent back to it
// (they were, with the next message, doubling what a backlog cost both sides).
TEST_F(GatewayTest, HomesLearnedFromAPeerAreNotSentBackToIt) {
  FakeReplica fake(AnswerOkJson);
  const uint16_t a_port = FreePort(), b_port = FreePort();
  const PeeredPair gateways =
      StartPeeredPair(a_port, b_port, fake.url(), {"--peer-sync-interval", "0.1"});
  ASSERT_NE(gateways.b, nullptr);
  const auto peers = [](uint16_t port) {
    return json::parse(HttpGet(port, "/warden/v1/peers").body);
  };
  constexpr int kSessions = 20;
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_EQ(HttpPost(a_port, "/v1/chat/completions", ScenarioRequest("x"),
                       {{"X-Claude-Code-Session-Id", "on-a-" + std::to_string(i)}})
                  .status,
              200);
  }
  ASSERT_TRUE(
      Eventually([&] { return peers(b_port).at("homes_received").as_int64() >= kSessions; }));
  // Two more messages from B to A, at least one made after B learned every home (A's requests
  // have all ended: a home is sent again with its context when its request ends).
  const int64_t sent_ok = peers(b_port).at("peers").at(0).at("sends_ok").as_int64();
  ASSERT_TRUE(Eventually(
      [&] { return peers(b_port).at("peers").at(0).at("sends_ok").as_int64() >= sent_ok + 2; }));
  EXPECT_EQ(peers(b_port).at("peers").at(0).at("homes_sent").as_int64(), 0);
  EXPECT_EQ(peers(a_port).at("homes_received").as_int64(), 0);
  // (A sends a home again when its request ends: it then has a context.)
  EXPECT_GE(peers(a_port).at("peers").at(0).at("homes_sent").as_int64(), kSessions);

  // Nor are the homes a restarted gateway takes from its peer at start: it knows whose they are
  // before the peer answers its first message (it sent them all back).
  ASSERT_EQ(gateways.b->Stop(), 0);
  const std::unique_ptr<ChildProcess> b =
      StartPeeredGateway(b_port, a_port, fake.url(), {"--peer-sync-interval", "0.1"});
  ASSERT_NE(b, nullptr);
  const std::regex pulled("peer .*: 20 homes taken from it at start");
  std::smatch match;
  ASSERT_TRUE(std::any_of(b->lines().begin(), b->lines().end(),
                          [&](const std::string& l) { return std::regex_search(l, pulled); }) ||
              b->WaitForLine(pulled, &match));
  ASSERT_TRUE(
      Eventually([&] { return peers(b_port).at("peers").at(0).at("sends_ok").as_int64() >= 2; }));
  EXPECT_EQ(peers(b_port).at("peers").at(0).at("homes_sent").as_int64(), 0);
}

// A gateway that starts while its peer does not answer (hung, here) asks it for every home again
// once it answers a message: the peer's idle conversations, which no message carries, keep their
// homes (before, their next turns through the new gateway were placed afresh).
TEST_F(GatewayTest, AGatewayWhosePeerDidNotAnswerAtStartTakesItsIdleHomesLater) {
  FakeReplica fake(AnswerOkJson);
  const uint16_t a_port = FreePort(), b_port = FreePort();
  const std::string config_path = ::testing::TempDir() + "/warden-short-idle.yaml";
  {
    std::ofstream f(config_path);
    f << "session: {idle_timeout_s: 0.2}\n";
  }
  const std::vector<std::string> extra = {"--config", config_path, "--peer-sync-interval", "0.1"};
  const std::unique_ptr<ChildProcess> a = StartPeeredGateway(a_port, b_port, fake.url(), extra);
  ASSERT_NE(a, nullptr);
  constexpr int kSessions = 3;
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_EQ(HttpPost(a_port, "/v1/chat/completions", ScenarioRequest("x"),
                       {{"X-Claude-Code-Session-Id", "idle-" + std::to_string(i)}})
                  .status,
              200);
  }
  const auto sessions = [](uint16_t port) { return Admin(port).at("sessions").as_object(); };
  ASSERT_TRUE(Eventually([&] { return sessions(a_port).at("active").as_int64() == 0; }));
  ASSERT_EQ(sessions(a_port).at("known").as_int64(), kSessions);
  ASSERT_EQ(::kill(a->pid(), SIGSTOP), 0);  // B's start-up request gets no answer
  const std::unique_ptr<ChildProcess> b = StartPeeredGateway(b_port, a_port, fake.url(), extra);
  ::kill(a->pid(), SIGCONT);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(std::count_if(b->lines().begin(), b->lines().end(),
                          [](const std::string& l) {
                            return l.find("no homes to start from") != std::string::npos;
                          }),
            1);
  const std::regex later("peer .*: 3 homes taken from it after its first answer");
  std::smatch match;
  ASSERT_TRUE(b->WaitForLine(later, &match));
  EXPECT_EQ(sessions(b_port).at("known").as_int64(), kSessions);
  const HttpResult turn = HttpPost(b_port, "/v1/chat/completions", ScenarioRequest("x"),
                                   {{"X-Claude-Code-Session-Id", "idle-1"}});
  EXPECT_EQ(turn.status, 200);
  EXPECT_EQ(turn.header("x-warden-route"), "sticky");
}

// A peer whose body limit is under a message's size (a backlog of conversations with long keys)
// refuses it with a 413: the sender halves its slices until they pass, instead of sending the
// same refused message for ever (and the peer never hearing of a new conversation again).
TEST_F(GatewayTest, MessagesOverAPeersBodyLimitAreSentInSmallerSlices) {
  FakeReplica fake(AnswerOkJson);
  const uint16_t a_port = FreePort(), b_port = FreePort();
  const std::unique_ptr<ChildProcess> a =
      StartPeeredGateway(a_port, b_port, fake.url(), {"--peer-sync-interval", "0.1"});
  ASSERT_NE(a, nullptr);
  // 300 conversations with 200-byte keys while B is down: about 75 KB of homes.
  for (int i = 0; i < 300; ++i) {
    const std::string key = std::to_string(i) + std::string(200, 'k');
    ASSERT_EQ(HttpPost(a_port, "/v1/chat/completions", ScenarioRequest("x"),
                       {{"X-Claude-Code-Session-Id", key}})
                  .status,
              200);
  }
  const std::unique_ptr<ChildProcess> b = StartPeeredGateway(
      b_port, a_port, fake.url(), {"--peer-sync-interval", "0.1", "--body-limit-mb", "0.03"});
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(HttpPost(a_port, "/v1/chat/completions", ScenarioRequest("x"),
                     {{"X-Claude-Code-Session-Id", "fresh"}})
                .status,
            200);
  // B learns the conversation started on A after it came up.
  EXPECT_TRUE(Eventually([&] {
    return HttpGet(b_port, "/warden/v1/peer/homes").body.find(R"("fresh")") != std::string::npos;
  }));
  std::smatch match;
  EXPECT_TRUE(a->WaitForLine(std::regex("over its body limit: now at most"), &match));
  // Its messages did not reach B before B started, and it says when one did.
  EXPECT_TRUE(
      a->WaitForLine(std::regex(R"(peer http://127.0.0.1:\d+: answering again, after )"), &match));
}

// A replica drained on one gateway is drained on its peers, and taken back on another, is taken
// back everywhere (the most recent change wins); a gateway that starts learns it by pulling from
// its peers (here no gateway sends it anything: it is nobody's peer).
TEST_F(GatewayTest, PeersDrainAReplicaTogether) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const uint16_t a_port = FreePort(), b_port = FreePort(), c_port = FreePort();
  auto start = [&](uint16_t port, std::vector<uint16_t> peers) {
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--model",
                                     "m",
                                     "--alias",
                                     "claude-*",
                                     "--peer-sync-interval",
                                     "0.05"};
    for (uint16_t peer : peers) {
      args.push_back("--peer");
      args.push_back("http://127.0.0.1:" + std::to_string(peer));
    }
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  };
  const std::unique_ptr<ChildProcess> a = start(a_port, {b_port});
  const std::unique_ptr<ChildProcess> b = start(b_port, {a_port});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const auto draining = [](uint16_t port, int replica) {
    return Admin(port).at("replicas").at(replica).at("draining").as_bool();
  };
  ASSERT_EQ(HttpCall(a_port, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 1, "draining": true}]})")
                .status,
            200);
  ASSERT_TRUE(Eventually([&] { return draining(b_port, 1); }));
  EXPECT_FALSE(draining(b_port, 0));
  EXPECT_TRUE(draining(a_port, 1));  // not undone by the peer's older state

  const std::unique_ptr<ChildProcess> c = start(c_port, {a_port, b_port});
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(draining(c_port, 1));  // pulled from its peers before it listened
  for (const char* id : {"p1", "p2", "p3"})
    EXPECT_EQ(Conversation(id, 50).Next(c_port).replica, 0) << id;

  ASSERT_EQ(HttpCall(b_port, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 1, "draining": false}]})")
                .status,
            200);
  ASSERT_TRUE(Eventually([&] { return !draining(a_port, 1); }));
  EXPECT_FALSE(draining(b_port, 1));

  // Two operators at once, each draining another replica through another gateway: each flag has
  // its own time, so both drains hold (with one time per model, the later message undid the
  // other drain). The peer's message is sent by hand here, as if it crossed A's own.
  ASSERT_EQ(HttpCall(a_port, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": true}]})")
                .status,
            200);
  const double unix_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string crossing =
      R"({"instance":"operator-b","models":[{"name":"m","replicas":2,"homes":[],)"
      R"("draining":[false,true],"drain_changed_at":)" +
      std::to_string(unix_now + 5) + R"(,"drain_changed_at_each":[0,)" +
      std::to_string(unix_now + 5) + "]}]}";
  const HttpResult taken = HttpPost(a_port, "/warden/v1/peer/homes", crossing);
  ASSERT_EQ(taken.status, 200) << taken.body;
  EXPECT_TRUE(draining(a_port, 0)) << "the drain made here stays";
  EXPECT_TRUE(draining(a_port, 1)) << "the peer's drain is taken";
}

// Affinity, the overflow limit and the policy set through one gateway's admin API hold on its
// peers (the most recent change wins), and one set back is set back everywhere; a change by a
// gateway's own config file (SIGHUP) is not sent, and a peer's older PATCH does not undo it.
TEST_F(GatewayTest, PeersTakeTheSettingsAPatchChanged) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  const std::string model = "models:\n  - name: m\n    url: http://127.0.0.1:9\n";
  const std::string b_config = TempFile("b.yaml", model);
  const std::unique_ptr<ChildProcess> a = StartPeerGateway(a_port, b_port, {});
  const std::unique_ptr<ChildProcess> b = StartPeerGateway(b_port, a_port, {"--config", b_config});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(HttpCall(a_port, "PATCH", "/warden/v1/models/m",
                     R"({"affinity": false, "overflow_limit": 3, "policy": "llm-d"})")
                .status,
            200);
  ASSERT_TRUE(Eventually([&] { return Admin(b_port).at("policy").as_string() == "llm-d"; }));
  json::object admin = Admin(b_port);
  EXPECT_FALSE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 3);
  EXPECT_EQ(admin.at("patched").as_object().size(), 3u);  // as a PATCH there: kept on restart
  std::smatch match;
  EXPECT_TRUE(
      b->WaitForLine(std::regex("model m: affinity off, as a peer's operator said"), &match));
  EXPECT_EQ(Admin(a_port).at("policy").as_string(), "llm-d");  // not undone by B's older state

  // Set back on B: set back on A.
  ASSERT_EQ(
      HttpCall(b_port, "PATCH", "/warden/v1/models/m", R"({"overflow_limit": "auto"})").status,
      200);
  ASSERT_TRUE(Eventually([&] { return Admin(a_port).at("overflow_limit_auto").as_bool(); }));
  EXPECT_EQ(Admin(a_port).at("overflow_limit").as_int64(), 256 / 4);  // max_num_seqs' default

  // B's own file sets the affinity on SIGHUP: B's, not sent to A, and A's older PATCH, which A
  // still sends, does not undo it.
  std::ofstream(b_config, std::ios::trunc) << model << "    affinity: off\n";
  ASSERT_EQ(::kill(b->pid(), SIGHUP), 0);
  ASSERT_TRUE(b->WaitForLine(std::regex("SIGHUP: model m: affinity off"), &match));
  std::ofstream(b_config, std::ios::trunc) << model << "    affinity: on\n";
  ASSERT_EQ(::kill(b->pid(), SIGHUP), 0);
  ASSERT_TRUE(b->WaitForLine(std::regex("SIGHUP: model m: affinity on"), &match));
  // A sends its affinity (off) with every message: after three B took, B still has its file's.
  const auto sends_ok = [&] {
    return json::parse(HttpGet(a_port, "/warden/v1/peers").body)
        .at("peers")
        .at(0)
        .at("sends_ok")
        .as_int64();
  };
  const int64_t before = sends_ok();
  ASSERT_TRUE(Eventually([&] { return sends_ok() >= before + 3; }));
  EXPECT_TRUE(Admin(b_port).at("affinity").as_bool());
  EXPECT_FALSE(Admin(a_port).at("affinity").as_bool());
}

// A PATCH kept in the state file keeps its time: a peer that starts after the restart learns it.
TEST_F(GatewayTest, APatchKeptAcrossARestartStillReachesThePeers) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  const std::string state = ::testing::TempDir() + "/warden-patched-peer-state.json";
  std::filesystem::remove(state);
  std::unique_ptr<ChildProcess> a = StartPeerGateway(a_port, b_port, {"--state-file", state});
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(HttpCall(a_port, "PATCH", "/warden/v1/models/m", R"({"policy": "llm-d"})").status, 200);
  ASSERT_EQ(a->Stop(), 0);
  a = StartPeerGateway(a_port, b_port, {"--state-file", state});
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(Admin(a_port).at("policy").as_string(), "llm-d");
  const std::unique_ptr<ChildProcess> b = StartPeerGateway(b_port, a_port, {});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Admin(b_port).at("policy").as_string(), "llm-d");  // pulled before it listened
  std::filesystem::remove(state);
}

// Peer gateways share the LoRA adapters loaded and unloaded through each (the most recent wins):
// any of them keeps them on every server, the one that loaded them gone or not.
TEST_F(GatewayTest, PeersShareTheLoraAdaptersLoadedThroughThem) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  std::unique_ptr<ChildProcess> a = StartPeerGateway(a_port, b_port);
  gateway_ = StartPeerGateway(b_port, a_port);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(gateway_, nullptr);
  port_ = b_port;
  const auto kept_by = [](uint16_t port) {
    const json::object admin = Admin(port);  // (not a temporary's member in a range-for)
    for (const json::value& adapter : admin.at("lora_adapters").as_array())
      if (adapter.at("name") == "sql") return adapter.at("loaded_through_gateway").as_bool();
    return false;
  };
  const std::string load = R"({"lora_name":"sql","lora_path":"/adapters/sql"})";
  ASSERT_EQ(HttpPost(a_port, "/v1/load_lora_adapter", load).status, 200);
  EXPECT_TRUE(Eventually([&] { return kept_by(b_port); }));
  ASSERT_EQ(HttpPost(b_port, "/v1/unload_lora_adapter", R"({"lora_name":"sql"})").status, 200);
  EXPECT_TRUE(Eventually([&] { return !kept_by(a_port); }));
  ASSERT_EQ(HttpPost(b_port, "/v1/load_lora_adapter", load).status, 200);
  EXPECT_TRUE(Eventually([&] { return kept_by(a_port); }));
  // The gateway that loaded it last is not the only one to keep it.
  ASSERT_EQ(HttpPost(a_port, "/v1/unload_lora_adapter", R"({"lora_name":"sql"})").status, 200);
  ASSERT_EQ(HttpPost(a_port, "/v1/load_lora_adapter", load).status, 200);
  // B has taken A's last load (its second from A; the first was A's first load) before A stops.
  std::smatch match;
  const std::regex from_peer("LoRA adapter 'sql' loaded \\(kept on every server\\) through a peer");
  ASSERT_TRUE(gateway_->WaitForLine(from_peer, &match));
  ASSERT_TRUE(gateway_->WaitForLine(from_peer, &match));
  ASSERT_EQ(a->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(RestartSimWithLoraUpdating(1));
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("lacks LoRA adapter 'sql'.*loaded it"), &match));
  EXPECT_NE(HttpGet(sim_ports_[1], "/v1/models").body.find(R"("id":"sql")"), std::string::npos);
}

// With several gateways, a continuation may reach another gateway than the one its response was
// made through: the peers share which conversation made each response, with the homes.
TEST_F(GatewayTest, PeersShareWhichConversationMadeEachResponse) {
  ASSERT_NO_FATAL_FAILURE(StartSims(4));
  const uint16_t a_port = FreePort(), b_port = FreePort();
  auto start = [&](uint16_t port, uint16_t peer) { return StartPeer(port, peer); };
  const std::unique_ptr<ChildProcess> a = start(a_port, b_port);
  const std::unique_ptr<ChildProcess> b = start(b_port, a_port);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::string previous, home;
  for (int t = 0; t < 4; ++t) {
    const uint16_t port = t % 2 == 0 ? a_port : b_port;
    if (t > 0) {  // the other gateway has heard of the response by now
      ASSERT_TRUE(Eventually([&] {
        return HttpGet(port, "/warden/v1/peer/homes").body.find(previous) != std::string::npos;
      }));
    }
    json::object body{{"model", "m"},
                      {"input", Words("peer-chain" + std::to_string(t), t == 0 ? 200 : 20)},
                      {"max_output_tokens", 4}};
    if (t > 0) body["previous_response_id"] = previous;
    const HttpResult r = HttpPost(port, "/v1/responses", json::serialize(body));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-route"), t == 0 ? "new" : "sticky") << "turn " << t;
    if (t == 0) home = r.header("x-warden-replica");
    EXPECT_EQ(r.header("x-warden-replica"), home) << "turn " << t;
    previous = json::parse(r.body).at("id").as_string();
  }
  ASSERT_TRUE(Eventually([&] {  // the last was made through B
    return HttpGet(a_port, "/warden/v1/peer/homes").body.find(previous) != std::string::npos;
  }));
  const HttpResult read = HttpGet(a_port, "/v1/responses/" + previous);
  EXPECT_EQ(read.header("x-warden-replica"), home);
  EXPECT_EQ(read.status, 200);
  // A knows the replica that stored it too (B's message said it beside the response), not only its
  // conversation: what A tells its own peers, and its state file, say it again.
  const json::value told = json::parse(HttpGet(a_port, "/warden/v1/peer/homes").body);
  const json::object& model = told.at("models").at(0).as_object();
  const json::array& responses = model.at("responses").as_array();
  const auto at = std::find_if(responses.begin(), responses.end(), [&](const json::value& r) {
    return r.at(0).as_string() == previous;
  });
  ASSERT_NE(at, responses.end());
  EXPECT_EQ(model.at("response_replicas").at(at - responses.begin()).as_int64(), std::stoi(home));
}

}  // namespace
}  // namespace warden::testing
