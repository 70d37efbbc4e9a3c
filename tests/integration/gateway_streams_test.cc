// `warden serve`: streamed answers: relayed unchanged, clients that stop or leave, broken-off
// streams.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// A Responses API stream read to its connection's close that ends with response.incomplete (a
// reply cut at its token limit) is whole: relayed as it came, with no error event after it, and
// not counted failed; one that ends with response.failed is the replica's own error, relayed
// without the gateway's after it (found by review: both were taken for broken off).
TEST_F(GatewayTest, AResponsesStreamThatEndsIncompleteOrFailedIsNotBrokenOff) {
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
      "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":"
      "\"resp_1\",\"usage\":null}}\n\nevent: response.output_text.delta\ndata: {\"type\":"
      "\"response.output_text.delta\",\"delta\":\"hi\"}\n\n";
  const std::string incomplete =
      "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{"
      "\"id\":\"resp_1\",\"status\":\"incomplete\",\"usage\":{\"input_tokens\":50,"
      "\"input_tokens_details\":{\"cached_tokens\":32},\"output_tokens\":1}}}\n\n";
  const std::string failed =
      "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":"
      "\"resp_1\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\"},"
      "\"usage\":null}}\n\n";
  FakeReplica fake([&](const std::string& request) {
    FakeAnswer a;
    a.bytes = head + (request.find("fails") != std::string::npos ? failed : incomplete);
    a.close_after_ms = 0;  // the stream's end is the connection's
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  const auto send = [&](const std::string& input) {
    return HttpPost(port_, "/v1/responses",
                    R"({"model":"m","stream":true,"input":")" + input + R"("})",
                    {{"x-session-id", "r-" + input}});
  };
  const HttpResult cut = send("long");
  ASSERT_EQ(cut.status, 200) << cut.error;
  EXPECT_EQ(cut.body, head.substr(head.find("\r\n\r\n") + 4) + incomplete);
  EXPECT_EQ(SimMetric(port_, "warden_requests_failed_total"), 0);
  EXPECT_EQ(SimMetric(port_, "warden_prompt_tokens_total", "kind", "cached"), 32);
  // A whole answer: its output counted, its time to the end observed.
  EXPECT_EQ(SimMetric(port_, "warden_output_tokens_total"), 1);
  EXPECT_EQ(SimMetric(port_, "warden_request_duration_seconds_count"), 1);
  const HttpResult failure = send("fails");
  ASSERT_EQ(failure.status, 200) << failure.error;
  EXPECT_EQ(failure.body, head.substr(head.find("\r\n\r\n") + 4) + failed);
  EXPECT_EQ(SimMetric(port_, "warden_requests_failed_total"), 0);
  // The replica's own failure is no whole answer: no time to its end.
  EXPECT_EQ(SimMetric(port_, "warden_request_duration_seconds_count"), 1);
}

TEST_F(GatewayTest, ClientThatDisconnectsMidStreamFreesTheReplicasSlot) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  json::object body{
      {"model", "m"},
      {"max_tokens", 5000},
      {"stream", true},
      {"ignore_eos", true},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("d", 50)}}}}};
  int pieces = 0;
  const HttpResult r = HttpStream(port_, "/v1/messages", json::serialize(body),
                                  {{"X-Claude-Code-Session-Id", "leaver"}},
                                  [&](std::string_view) { return ++pieces < 3; });
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(Eventually([&] {
    return SimMetric(sim_ports_[0], "vllm:request_success_total", "finished_reason", "abort") ==
               1 &&
           SimMetric(sim_ports_[0], "vllm:num_requests_running") == 0;
  }));
  EXPECT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  EXPECT_LT(SimMetric(sim_ports_[0], "vllm:generation_tokens_total"), 5000);
  EXPECT_EQ(Total(Admin(port_), "failed"), 0);  // the client left: the replica did not fail
}

