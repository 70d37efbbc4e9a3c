// `warden serve`: admission at the gateway: requests held while a replica's KV cache is committed,
// reservations.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// Sends a POST and closes the connection without reading the answer: a client that gives up.
void PostAndHangUp(uint16_t port, const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  close(fd);
}

// Admission at the gateway: the tiny profile's 1 K-token cache holds one such request with room for
// its reply, so the others wait at the gateway (not in the engine), are let in one at a time and
// all complete; a client that leaves while held is dropped from the queue.
TEST_F(GatewayTest, AdmissionHoldsRequestsAtTheGatewayWhileTheCacheIsCommitted) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("fifo"));
  EXPECT_EQ(Admin(port_).at("admission").as_string(), "fifo");

  constexpr int kRequests = 4;
  std::vector<int> status(kRequests, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      status[i] =
          HttpPost(port_, "/v1/chat/completions", ChatBody("a" + std::to_string(i), 150, 60))
              .status;
    });
  }
  EXPECT_TRUE(Eventually([&] { return Total(Admin(port_), "held") >= 1; }));
  PostAndHangUp(port_, ChatBody("gone", 150, 60));
  for (auto& c : clients) c.join();
  EXPECT_EQ(status, std::vector<int>(kRequests, 200));
  // The request whose client left was dropped: nothing is held or in flight, and it never ran.
  EXPECT_TRUE(Eventually([&] {
    const json::object m = Admin(port_);
    return Total(m, "held") == 0 && Total(m, "in_flight") == 0;
  }));
  EXPECT_EQ(SimMetric(sim_ports_[0], "vllm:request_success_total"), kRequests);
}

// No request is held longer than admission_max_hold_s: past it, it goes to its replica (which
// queues it, or runs it here), and its client gets the answer's head from there (with keepalives,
// were its first event late), rather than giving up on a head that does not come (Claude Code
// after about 300 s) and sending the request again, to the back of the queue.
TEST_F(GatewayTest, ARequestHeldForTheLongestHoldGoesToItsReplica) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("fifo", {"--admission-max-hold", "1"}));
  const json::object long_turn{
      {"model", "m"},
      {"max_tokens", 400},
      {"ignore_eos", true},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("long", 150)}}}}};
  auto running = std::async(std::launch::async, [&] {
    return HttpPost(port_, "/v1/chat/completions", json::serialize(long_turn));
  });
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 1; }));
  json::object stream_turn = json::parse(ChatBody("held", 150, 60)).as_object();
  stream_turn["stream"] = true;
  RawConnection held(port_);
  held.Send(ChatRequestBytes(json::serialize(stream_turn)));
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 1; }));
  const std::string head = held.ReadUntil("\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  // Let in while the room it waited for is still taken.
  EXPECT_EQ(running.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  const json::object admin = Admin(port_);
  EXPECT_EQ(Total(admin, "held"), 0);
  EXPECT_EQ(Total(admin, "in_flight"), 2);
  EXPECT_NE(held.ReadUntil("data: [DONE]").find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(running.get().status, 200);
  EXPECT_EQ(SimMetric(sim_ports_[0], "vllm:request_success_total"), 2);
  // Counted, and said in the log: admission could not keep up.
  EXPECT_EQ(Total(Admin(port_), "held_too_long"), 1);
  EXPECT_EQ(SimMetric(port_, "warden_admission_held_too_long_total"), 1);
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(1 request\(s\) held 1 s \(admission_max_hold_s\) let in whatever the room)"),
      &match));
}

// A gateway told to stop answers the requests admission still holds as its drain ends (503, to be
// sent again: none of them reached a replica) instead of cutting their connections unanswered.
TEST_F(GatewayTest, RequestsStillHeldWhenTheDrainEndsGetA503) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("fifo", {"--drain-timeout", "2"}));
  auto running = std::async(std::launch::async, [this] {
    return HttpPost(port_, "/v1/chat/completions", ChatBody("long", 150, 800));
  });
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 1; }));
  auto held = std::async(std::launch::async, [this] {
    return HttpPost(port_, "/v1/chat/completions", ChatBody("held", 150, 60));
  });
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 1; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  const HttpResult answer = held.get();
  EXPECT_EQ(answer.status, 503) << answer.body << answer.error;
  EXPECT_EQ(answer.header("retry-after"), "1");
  EXPECT_NE(answer.body.find("not sent to a replica"), std::string::npos) << answer.body;
  // Not the replicas' fault, whose 503s say no_healthy_replica.
  EXPECT_EQ(json::parse(answer.body).at("error").at("code").as_string(), "gateway_stopping");
  running.wait();
  // The held one never ran: the engine saw the running one alone (finished, or aborted when the
  // drain cut it, which the engine counts a moment later).
  EXPECT_TRUE(Eventually([&] {
    return SimMetric(sim_ports_[0], "vllm:request_success_total") +
               SimMetric(sim_ports_[0], "vllm:num_requests_running") ==
           1;
  }));
}

