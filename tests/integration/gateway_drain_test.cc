// `warden serve`: the gateway's own drain on SIGTERM: what is finished, what is cut, what is
// refused.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// A stream still running when the drain's time is up is cut, and its access-log line says so
// (before, the gateway stopped with the count alone: no line for the request, as if never made).
// Its client is told in an error event and a proper end of the body, on which Claude Code sends
// the turn again at once (on a bare cut it retries with growing pauses); not counted as the
// replica's break.
TEST_F(GatewayTest, AStreamCutWhenTheDrainTimeIsUpEndsWithAnErrorEventAndIsLogged) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "1"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--drain-timeout", "1", "--access-log"}));
  const std::string body =
      R"({"model":"m","max_tokens":4000,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"long"}]})";
  RawConnection stream(port_);
  stream.Send(
      "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_NE(stream.ReadUntil("content_block_delta").find("content_block_delta"), std::string::npos);
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(std::regex(R"(drain time is up: 1 connection\(s\) cut short)"),
                                    &match));
  ASSERT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/messages 200 [0-9.]+ms (.*) cut: drain time up)"), &match));
  EXPECT_EQ(match[1].str().find(" left"), std::string::npos) << match[0];
  EXPECT_EQ(match[1].str().find(" cut"), std::string::npos) << match[0];  // no replica break
  const std::string received = stream.ReadToClose();
  const size_t error_event = received.find("event: error\ndata: ");
  ASSERT_NE(error_event, std::string::npos) << received.substr(received.size() - 600);
  EXPECT_NE(received.find("drain's time ran out) in the middle of this response", error_event),
            std::string::npos);
  EXPECT_TRUE(received.ends_with("\r\n0\r\n\r\n")) << received.substr(received.size() - 300);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
}

// With a drain delay, a stop signal first takes the gateway out of a load balancer's rotation:
// GET /ready says 503 while requests, on new connections too, are served as before; then it
// drains and exits. (Without it the listener closes at once, and a balancer sees refusals.)
TEST_F(GatewayTest, ADrainDelayKeepsServingWhileReadySaysStopping) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "1"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--drain-delay", "3"}));
  ASSERT_TRUE(Eventually([&] { return HttpGet(port_, "/ready").status == 200; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(std::regex(R"(stopping: serving 3 s more)"), &match));
  const HttpResult ready = HttpGet(port_, "/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.body, "stopping: send new requests elsewhere\n");
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);
  const HttpResult during = HttpPost(port_, "/v1/chat/completions", ChatBody("during", 10, 4));
  EXPECT_EQ(during.status, 200) << during.body << during.error;
  // Its client comes back through the load balancer, which sends it to another gateway.
  EXPECT_EQ(during.header("connection"), "close");
  EXPECT_TRUE(Eventually([&] { return HttpGet(port_, "/health").status == 0; }));  // the drain
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
}

// A second signal during the delay starts the drain at once: the requests on their way finish
// (an operator pressing Ctrl-C again does not cut every stream); a third stops at once.
TEST_F(GatewayTest, ASecondSignalDuringTheDrainDelayDrainsNow) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "1"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--drain-delay", "600"}));
  ASSERT_TRUE(Eventually([&] { return HttpGet(port_, "/ready").status == 200; }));
  auto running = std::async(std::launch::async, [this] {
    return HttpPost(port_, "/v1/chat/completions", ChatBody("long", 150, 400));
  });
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 1; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(std::regex(R"(stopping: serving 600 s more)"), &match));
  ASSERT_EQ(Total(Admin(port_), "in_flight"), 1);  // still running at the second signal
  ASSERT_EQ(::kill(gateway_->pid(), SIGINT), 0);
  ASSERT_TRUE(gateway_->WaitForLine(std::regex(R"(second signal: draining now)"), &match));
  const HttpResult answer = running.get();
  EXPECT_EQ(answer.status, 200) << answer.body << answer.error;
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
}

// Connections the kernel had queued for the listener when the drain began (their requests
// sent) are served, not reset by the listener's closing.
TEST_F(GatewayTest, ConnectionsQueuedWhenTheDrainBeginsAreServedNotReset) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_EQ(::kill(gateway_->pid(), SIGSTOP), 0);  // accepts nothing: the kernel queues them
  const std::string request = MessagesRequestBytes(
      R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"queued"}]})");
  std::vector<std::unique_ptr<RawConnection>> queued;
  for (int i = 0; i < 6; ++i) {
    queued.push_back(std::make_unique<RawConnection>(port_));
    queued.back()->Send(request);
  }
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  ASSERT_EQ(::kill(gateway_->pid(), SIGCONT), 0);
  for (auto& c : queued) {
    const std::string answer = c->ReadToClose();
    EXPECT_EQ(OkResponses(answer), 1) << answer;
  }
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
}