// The same through OpenAI's API with vLLM's running usage on every chunk (continuous_usage_stats,
// or every stream with --enable-force-include-usage): the chunks' usage has no cached share, the
// last chunk's has; a stream stopped before it counts no split either.
TEST_F(GatewayTest, AnOpenAiStreamStoppedBeforeItsLastUsageCountsNoCacheSplit) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20", {"--enable-force-include-usage"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto turn = [&](bool stop) {
    const json::object body{
        {"model", "m"},
        {"max_tokens", 40},
        {"stream", true},
        {"messages", json::array{json::object{{"role", "user"}, {"content", Words("run", 300)}}}}};
    std::string text;
    const HttpResult r =
        HttpStream(port_, "/v1/chat/completions", json::serialize(body),
                   {{"X-Session-ID", "running"}}, [&](std::string_view data) {
                     text.append(data);
                     return !stop || text.find("completion_tokens\":2") == std::string::npos;
                   });
    EXPECT_EQ(r.status, 200);
  };
  turn(true);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  json::object replica = Admin(port_).at("replicas").at(0).as_object();
  EXPECT_EQ(replica.at("requests").as_int64(), 1);
  EXPECT_EQ(replica.at("cache_unreported").as_int64(), 0);
  EXPECT_EQ(replica.at("computed_prompt_tokens").as_int64(), 0);
  turn(false);
  replica = Admin(port_).at("replicas").at(0).as_object();
  EXPECT_EQ(replica.at("cache_reported").as_int64(), 1);
  EXPECT_GT(replica.at("cached_prompt_tokens").as_int64(), 0);  // the first turn's prompt
  EXPECT_EQ(replica.at("cache_unreported").as_int64(), 0);
}

// A turn the client stops mid-stream (Claude Code's Esc) ends before its final usage; its start
// said what the cache gave (an Anthropic message_start with the cache's fields, as recent vLLM's):
// it counts as that split, and as a turn that read its history (an older vLLM's start says only
// the prompt's size, and such a turn counts in none of these); the next whole turn is counted as
// usual.
TEST_F(GatewayTest, ATurnTheClientStopsCountsTheCacheSplitItsStartSaid) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  EscConversation esc(json::object{{"max_tokens", 40}});
  const auto turn = [&](bool stop) { esc.Turn(port_, stop); };
  turn(false);
  turn(true);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  json::object replica = Admin(port_).at("replicas").at(0).as_object();
  EXPECT_EQ(replica.at("requests").as_int64(), 2);
  EXPECT_EQ(replica.at("cache_reported").as_int64(), 2);
  EXPECT_EQ(replica.at("cache_unreported").as_int64(), 0);
  EXPECT_EQ(replica.at("usage_unknown").as_int64(), 0);
  EXPECT_EQ(replica.at("returning_turns").as_int64(), 1);
  turn(false);
  replica = Admin(port_).at("replicas").at(0).as_object();
  EXPECT_EQ(replica.at("cache_reported").as_int64(), 3);
  EXPECT_EQ(replica.at("returning_turns").as_int64(), 2);
  EXPECT_GT(replica.at("history_cached_tokens").as_int64(),
            replica.at("history_tokens").as_int64() / 2);
}

// A client that sends the start of its next request and leaves while the answer to the first
// is still being generated (nothing written to it yet): its bytes stay readable, and the hang-up
// is still noticed.
TEST_F(GatewayTest, AClientThatPipelinedBeforeLeavingStillFreesTheReplicasSlot) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "5"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  auto client = std::make_unique<RawConnection>(port_);
  client->Send(
      MessagesRequestBytes(R"({"model":"m","max_tokens":5000,"ignore_eos":true,)"
                           R"("messages":[{"role":"user","content":"pipelined then gone"}]})",
                           "pipeliner"));
  ASSERT_TRUE(
      Eventually([&] { return SimMetric(sim_ports_[0], "vllm:num_requests_running") == 1; }));
  client->Send("GET /health HTTP/1.1\r\n");  // the next request's first line
  client.reset();                            // and gone
  EXPECT_TRUE(Eventually([&] {
    return SimMetric(sim_ports_[0], "vllm:request_success_total", "finished_reason", "abort") == 1;
  }));
  EXPECT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  EXPECT_LT(SimMetric(sim_ports_[0], "vllm:generation_tokens_total"), 5000);
}