// Requests held by admission when the drain's time runs out get their access-log line at the cut
// (444: no answer), as the running request does, within the cut's half-second grace.
TEST_F(GatewayTest, ARequestHeldWhenTheDrainTimeIsUpIsLogged) {
  ASSERT_NO_FATAL_FAILURE(
      StartTinyReplicaBehindTheGateway("fifo", {"--drain-timeout", "0.2", "--access-log"}));
  std::vector<std::unique_ptr<RawConnection>> clients;
  for (int i = 0; i < 6; ++i) {
    const std::string body = ChatBody("held" + std::to_string(i), 150, 60);
    clients.push_back(std::make_unique<RawConnection>(port_));
    clients.back()->Send(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    if (i == 0) {
      ASSERT_EQ(::kill(sims_[0]->pid(), SIGSTOP), 0);  // the first one stays running
    }
  }
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 5; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  std::smatch match;
  int cut_lines = 0;
  while (cut_lines < 6 &&
         gateway_->WaitForLine(std::regex(R"(POST /v1/chat/completions \d+ .* cut: drain time up)"),
                               &match, std::chrono::seconds(5))) {
    ++cut_lines;
  }
  ::kill(sims_[0]->pid(), SIGCONT);
  EXPECT_EQ(cut_lines, 6);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
}

// A replica that stops answering (a hung process) with requests held for it at the gateway: once
// the scrape holds it for lost, the held request is let go like the one running there, and both
// get an answer (here 5xx: there is no other replica) instead of waiting for it to come back.
TEST_F(GatewayTest, RequestsHeldForAReplicaThatIsLostAreLetGo) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("fifo"));
  std::vector<std::future<HttpResult>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(std::async(std::launch::async, [this, i] {
      return HttpPost(port_, "/v1/chat/completions", ChatBody("l" + std::to_string(i), 150, 60));
    }));
  }
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 1; }));
  ASSERT_EQ(::kill(sims_[0]->pid(), SIGSTOP), 0);
  for (auto& client : clients) {
    const bool answered = client.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    if (!answered) ::kill(sims_[0]->pid(), SIGCONT);  // let the test end
    ASSERT_TRUE(answered) << "a request still waits for the stopped replica";
    EXPECT_GE(client.get().status, 500);
  }
  // The log says what the health check met: a wait that ran out, not a cancelled operation.
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(is unhealthy: no answer on /health \(no answer within [0-9.]+ s\))"), &match));
  ::kill(sims_[0]->pid(), SIGCONT);
  EXPECT_TRUE(Eventually([&] {
    const json::object m = Admin(port_);
    return Total(m, "held") == 0 && Total(m, "in_flight") == 0;
  }));
}

// A request held by admission for a replica that is drained meanwhile is not sent there: let in
// as the replica's last request ends, it is routed again (here to none: 503).
TEST_F(GatewayTest, ARequestHeldForADrainedReplicaIsNotSentThere) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("fifo"));
  std::vector<std::future<HttpResult>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(std::async(std::launch::async, [this, i] {
      return HttpPost(port_, "/v1/chat/completions", ChatBody("h" + std::to_string(i), 150, 60));
    }));
    if (i == 0) {
      ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 1; }));
    }
  }
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 1; }));
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": true}]})")
                .status,
            200);
  const HttpResult ran = clients[0].get(), held = clients[1].get();
  EXPECT_EQ(ran.status, 200);
  EXPECT_EQ(held.status, 503);
  EXPECT_NE(held.body.find("draining"), std::string::npos) << held.body;
  EXPECT_EQ(held.header("retry-after"), "");
  EXPECT_EQ(SimMetric(sim_ports_[0], "vllm:request_success_total"), 1);
  EXPECT_EQ(Total(Admin(port_), "held"), 0);
}