// SIGTERM drains: no new connections, idle ones closed, and a stream in progress ends whole
// before the gateway exits by itself.
TEST_F(GatewayTest, SigtermLetsTheStreamsInProgressFinishAndTakesNoNewConnections) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "5"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  RawConnection idle(port_);   // a connection on which no request comes
  RawConnection fresh(port_);  // one whose first request comes just after the signal
  const auto kept_alive = AcceptedConnection(port_);  // one idle between two requests
  BackgroundStream stream(port_, "drained", 300, Words("drain", 50));
  ASSERT_TRUE(Eventually([&] { return stream.started(); }));
  // A request on its way in when the signal comes: its header and part of its body.
  const std::string upload = MessagesRequestBytes(
      R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"up"}]})");
  RawConnection uploading(port_);
  uploading.Send(upload.substr(0, upload.size() - 50));
  // A stream whose head went out before the signal, and a request pipelined behind it.
  RawConnection pipelined(port_);
  pipelined.Send(MessagesRequestBytes(
      R"({"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"p"}]})"));
  pipelined.ReadUntil("content_block_delta");
  pipelined.Send(upload);
  // A whole (not streamed) response in progress: its head goes out after the signal.
  RawConnection whole(port_);
  whole.Send(MessagesRequestBytes(
      R"({"model":"m","max_tokens":200,"ignore_eos":true,"messages":[{"role":"user","content":"w"}]})"));
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 3; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  EXPECT_TRUE(Eventually([&] { return HttpGet(port_, "/health").status == 0; }));  // refused
  kept_alive->ReadToClose();  // closed between requests at once: its client retries elsewhere
  EXPECT_TRUE(kept_alive->closed());
  fresh.Send(upload);
  const std::string first_answer = fresh.ReadToClose();
  EXPECT_EQ(OkResponses(first_answer), 1) << first_answer;
  idle.ReadToClose();  // closed once its moment for a first request has passed
  EXPECT_TRUE(idle.closed());
  uploading.Send(upload.substr(upload.size() - 50));
  const std::string answer = uploading.ReadToClose();
  EXPECT_EQ(OkResponses(answer), 1) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  const std::string both = pipelined.ReadToClose();
  ASSERT_EQ(OkResponses(both), 2) << "the pipelined request got no answer";
  EXPECT_NE(both.find("Connection: close", both.rfind("HTTP/1.1 200")), std::string::npos);
  EXPECT_TRUE(pipelined.closed());
  const std::string late_head = whole.ReadToClose();
  EXPECT_EQ(OkResponses(late_head), 1) << late_head;
  EXPECT_NE(late_head.find("Connection: close"), std::string::npos) << late_head;
  const HttpResult& streamed = stream.Finish();
  EXPECT_EQ(streamed.status, 200);
  int deltas = 0;
  bool stopped = false;
  for (const SseEvent& e : ParseSse(streamed.body)) {
    deltas += e.event == "content_block_delta";
    stopped |= e.event == "message_stop";
  }
  EXPECT_TRUE(stopped) << "the stream was cut: " << deltas << " deltas";
  EXPECT_EQ(deltas, 300);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);  // and then it exits, by itself
}

// The timeouts hold while the gateway drains: a client that sends half a head is cut off at the
// header timeout, not left to hold the drain (and the restart) to its end.
TEST_F(GatewayTest, AHalfSentRequestDoesNotHoldTheDrainToItsEnd) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--header-timeout", "1", "--drain-timeout", "60"}));
  RawConnection dribbling(port_);
  dribbling.Send("POST /v1/mess");
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  dribbling.ReadToClose();
  EXPECT_TRUE(dribbling.closed());
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(15)), 0);  // not the drain's 60 s
}

// A stream whose replica has sent its head (vLLM does as it queues a request) and no event yet
// when the drain's time is up: nothing went to the client, which gets the 503 a request admission
// still held gets, to send again, instead of a connection cut with no answer.
TEST_F(GatewayTest, AStreamWithNoEventYetWhenTheDrainTimeIsUpGetsA503) {
  FakeReplica queues([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    return a;  // and nothing more
  });
  ASSERT_NO_FATAL_FAILURE(
      StartGatewayBefore(queues, {"--drain-timeout", "1", "--stall-timeout", "0", "--access-log"}));
  auto running = std::async(std::launch::async, [this] {
    return HttpPost(
        port_, "/v1/messages",
        R"({"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]})");
  });
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 1; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  const HttpResult answer = running.get();
  EXPECT_EQ(answer.status, 503) << answer.body << answer.error;
  EXPECT_EQ(answer.header("retry-after"), "1");
  EXPECT_EQ(json::parse(answer.body).at("error").at("type").as_string(), "overloaded_error");
  EXPECT_NE(answer.body.find("before this request's answer began"), std::string::npos);
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/messages 503 [0-9.]+ms .*cut: drain time up)"), &match));
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
}

// A request its replica has not begun to answer when the drain's time is up (a long prefill, a
// queue) gets the same 503 to send it again, not a cut connection.
TEST_F(GatewayTest, ARequestWithNoAnswerYetWhenTheDrainTimeIsUpGetsA503) {
  FakeReplica holds([](const std::string&) { return FakeAnswer{}; });
  ASSERT_NO_FATAL_FAILURE(
      StartGatewayBefore(holds, {"--drain-timeout", "1", "--stall-timeout", "0", "--access-log"}));
  auto running = std::async(std::launch::async, [this] {
    return HttpPost(port_, "/v1/chat/completions",
                    R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]})");
  });
  ASSERT_TRUE(Eventually([&] { return holds.requests() == 1; }));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  const HttpResult answer = running.get();
  EXPECT_EQ(answer.status, 503) << answer.body << answer.error;
  EXPECT_EQ(answer.header("retry-after"), "1");
  EXPECT_EQ(answer.header("x-should-retry"), "");
  const json::value error = json::parse(answer.body).at("error");
  EXPECT_EQ(error.at("code").as_string(), "gateway_stopping") << answer.body;
  EXPECT_NE(error.at("message").as_string().find("before the replica answered this request"),
            std::string::npos)
      << answer.body;
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/chat/completions 503 [0-9.]+ms .*cut: drain time up)"), &match));
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace warden::testing