// The simulator, like vLLM, aborts a request whose client left, streamed or not (a whole
// response used to be computed to its end, holding its slot).
TEST_F(GatewayTest, TheSimulatorAbortsAWholeResponseWhoseClientLeft) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20"));
  const std::string body =
      R"({"model":"m","max_tokens":5000,"ignore_eos":true,"messages":[{"role":"user","content":"go"}]})";
  {
    RawConnection client(sim_ports_[0]);
    client.Send(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        "application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    ASSERT_TRUE(
        Eventually([&] { return SimMetric(sim_ports_[0], "vllm:num_requests_running") == 1; }));
  }  // the client leaves
  EXPECT_TRUE(Eventually([&] {
    return SimMetric(sim_ports_[0], "vllm:request_success_total", "finished_reason", "abort") ==
               1 &&
           SimMetric(sim_ports_[0], "vllm:num_requests_running") == 0;
  }));
  EXPECT_LT(SimMetric(sim_ports_[0], "vllm:generation_tokens_total"), 5000);
}

// A replica that dies in the middle of a stream: between two events, the client gets an error
// event in its API's words and a whole body (Claude Code then sends the turn again at once; on a
// plain cut it retries with growing pauses); in the middle of an event, nothing can be added to
// it, and the body is cut (no last chunk). Counted as failed either way; after the stream's last
// event, not at all.
TEST_F(GatewayTest, AStreamTheReplicaBreaksOffEndsWithAnErrorEvent) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    std::string events = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n";
    if (request.find("mid-event") != std::string::npos) events += "event: content_";
    if (request.find("whole") != std::string::npos)
      events += "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    char size[16];
    std::snprintf(size, sizeof size, "%zx", events.size());
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
        "chunked\r\n\r\n" +
        std::string(size) + "\r\n" + events + "\r\n";
    // Neither a length nor chunks: the body ends where the connection does.
    if (request.find("unframed") != std::string::npos)
      a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + events;
    a.close_after_ms = 0;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  const auto send_messages = [&](RawConnection& c, const std::string& scenario) {
    const std::string body =
        R"({"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":")" +
        scenario + R"("}]})";
    c.Send(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
  };
  // The client's side up to the end of the body, or of the connection.
  const auto messages = [&](const std::string& scenario) {
    RawConnection c(port_);
    send_messages(c, scenario);
    return c.ReadUntil("\r\n0\r\n\r\n");
  };
  // A body ended with its last chunk leaves the connection open for the client's next request:
  // closing it failed a request already on its way (found by review, under replica churn).
  for (const std::string scenario : {"between", "whole"}) {
    RawConnection kept(port_);
    send_messages(kept, scenario);
    kept.ReadUntil("\r\n0\r\n\r\n");
    send_messages(kept, scenario);
    const std::string both = kept.ReadUntil("\r\n0\r\n\r\n", 2);
    EXPECT_FALSE(kept.closed()) << scenario << ": " << both;
    EXPECT_EQ(both.find("Connection: close"), std::string::npos) << both;
    EXPECT_NE(both.find("HTTP/1.1 200", both.find("\r\n0\r\n\r\n")), std::string::npos)
        << scenario << ": the second answer on the connection: " << both;
  }
  const std::string told = messages("between");
  EXPECT_NE(told.find("data: {\"type\":\"message_start\"}\n\n"), std::string::npos) << told;
  const size_t event = told.find("event: error\ndata: ");
  ASSERT_NE(event, std::string::npos) << told;
  const size_t data = event + std::string("event: error\ndata: ").size();
  const json::value error = json::parse(told.substr(data, told.find('\n', data) - data));
  EXPECT_EQ(error.at("type"), "error");
  EXPECT_EQ(error.at("error").at("type"), "api_error");
  EXPECT_NE(error.at("error").at("message").as_string().find("replica 0 closed its connection"),
            std::string_view::npos);
  EXPECT_TRUE(told.ends_with("\n\n\r\n0\r\n\r\n")) << "the last chunk: " << told;

  const std::string cut = messages("mid-event");
  EXPECT_NE(cut.find("event: content_"), std::string::npos) << cut;
  EXPECT_EQ(cut.find("event: error"), std::string::npos) << cut;
  EXPECT_EQ(cut.find("\r\n0\r\n\r\n"), std::string::npos) << "no last chunk: " << cut;
  // An HTTP/1.0 client knows no chunks: its body ends with the connection, so a cut one ends
  // with a reset, not a close that would make it look whole (found by review); a whole one with
  // a close.
  for (const std::string scenario : {"mid-event", "whole"}) {
    const std::string body =
        R"({"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":")" +
        scenario + R"("}]})";
    RawConnection c(port_);
    c.Send("POST /v1/messages HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body);
    const std::string got = c.ReadToClose();
    EXPECT_TRUE(got.starts_with("HTTP/1.1 200")) << got;
    EXPECT_TRUE(c.closed()) << scenario;
    EXPECT_EQ(c.reset(), scenario == "mid-event") << got;
  }
  // A replica that closes after its stream's last event (but before the last chunk): the answer
  // is whole, and so is the client's body, with no error event; not counted as failed.
  const std::string whole = messages("whole");
  EXPECT_EQ(whole.find("event: error"), std::string::npos) << whole;
  EXPECT_TRUE(whole.ends_with("data: {\"type\":\"message_stop\"}\n\n\r\n0\r\n\r\n")) << whole;
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("failed").as_int64(), 5);
  // A stream whose end is the connection's: a close before it said it ended is a break too,
  // however clean the close; after message_stop, the end.
  const double usage_unknown = SimMetric(port_, "warden_usage_unknown_total");
  const std::string unframed = messages("unframed between");
  EXPECT_NE(unframed.find("event: error\ndata: "), std::string::npos) << unframed;
  EXPECT_TRUE(unframed.ends_with("\n\n\r\n0\r\n\r\n")) << unframed;
  // Cut short: no usage was to be had.
  EXPECT_EQ(SimMetric(port_, "warden_usage_unknown_total"), usage_unknown);
  const std::string unframed_whole = messages("unframed whole");
  EXPECT_EQ(unframed_whole.find("event: error"), std::string::npos) << unframed_whole;
  EXPECT_TRUE(unframed_whole.ends_with("data: {\"type\":\"message_stop\"}\n\n\r\n0\r\n\r\n"))
      << unframed_whole;
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("failed").as_int64(), 6);
  // On a path whose stream is not read for its end, the close is the end.
  RawConnection other(port_);
  other.Send("GET /v1/other/unframed HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const std::string other_stream = other.ReadUntil("\r\n0\r\n\r\n");
  EXPECT_EQ(other_stream.find("event: error"), std::string::npos) << other_stream;
  EXPECT_TRUE(other_stream.ends_with("data: {\"type\":\"message_start\"}\n\n\r\n0\r\n\r\n"))
      << other_stream;
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("failed").as_int64(), 6);
}