// With admission on, a request held for a drained replica that serves because the only other one
// is down waits there for its turn (it used to be routed again every second, counted each time, and
// to fail when its attempts ran out).
TEST_F(GatewayTest, ARequestHeldForADrainedReplicaServingInAnOutageWaitsForItsTurn) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "1", {"--profile", "tiny"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--admission", "fifo"}));
  const auto replica = [&](int i) { return Admin(port_).at("replicas").at(i).as_object(); };
  ASSERT_TRUE(Eventually([&] { return replica(0).at("kv_cache_tokens").as_int64() > 0; }));
  ASSERT_TRUE(Eventually([&] { return replica(1).at("healthy").as_bool(); }));
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": true}]})")
                .status,
            200);
  ASSERT_NO_FATAL_FAILURE(StopSim(1));
  std::vector<std::future<HttpResult>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(std::async(std::launch::async, [this, i] {
      return HttpPost(port_, "/v1/chat/completions", ChatBody("d" + std::to_string(i), 150, 60));
    }));
    if (i == 0) {
      ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 1; }));
    }
  }
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 1; }));
  for (auto& client : clients) {
    const HttpResult r = client.get();
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), "0");
  }
  EXPECT_EQ(SimMetric(sim_ports_[0], "vllm:request_success_total"), 2);
  const json::object model = Admin(port_);
  EXPECT_EQ(model.at("routed_to_draining").as_int64(), 2);  // once each
  EXPECT_EQ(Total(model, "held"), 0);
}

// Requests held while an operator drains the replicas in turn move with each drain, as often as it
// takes: a move is no failed try (they used to run out of tries at the seventh move and get a 503
// saying no replica was in service, while one was).
TEST_F(GatewayTest, HeldRequestsMovedByDrainsInTurnAreAnswered) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "1", {"--profile", "tiny", "--reply-tokens", "840"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--admission", "fifo"}));
  const auto replica = [&](int i) { return Admin(port_).at("replicas").at(i).as_object(); };
  ASSERT_TRUE(Eventually([&] {
    return replica(0).at("kv_cache_tokens").as_int64() > 0 &&
           replica(1).at("kv_cache_tokens").as_int64() > 0;
  }));
  std::vector<std::future<HttpResult>> clients;
  for (int i = 0; i < 3; ++i) {  // one running on each replica, the third held
    clients.push_back(std::async(std::launch::async, [this, i] {
      return HttpPost(port_, "/v1/chat/completions", ChatBody("f" + std::to_string(i), 150, 840));
    }));
    ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == i + 1; }));
  }
  ASSERT_EQ(Total(Admin(port_), "held"), 1);
  const auto drain = [&](int drained) {
    return HttpCall(port_, "PATCH", "/warden/v1/models/m",
                    fmt::format(R"({{"replicas": [{{"index": {}, "draining": true}}, )"
                                R"({{"index": {}, "draining": false}}]}})",
                                drained, 1 - drained))
        .status;
  };
  for (int move = 0; move < 7; ++move) {
    const int holding = replica(0).at("held").as_int64() == 1 ? 0 : 1;
    ASSERT_EQ(replica(holding).at("held").as_int64(), 1) << move;
    ASSERT_EQ(drain(holding), 200);
    ASSERT_TRUE(Eventually([&] { return replica(1 - holding).at("held").as_int64() == 1; }))
        << move;
  }
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": false}, )"
                     R"({"index": 1, "draining": false}]})")
                .status,
            200);
  for (auto& client : clients) {
    const HttpResult r = client.get();
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(SimMetric(sim_ports_[0], "vllm:request_success_total") +
                SimMetric(sim_ports_[1], "vllm:request_success_total"),
            3);
}

// reserve:N: when a turn ends, its room stays the conversation's until its next turn comes (for up
// to the reservation's seconds): a request of another conversation that does not fit beside it is
// held meanwhile, the conversation's next turn goes in at once (ahead of it), and after N turns
// in a row the room goes on to the queue.
TEST_F(GatewayTest, AReservationKeepsAConversationsRoomForItsNextTurn) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("reserve:2:60"));
  const auto turn = [&](const std::string& session, const std::string& words) {
    return KeyedChatTurn(port_, session, words);
  };
  ASSERT_EQ(turn("a", "a1").status, 200);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "reserved") == 1; }));
  EXPECT_EQ(SimMetric(port_, "warden_admission_reservations"), 1);  // the gateway's own metrics
  std::atomic<int> b_status{0};
  std::thread b([&] { b_status = turn("b", "b1").status; });
  EXPECT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 1; }));
  EXPECT_EQ(b_status.load(), 0);
  ASSERT_EQ(turn("a", "a2").status, 200);  // in at once, ahead of b: 60 s would fail the test
  b.join();
  EXPECT_EQ(b_status.load(), 200);
  // a's second turn in a row kept nothing; b's first turn keeps its room.
  EXPECT_TRUE(Eventually([&] {
    const json::object m = Admin(port_);
    return Total(m, "in_flight") == 0 && Total(m, "held") == 0 && Total(m, "reserved") == 1;
  }));
}

// A turn that ends on a replica drained while it ran keeps no room there: no next turn will come
// to it (before, the room stayed reserved for reserve_s, 60 s here).
TEST_F(GatewayTest, ATurnEndingOnADrainedReplicaReservesNothingThere) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("reserve:2:60"));
  BackgroundStream turn(port_, "a", 150, Words("long", 20));
  ASSERT_TRUE(Eventually([&] { return turn.started(); }));
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": true}]})")
                .status,
            200);
  EXPECT_EQ(turn.Finish().status, 200);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  EXPECT_FALSE(Eventually([&] { return Total(Admin(port_), "reserved") > 0; }, 1.0));
}

// SIGTERM while requests are held and a reservation is live, connections kept alive: the
// coroutines waiting on them are destroyed while the gateway (and the simulator) still exist, and
// both exit cleanly. (They were destroyed after it, and the process crashed now and then.)
TEST_F(GatewayTest, StopsCleanlyWithRequestsHeldAndReserved) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("reserve:2:60"));
  ASSERT_EQ(KeyedChatTurn(port_, "a", "a1").status, 200);  // leaves a reservation
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (const char* session : {"b", "c"}) {  // held behind the reservation
    clients.emplace_back([&, session] {
      if (KeyedChatTurn(port_, session, std::string(session) + "1").status != 0) ++answered;
    });
  }
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 2; }));
  // SIGTERM drains: the reservation is given up (no next turn can come), the held requests go
  // in and are answered, and then the gateway exits.
  EXPECT_EQ(gateway_->Stop(), 0);
  for (auto& c : clients) c.join();
  EXPECT_EQ(answered.load(), 2);
  EXPECT_EQ(sims_[0]->Stop(), 0);  // the gateway's pooled connections to it were open
}

// A second signal does not wait for the held requests (their connections close unanswered).
TEST_F(GatewayTest, ASecondSignalStopsAtOnceWithRequestsHeld) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("fifo"));
  BackgroundStream first(port_, "l", 2000, Words("long", 20));
  ASSERT_TRUE(Eventually([&] { return first.started(); }));
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (const char* session : {"b", "c"}) {  // held: the long stream fills the cache
    clients.emplace_back([&, session] {
      if (KeyedChatTurn(port_, session, std::string(session) + "1").status != 0) ++answered;
    });
  }
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 2; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  EXPECT_TRUE(Eventually([&] { return HttpGet(port_, "/health").status == 0; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGINT), 0);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(5)), 0);
  first.Finish();
  for (auto& c : clients) c.join();
  EXPECT_EQ(answered.load(), 0);
  EXPECT_EQ(sims_[0]->Stop(), 0);
}

// A reservation whose conversation does not come back expires: the held request goes in. (The
// turn that left it is a stream without usage: a whole answer is enough to reserve.)
TEST_F(GatewayTest, AnUnusedReservationExpiresAndLetsTheHeldRequestIn) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("reserve:2:1"));
  json::value a1 = json::parse(ChatBody("a1", 150, 60));
  a1.as_object()["stream"] = true;
  ASSERT_EQ(
      HttpPost(port_, "/v1/chat/completions", json::serialize(a1), {{"X-Session-ID", "a"}}).status,
      200);
  const auto a_ended = std::chrono::steady_clock::now();
  ASSERT_EQ(KeyedChatTurn(port_, "b", "b1").status, 200);  // held until a's reservation expired
  EXPECT_GE(std::chrono::steady_clock::now() - a_ended, std::chrono::milliseconds(900));
  EXPECT_TRUE(Eventually([&] { return Total(Admin(port_), "reserved") == 0; }));
}

// A replica lost with a reservation on it keeps none: what it kept room for went with it. Back,
// it lets a request in at once (which waited out the reservation's 60 s before).
TEST_F(GatewayTest, AReplicaLostGivesUpItsReservations) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("reserve:2:60"));
  ASSERT_EQ(KeyedChatTurn(port_, "a", "a1").status, 200);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "reserved") == 1; }));
  ASSERT_NO_FATAL_FAILURE(StopSim(0));
  EXPECT_TRUE(Eventually([&] { return Total(Admin(port_), "reserved") == 0; }));
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(0, {"--profile", "tiny"}));
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
  auto b = std::async(std::launch::async, [&] { return KeyedChatTurn(port_, "b", "b1"); });
  ASSERT_EQ(b.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(b.get().status, 200);
}