// A generation stream's head goes out with its first event (so that a replica that dies before it
// leaves the request free to go elsewhere: here there is no other, and the client gets a 502, not
// a 200 cut short); another stream's head goes out when the replica sends it, not when its first
// chunk's data comes.
TEST_F(GatewayTest, AGenerationStreamsHeadGoesOutWithItsFirstEventAnotherStreamsAtOnce) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        "8\r\n";
    if (request.find("x-case: dies") != std::string::npos) {
      a.close_after_ms = 100;
      return a;
    }
    a.then = "data: x\n\r\n0\r\n\r\n";
    a.then_after_ms = 1500;
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  {
    RawConnection c(port_);
    std::string request = ChatRequestBytes(ScenarioRequest("stream"));
    request.insert(request.find("\r\n") + 2, "x-case: dies\r\n");
    c.Send(request);
    const std::string answer = c.ReadUntil("\r\n\r\n");
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 502")) << answer;
  }
  RawConnection c(port_);
  c.Send("GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const std::string head = c.ReadUntil("\r\n\r\n");
  EXPECT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
  EXPECT_EQ(fake.answers(), 1) << "the head waited for the data";  // (the one that died)
  EXPECT_NE(c.ReadUntil("data: x").find("data: x"), std::string::npos);
}

// A generation stream whose first event is late (the replica queues the request, or reads a long
// prompt) gets its head and keepalives once it has waited stream_keepalive_s: clients time out
// waiting for a head (Claude Code after about 300 s) and send the request again. The events follow
// as they come: Anthropic's ping events on /v1/messages, SSE comments on OpenAI's paths. A
// replica that fails the request after that ends the stream with an error event (the request can
// no longer go elsewhere, and the client learns why).
TEST_F(GatewayTest, AStreamWhoseFirstEventIsLateGetsItsHeadAndKeepalives) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    if (request.find("x-case: dies") != std::string::npos) {
      a.close_after_ms = 1500;
      return a;
    }
    a.then = "8\r\ndata: x\n\r\n0\r\n\r\n";
    a.then_after_ms = 1500;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--stream-keepalive", "0.1"}));

  const HttpResult chat = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("late"));
  EXPECT_EQ(chat.status, 200);
  EXPECT_EQ(chat.header("x-warden-replica"), "0");
  ASSERT_TRUE(chat.body.starts_with(": ping\n\n: ping\n\n")) << chat.body;
  EXPECT_TRUE(chat.body.ends_with(": ping\n\ndata: x\n")) << chat.body;

  const HttpResult messages = HttpPost(port_, "/v1/messages", ScenarioRequest("late"));
  EXPECT_EQ(messages.status, 200);
  const std::vector<SseEvent> events = ParseSse(messages.body);
  ASSERT_GE(events.size(), 2u) << messages.body;
  EXPECT_EQ(events.front().event, "ping");
  EXPECT_EQ(events.front().data, R"({"type": "ping"})");
  EXPECT_TRUE(messages.body.ends_with("data: x\n")) << messages.body;

  const HttpResult dies =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("dies"), {{"x-case", "dies"}});
  EXPECT_EQ(dies.status, 200);
  EXPECT_TRUE(dies.body.starts_with(": ping\n\n")) << dies.body;
  const size_t error = dies.body.find("data: {\"error\"");
  ASSERT_NE(error, std::string::npos) << dies.body;
  EXPECT_NE(dies.body.find("closed its connection", error), std::string::npos) << dies.body;
  EXPECT_EQ(fake.requests(), 3) << "sent nowhere else once its head went out";

  const HttpResult metrics = HttpGet(port_, "/metrics");
  EXPECT_NE(metrics.body.find("warden_streams_kept_alive_total 3\n"), std::string::npos);
  const json::object admin = Admin(port_);
  EXPECT_EQ(Total(admin, "in_flight"), 0);
  EXPECT_EQ(Total(admin, "requests"), 3);
}