// One turn of a keyless conversation on the stateful Responses API: its body's input, the id of
// the response it continues from when it has one; the response's id back.
std::string ResponsesTurn(uint16_t port, const std::string& input, const std::string& previous) {
  json::object body{{"model", "m"}, {"input", input}, {"max_output_tokens", 20}};
  if (!previous.empty()) body["previous_response_id"] = previous;
  const HttpResult r = HttpPost(port, "/v1/responses", json::serialize(body));
  EXPECT_EQ(r.status, 200) << r.body;
  return r.status == 200 ? std::string(json::parse(r.body).at("id").as_string()) : "";
}

// The turns of a keyless conversation that continue from a stored response take the room its
// last turn reserved, as turns keyed by a session do: one reservation at a time, none after the
// third turn in a row (there were two at once, the first turn's left behind).
TEST_F(GatewayTest, AKeylessResponsesChainTakesItsOwnReservation) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("reserve:3:60"));
  std::string previous;
  for (int turn = 0; turn < 3; ++turn) {
    previous =
        ResponsesTurn(port_, Words("chain" + std::to_string(turn), turn == 0 ? 150 : 30), previous);
    ASSERT_FALSE(previous.empty());
    const int64_t reserved = turn < 2 ? 1 : 0;
    EXPECT_TRUE(Eventually([&] {
      const json::object m = Admin(port_);
      return Total(m, "in_flight") == 0 && Total(m, "reserved") == reserved;
    })) << turn
        << ": " << Total(Admin(port_), "reserved") << " reserved";
  }
}

// A turn that continues a stored response sends only its new input, and its usage counts the
// whole conversation: admission learns nothing from it (it learned chunks ten times too large,
// and then let requests in one at a time).
TEST_F(GatewayTest, TurnsOnStoredResponsesTeachAdmissionNothing) {
  ASSERT_NO_FATAL_FAILURE(StartTinyReplicaBehindTheGateway("fifo"));
  const auto tokens_per_chunk = [&] {
    return Admin(port_).at("admission_estimates").at("tokens_per_chunk").to_number<double>();
  };
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(KeyedChatTurn(port_, "w" + std::to_string(i), "w" + std::to_string(i)).status, 200);
  const double learned = tokens_per_chunk();
  std::string previous = ResponsesTurn(port_, Words("stored", 300), "");
  for (int turn = 1; turn < 8; ++turn) {
    previous = ResponsesTurn(port_, Words("more" + std::to_string(turn), 50), previous);
    ASSERT_FALSE(previous.empty());
  }
  EXPECT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  EXPECT_NEAR(tokens_per_chunk(), learned, 0.25 * learned);
}

// A request held for a replica that is lost is routed again, past it while it is down but not
// once it is back: held on the other replica, then moved by that one's drain, it goes to the
// first (it got a 503 saying no replica was in service).
TEST_F(GatewayTest, ARequestMovedOffALostReplicaGoesBackThereOnceItServes) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "1", {"--profile", "tiny"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--admission", "reserve:2:30"}));
  const auto replica = [&](int i) { return Admin(port_).at("replicas").at(i).as_object(); };
  ASSERT_TRUE(Eventually([&] {
    return replica(0).at("kv_cache_tokens").as_int64() > 0 &&
           replica(1).at("kv_cache_tokens").as_int64() > 0;
  }));
  // A reservation on each replica (a tiny cache holds one such turn): nothing runs, a new
  // request waits behind one.
  const HttpResult a = KeyedChatTurn(port_, "a", "a1"), b = KeyedChatTurn(port_, "b", "b1");
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  ASSERT_NE(a.header("x-warden-replica"), b.header("x-warden-replica"));
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "reserved") == 2; }));
  auto held = std::async(std::launch::async, [this] {
    return HttpPost(port_, "/v1/chat/completions", ChatBody("z", 150, 60));
  });
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "held") == 1; }));
  const int lost = replica(0).at("held").as_int64() == 1 ? 0 : 1, other = 1 - lost;
  ASSERT_NO_FATAL_FAILURE(StopSim(lost));
  ASSERT_TRUE(Eventually([&] { return replica(other).at("held").as_int64() == 1; }));
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(lost, {"--profile", "tiny"}));
  ASSERT_TRUE(Eventually([&] { return replica(lost).at("healthy").as_bool(); }));
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     fmt::format(R"({{"replicas": [{{"index": {}, "draining": true}}]}})", other))
                .status,
            200);
  const HttpResult z = held.get();
  EXPECT_EQ(z.status, 200) << z.body;
  EXPECT_EQ(z.header("x-warden-replica"), std::to_string(lost));
}

}  // namespace
}  // namespace warden::testing