// A stream whose head went out with keepalives has begun for its client: when its replica is held
// for lost, it is not cut (it can go nowhere else), as a stream its replica began is not (found
// by review: it was cut at once, with an error event that blamed a stall).
TEST_F(GatewayTest, AStreamKeptAliveIsNotCutWhenItsReplicaIsHeldForLost) {
  FakeReplica fake([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    a.then = "8\r\ndata: x\n\r\n0\r\n\r\n";
    a.then_after_ms = 4000;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(
      StartGatewayBefore(fake, {"--stream-keepalive", "0.1", "--stall-timeout", "0"}));
  RawConnection c(port_);
  c.Send(ChatRequestBytes(ScenarioRequest("late")));
  ASSERT_NE(c.ReadUntil(": ping").find(": ping"), std::string::npos);
  fake.SetHealthy(false);
  ASSERT_TRUE(
      Eventually([&] { return !Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
  const std::string received = c.ReadUntil("0\r\n\r\n");
  EXPECT_NE(received.find("data: x\n"), std::string::npos) << received;
  EXPECT_EQ(received.find("error"), std::string::npos) << received;
}

// With keepalives off, a stream's head waits for its first event however long that takes.
TEST_F(GatewayTest, WithKeepalivesOffAStreamsHeadWaitsForItsFirstEvent) {
  FakeReplica fake([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    a.then = "8\r\ndata: x\n\r\n0\r\n\r\n";
    a.then_after_ms = 500;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--stream-keepalive", "0"}));
  const HttpResult chat = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("late"));
  EXPECT_EQ(chat.status, 200);
  EXPECT_EQ(chat.body, "data: x\n");
}

// An OpenAI stream its client leaves before the usage (stream_options.include_usage sends it
// last) had its prompt read, but no count of it came: it adds no prompt tokens of either kind,
// and is counted in cut_without_usage (found by review: nothing showed the shortfall against
// the engine's own count).
TEST_F(GatewayTest, AStreamCutBeforeItsUsageIsCountedAsSuch) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const json::object body{
      {"model", "m"},
      {"max_tokens", 500},
      {"ignore_eos", true},
      {"stream", true},
      {"stream_options", json::object{{"include_usage", true}}},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("cut", 200)}}}}};
  std::string text;
  const HttpResult r = HttpStream(port_, "/v1/chat/completions", json::serialize(body), {},
                                  [&](std::string_view data) {
                                    text.append(data);
                                    return text.find("\"content\"") == std::string::npos;
                                  });
  EXPECT_EQ(r.status, 200);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  const json::object admin = Admin(port_);
  const json::object& replica = admin.at("replicas").at(0).as_object();
  EXPECT_EQ(replica.at("cut_without_usage").as_int64(), 1);
  EXPECT_EQ(replica.at("usage_unknown").as_int64(), 0);
  EXPECT_EQ(replica.at("cached_prompt_tokens").as_int64(), 0);
  EXPECT_EQ(replica.at("computed_prompt_tokens").as_int64(), 0);
  EXPECT_NE(HttpGet(port_, "/metrics").body.find("warden_cut_without_usage_total{model=\"m\""),
            std::string::npos);
}

// A replica's stream with malformed events (cut, unbalanced JSON) is relayed as it came, and the
// gateway, which reads the events on the side, goes on serving (it crashed, found by fuzzing).
TEST_F(GatewayTest, AReplicasMalformedEventsAreRelayedAndNothingCrashes) {
  const std::string events =
      "data:{\"\":{}\n\n"
      "data: {\"a\":[}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
      "data: {\"usage\":{\"prompt_tokens\":\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\n\n"
      "data: [DONE]\n\n";
  FakeReplica fake([&](const std::string&) {
    FakeAnswer a;
    a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
              std::to_string(events.size()) + "\r\n\r\n" + events;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  for (int i = 0; i < 2; ++i) {
    const HttpResult r = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("malformed"));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, events);
  }
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("computed_prompt_tokens").as_int64(), 14);
}

TEST_F(GatewayTest, StreamedBytesReachTheClientUnchanged) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string messages_body = json::serialize(json::object{
      {"model", "m"},
      {"max_tokens", 40},
      {"stream", true},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("same", 200)}}}}});
  const Headers session = {{"X-Claude-Code-Session-Id", "bytes"}, {"X-Request-Id", "fixed"}};
  HttpPost(port_, "/v1/messages", messages_body, session);  // warms the replica's cache
  const HttpResult via_gateway = HttpPost(port_, "/v1/messages", messages_body, session);
  ASSERT_EQ(via_gateway.status, 200);
  const std::string rank = via_gateway.header("x-warden-replica");
  const HttpResult direct = HttpPost(sim_ports_[0], "/v1/messages", messages_body,
                                     {{"X-data-parallel-rank", rank}, {"X-Request-Id", "fixed"}});
  EXPECT_EQ(via_gateway.body, direct.body);
  EXPECT_EQ(via_gateway.header("content-type"), direct.header("content-type"));
  EXPECT_GT(via_gateway.body.size(), 2000u);

  // OpenAI chat: the same but for the "created" timestamp, which is the second the reply began.
  const std::string chat_body = json::serialize(json::object{
      {"model", "m"},
      {"max_tokens", 40},
      {"stream", true},
      {"stream_options", json::object{{"include_usage", true}}},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("chat", 200)}}}}});
  const Headers chat_session = {{"X-Session-Id", "chat-bytes"}, {"X-Request-Id", "fixed2"}};
  HttpPost(port_, "/v1/chat/completions", chat_body, chat_session);
  const HttpResult chat_gateway = HttpPost(port_, "/v1/chat/completions", chat_body, chat_session);
  const HttpResult chat_direct =
      HttpPost(sim_ports_[0], "/v1/chat/completions", chat_body,
               {{"X-data-parallel-rank", chat_gateway.header("x-warden-replica")},
                {"X-Request-Id", "fixed2"}});
  const std::regex created("\"created\":[0-9]+");
  EXPECT_EQ(std::regex_replace(chat_gateway.body, created, "\"created\":0"),
            std::regex_replace(chat_direct.body, created, "\"created\":0"));
}

}  // namespace
}  // namespace warden::testing
