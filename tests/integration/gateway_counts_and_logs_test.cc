// `warden serve`: what the gateway counts and logs: usage, the access log, the traffic log, request
// ids.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// A prompt vLLM counted only in part (it stops one token past the room left) is counted by the
// replica's count_tokens: the guess from the request's size (4 bytes a token) made this one, which
// fits, "too long", and Claude Code compacts on that instead of shortening its reply (found by
// review, against the simulator, whose words are longer than a real tokenizer's tokens).
TEST_F(GatewayTest, APromptCountedOnlyInPartIsCountedByTheReplica) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", {"--strict-max-tokens"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string body = json::serialize(json::object{
      {"model", "m"},
      {"max_tokens", 32000},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("w", 24000)}}}}});
  ASSERT_GT(body.size() / 4, 32768u);  // the guess alone would say "too long"
  const HttpResult count = HttpPost(port_, "/v1/messages/count_tokens", body);
  ASSERT_EQ(count.status, 200) << count.body;
  const int64_t tokens = json::parse(count.body).at("input_tokens").as_int64();
  ASSERT_LT(tokens, 32768);
  const HttpResult said = HttpPost(port_, "/v1/messages", body);
  EXPECT_EQ(said.status, 400);
  const std::string message(json::parse(said.body).at("error").at("message").as_string());
  EXPECT_TRUE(message.starts_with("input length and `max_tokens` exceed context limit: " +
                                  std::to_string(tokens) + " + 32000 > 32768"))
      << message;
}

// With --access-log, each request gets a line once answered: what it was, its status and time,
// and for a routed one where it went and what it cost.
TEST_F(GatewayTest, TheAccessLogSaysWhereEachRequestWentAndWhatItCost) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    a.bytes = JsonResponse(
        request.find("no-details") != std::string::npos
            ? R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3}})"
            : R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}})");
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--threads", "1", "--access-log"}));
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("logged"),
                     {{"X-Claude-Code-Session-Id", "s-logged"}})
                .status,
            200);
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/chat/completions 200 [0-9.]+ms id=[0-9a-f]{32} model=m )"
                 R"(key=claude-code-header conv=([0-9a-f]{8}) )"
                 R"(replica=0 route=new prompt=10 cached=4 output=3$)"),
      &match));
  // The conversation's hash, the same for its next turn (and not its key: a key may be a name).
  const std::string conversation = match[1];
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("logged"),
                     {{"X-Claude-Code-Session-Id", "s-logged"}})
                .status,
            200);
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex("key=claude-code-header conv=" + conversation + " replica=0 route=sticky "),
      &match));
  // A replica that does not say what it read from its cache (vLLM without
  // --enable-prompt-tokens-details): "cached=?", not the -1 that stands for it inside.
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("no-details")).status, 200);
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/chat/completions 200 .* prompt=10 cached=\? output=3$)"), &match));
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", R"({"model":"nobody","messages":[]})").status,
            404);
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/chat/completions 404 [0-9.]+ms id=\w+$)"), &match));
}

// The traffic log: a line per answered generation request, in the trace format `warden lab
// --trace` replays: a conversation's turns under one session id, with the delay since the turn
// before it ended, the prompt's size as the replica counted it, and block ids that follow the
// prompts' shared prefixes (the system prompt two conversations share, a conversation's history).
// Then the lab replays it.
TEST_F(GatewayTest, TheTrafficLogRecordsATraceTheLabReplays) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  const std::string trace_path = TempFile("traffic.jsonl", "");
  ASSERT_NO_FATAL_FAILURE(
      StartGateway({"--config", TempFile("traffic.yaml", "traffic_log_block: 16\n"),
                    "--traffic-log", trace_path}));
  const double before_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  Conversation a("trace-a", 200), b("trace-b", 200);
  std::vector<int> outputs;
  for (int t = 0; t < 3; ++t) {
    const Turn turn = a.Next(port_);
    ASSERT_EQ(turn.status, 200) << turn.body;
    outputs.push_back(json::parse(turn.body).at("usage").at("output_tokens").to_number<int>());
  }
  ASSERT_EQ(b.Next(port_).status, 200);
  const json::object model = Admin(port_);
  const int64_t prompt_tokens =
      Total(model, "cached_prompt_tokens") + Total(model, "computed_prompt_tokens");
  EXPECT_TRUE(Eventually([&] {
    return HttpGet(port_, "/metrics")
               .body.find("warden_traffic_log_lines_total{written=\"true\"} 4") !=
           std::string::npos;
  }));
  EXPECT_EQ(gateway_->Stop(), 0);  // every line written

  std::vector<TraceRequest> trace;
  std::string error;
  ASSERT_TRUE(ParseTrace(ReadFile(trace_path), &trace, &error)) << error;
  ASSERT_EQ(trace.size(), 4u);
  std::map<std::string, std::vector<const TraceRequest*>> by_session;
  int64_t input = 0;
  for (const TraceRequest& r : trace) {
    EXPECT_TRUE(std::regex_match(r.session_id, std::regex("[0-9a-f]{16}"))) << r.session_id;
    EXPECT_GE(r.timestamp_ms, before_ms - 1000);
    EXPECT_LT(r.timestamp_ms, before_ms + 600'000);
    by_session[r.session_id].push_back(&r);
    input += r.input_length;
  }
  EXPECT_EQ(input, prompt_tokens);  // the replica's counts
  ASSERT_EQ(by_session.size(), 2u);
  auto turns = by_session.begin()->second.size() == 3 ? by_session.begin()->second
                                                      : by_session.rbegin()->second;
  const TraceRequest& other =
      *(by_session.begin()->second.size() == 1 ? by_session.begin()->second
                                               : by_session.rbegin()->second)[0];
  ASSERT_EQ(turns.size(), 3u);
  std::sort(turns.begin(), turns.end(), [](const TraceRequest* x, const TraceRequest* y) {
    return x->timestamp_ms < y->timestamp_ms;
  });
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(turns[t]->output_length, outputs[t]);
    if (t == 0) {
      EXPECT_LT(turns[t]->delay_ms, 0);  // the conversation's first
      continue;
    }
    EXPECT_GE(turns[t]->delay_ms, 0);  // sent after the turn before it ended
    EXPECT_GT(turns[t]->input_length, turns[t - 1]->input_length);
    // The turn before it, but for its last block or two, leads this one.
    const auto& now = turns[t]->hash_ids;
    const auto& then = turns[t - 1]->hash_ids;
    ASSERT_GT(then.size(), 10u);
    ASSERT_GT(now.size(), then.size());
    EXPECT_TRUE(std::equal(then.begin(), then.end() - 2, now.begin())) << t;
  }
  // The other conversation shares the system prompt's blocks, not the first message's.
  const auto& first = turns[0]->hash_ids;
  ASSERT_GT(other.hash_ids.size(), 10u);
  const size_t shared =
      std::mismatch(first.begin(), first.end(), other.hash_ids.begin()).first - first.begin();
  EXPECT_GE(shared, 3u);
  EXPECT_LT(shared, first.size() / 2);

  const std::string out = ::testing::TempDir() + "/warden-replay-" + std::to_string(::getpid());
  auto lab = ChildProcess::Start({WARDEN_BIN, "lab", "--trace", trace_path, "--trace-block", "16",
                                  "--policy", "round-robin,warden-seed", "--quiet", "--out", out});
  ASSERT_NE(lab, nullptr);
  ASSERT_EQ(lab->Wait(std::chrono::seconds(60)), 0);
  const std::string results = ReadFile(out + "/results.csv");
  // One row per policy; the seed's rule keeps each conversation on its replica.
  EXPECT_NE(results.find("\n2,round-robin,"), std::string::npos) << results;
  EXPECT_TRUE(std::regex_search(results, std::regex("\n2,warden-seed,.*,100\\.0\n"))) << results;
}

// A turn its client stops mid-stream (Claude Code's Esc) is in the traffic log too: the engine read
// its prompt (as many tokens as the stream's start said) and made the tokens that came before the
// client left, so a replay loads the replica as the turn did. The conversation's next turn is
// timed from the cut and goes on from its blocks.
TEST_F(GatewayTest, TheTrafficLogRecordsATurnItsClientStopped) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20"));
  const std::string trace_path = TempFile("traffic-esc.jsonl", "");
  ASSERT_NO_FATAL_FAILURE(
      StartGateway({"--config", TempFile("traffic-esc.yaml", "traffic_log_block: 16\n"),
                    "--traffic-log", trace_path}));
  EscConversation esc(json::object{{"max_tokens", 500}, {"ignore_eos", true}});
  const auto turn = [&](bool stop) {
    const std::string text = esc.Turn(port_, stop);
    std::smatch said;  // the prompt's size, as message_start says it (computed, read, written)
    EXPECT_TRUE(std::regex_search(text, said, std::regex(R"(data: (\{"type":"message_start".*))")))
        << text;
    if (said.empty()) return int64_t{-1};
    const json::value start = json::parse(said[1].str());
    const json::object& usage = start.at("message").at("usage").as_object();
    return usage.at("input_tokens").as_int64() + usage.at("cache_read_input_tokens").as_int64() +
           usage.at("cache_creation_input_tokens").as_int64();
  };
  ASSERT_GT(turn(false), 0);
  const int64_t cut_prompt = turn(true);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  ASSERT_GT(turn(false), cut_prompt);
  EXPECT_EQ(gateway_->Stop(), 0);  // every line written

  std::vector<TraceRequest> trace;
  std::string error;
  ASSERT_TRUE(ParseTrace(ReadFile(trace_path), &trace, &error)) << error;
  ASSERT_EQ(trace.size(), 3u);
  std::sort(trace.begin(), trace.end(), [](const TraceRequest& x, const TraceRequest& y) {
    return x.timestamp_ms < y.timestamp_ms;
  });
  const TraceRequest& cut = trace[1];
  EXPECT_EQ(cut.session_id, trace[0].session_id);
  EXPECT_EQ(cut.session_id, trace[2].session_id);
  EXPECT_EQ(cut.input_length, cut_prompt);
  EXPECT_GE(cut.output_length, 1);
  EXPECT_LT(cut.output_length, 500);  // not the whole reply it would have had
  EXPECT_EQ(trace[0].output_length, 500);
  EXPECT_GE(cut.delay_ms, 0);
  EXPECT_GE(trace[2].delay_ms, 0);  // sent after the cut
  const auto& now = trace[2].hash_ids;
  const auto& then = cut.hash_ids;
  ASSERT_GT(then.size(), 10u);
  ASSERT_GT(now.size(), then.size());
  EXPECT_TRUE(std::equal(then.begin(), then.end() - 2, now.begin()));
}

// The same through OpenAI's API with vLLM's running usage on every chunk: the line's output is the
// running count the client had seen (chunks that carry usage are not counted as token events),
// its prompt the count on those chunks (found by review: logged with 1 token of output).
TEST_F(GatewayTest, TheTrafficLogRecordsAnOpenAiStreamStoppedWithItsRunningUsage) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20", {"--enable-force-include-usage"}));
  const std::string trace_path = TempFile("traffic-running.jsonl", "");
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--traffic-log", trace_path}));
  const json::object body{
      {"model", "m"},
      {"max_tokens", 500},
      {"ignore_eos", true},
      {"stream", true},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("run", 300)}}}}};
  std::string text;
  const HttpResult r =
      HttpStream(port_, "/v1/chat/completions", json::serialize(body),
                 {{"X-Session-ID", "running"}}, [&](std::string_view data) {
                   text.append(data);
                   return text.find("\"completion_tokens\":12") == std::string::npos;
                 });
  EXPECT_EQ(r.status, 200);
  std::smatch said;
  ASSERT_TRUE(std::regex_search(text, said, std::regex(R"("prompt_tokens":([0-9]+))"))) << text;
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  EXPECT_EQ(gateway_->Stop(), 0);
  std::vector<TraceRequest> trace;
  std::string error;
  ASSERT_TRUE(ParseTrace(ReadFile(trace_path), &trace, &error)) << error;
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace[0].input_length, std::stoi(said[1]));
  EXPECT_GE(trace[0].output_length, 12);
  EXPECT_LT(trace[0].output_length, 500);
}

// A whole OpenAI stream without usage (no stream_options.include_usage, the OpenAI SDK's
// default) is logged with the reply its token events made (it was logged with none).
TEST_F(GatewayTest, TheTrafficLogRecordsAStreamWithoutUsageByItsTokenEvents) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20"));
  const std::string trace_path = TempFile("traffic-no-usage.jsonl", "");
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--traffic-log", trace_path}));
  const json::object body{
      {"model", "m"},
      {"max_tokens", 50},
      {"ignore_eos", true},
      {"stream", true},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("nou", 100)}}}}};
  const HttpResult r = HttpPost(port_, "/v1/chat/completions", json::serialize(body),
                                {{"X-Session-ID", "no-usage"}});
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(r.body.find("\"usage\""), std::string::npos) << r.body;
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  EXPECT_EQ(gateway_->Stop(), 0);
  std::vector<TraceRequest> trace;
  std::string error;
  ASSERT_TRUE(ParseTrace(ReadFile(trace_path), &trace, &error)) << error;
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace[0].output_length, 50);
}

// How often `lower` occurs in `text`, whatever the case of `text`'s letters.
int CountCaseless(std::string text, const std::string& lower) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  int n = 0;
  for (size_t at = text.find(lower); at != std::string::npos; at = text.find(lower, at + 1)) ++n;
  return n;
}

// Every request has an id, followed from the client through the gateway to the replica and back:
// the client's own X-Request-Id when it is usable, else one the gateway makes; the replica gets
// exactly that one (vLLM names its request after it), the client gets it back once (the replica's
// echo is not doubled), an answer the gateway gives itself carries it too, and the access log
// says it.
TEST_F(GatewayTest, EveryRequestCarriesAnIdFromTheClientThroughTheReplicaAndBack) {
  std::mutex mu;
  std::vector<std::string> heads;  // what the replica got
  FakeReplica fake([&](const std::string& request) {
    std::lock_guard lock(mu);
    heads.push_back(request.substr(0, request.find("\r\n\r\n")));
    FakeAnswer a;
    // As vLLM with --enable-request-id-headers: it says an id of its own in the answer.
    a.bytes =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: the-replicas\r\n"
        "Request-Id: the-replicas-too\r\nContent-Length: 2\r\n\r\n{}";
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--threads", "1", "--access-log"}));
  const auto last_head = [&] {
    std::lock_guard lock(mu);
    return heads.empty() ? std::string() : heads.back();
  };
  const std::regex made(R"([0-9a-f]{32})");
  std::smatch match;

  // None from the client: the gateway's, the same to the replica, the client and the log.
  HttpResult answer = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("plain"));
  ASSERT_EQ(answer.status, 200);
  const std::string id = answer.header("x-request-id");
  EXPECT_TRUE(std::regex_match(id, made)) << id;
  EXPECT_EQ(CountCaseless(last_head(), "x-request-id:"), 1);
  EXPECT_NE(last_head().find("x-request-id: " + id + "\r\n"), std::string::npos) << last_head();
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex("POST /v1/chat/completions 200 [0-9.]+ms id=" + id + " model=m "), &match));
  const std::string second =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("plain")).header("x-request-id");
  EXPECT_TRUE(std::regex_match(second, made));
  EXPECT_NE(second, id);

  // The client's own, kept; the replica gets it once and the client once (read raw: a repeated
  // field would show).
  const std::string body = ScenarioRequest("traced");
  RawConnection raw(port_);
  raw.Send(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: trace-42\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  const std::string raw_answer = raw.ReadUntil("{}");
  EXPECT_EQ(CountCaseless(raw_answer, "x-request-id:"), 1) << raw_answer;
  EXPECT_NE(raw_answer.find("x-request-id: trace-42\r\n"), std::string::npos) << raw_answer;
  EXPECT_EQ(raw_answer.find("the-replicas"), std::string::npos);
  EXPECT_EQ(CountCaseless(last_head(), "x-request-id:"), 1);
  EXPECT_NE(last_head().find("x-request-id: trace-42\r\n"), std::string::npos) << last_head();
  EXPECT_TRUE(gateway_->WaitForLine(std::regex(R"(200 [0-9.]+ms id=trace-42 model=m )"), &match));

  // One that would break a log line's fields: replaced, and not passed on beside the new one.
  answer = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("spaced"),
                    {{"X-Request-Id", "two words"}});
  ASSERT_EQ(answer.status, 200);
  EXPECT_TRUE(std::regex_match(answer.header("x-request-id"), made));
  EXPECT_EQ(CountCaseless(last_head(), "x-request-id:"), 1);
  EXPECT_EQ(last_head().find("two words"), std::string::npos);

  // An answer the gateway gives itself.
  answer = HttpPost(port_, "/v1/chat/completions", R"({"model":"nobody","messages":[]})",
                    {{"X-Request-Id", "lost-1"}});
  EXPECT_EQ(answer.status, 404);
  EXPECT_EQ(answer.header("x-request-id"), "lost-1");
  EXPECT_EQ(answer.header("request-id"), "");

  // Anthropic's API says the id in request-id too, where its SDKs read it: relayed answers and the
  // gateway's own.
  answer = HttpPost(port_, "/v1/messages", ScenarioRequest("anthropic"));
  ASSERT_EQ(answer.status, 200);
  EXPECT_TRUE(std::regex_match(answer.header("request-id"), made));
  EXPECT_EQ(answer.header("request-id"), answer.header("x-request-id"));
  EXPECT_EQ(CountCaseless(last_head(), "request-id:"), 1)  // (x-request-id's)
      << "the replica's request is not told it twice";
  RawConnection anthropic_raw(port_);
  anthropic_raw.Send(
      ChatRequestBytes(ScenarioRequest("raw"))
          .replace(0, std::string("POST /v1/chat/completions").size(), "POST /v1/messages"));
  const std::string anthropic_answer = anthropic_raw.ReadUntil("{}");
  EXPECT_EQ(CountCaseless(anthropic_answer, "\nrequest-id:"), 1) << anthropic_answer;
  EXPECT_EQ(anthropic_answer.find("the-replicas-too"), std::string::npos) << anthropic_answer;
  answer = HttpPost(port_, "/v1/messages", R"({"model":"nobody","messages":[]})",
                    {{"X-Request-Id", "lost-2"}});
  EXPECT_EQ(answer.status, 404);
  EXPECT_EQ(answer.header("request-id"), "lost-2");
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/chat/completions 404 [0-9.]+ms id=lost-1$)"), &match));
}

// Requests that got no answer, or an error, are neither turns nor answers without usage, and their
// access-log line still says where they went: a 200 stream carrying only an error event, a client
// that leaves before any answer, one that leaves while an Anthropic-shaped error is read whole (a
// 499, not a failure of the replica), and a stream the replica cuts.
TEST_F(GatewayTest, RequestsWithoutAnAnswerAreNoTurnsAndTheirLogSaysWhereTheyWent) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    if (request.find("error-event") != std::string::npos) {
      const std::string events =
          "data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\ndata: [DONE]\n\n";
      a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                std::to_string(events.size()) + "\r\n\r\n" + events;
    } else if (request.find("stalled-error") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
          "Content-Length: 500\r\n\r\n{\"error\"";
    } else if (request.find("cut-opening") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 900\r\n\r\n"
          "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
          "{\"input_tokens\":10,\"output_tokens\":1}}}\n\n";
      a.close_after_ms = 0;
    } else if (request.find("held-stream") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 900\r\n\r\n"
          "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    } else if (request.find("cut-stream") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 500\r\n\r\n"
          "data: {\"choices\":[]}\n\n";
      a.close_after_ms = 0;
    } else if (request.find("no-answer") == std::string::npos) {
      a.bytes = JsonResponse(
          R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}})");
    }  // else held: no answer
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--threads", "1", "--access-log"}));
  const Headers session = {{"X-Claude-Code-Session-Id", "s-quiet"}};
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("first"), session).status, 200);
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("error-event"), session).status,
            200);
  std::smatch match;
  const auto leave_after_sending = [&](const std::string& bytes) {
    const int before = fake.requests();
    RawConnection client(port_);
    client.Send(bytes);
    ASSERT_TRUE(Eventually([&] { return fake.requests() == before + 1; }));
  };  // the client's connection closes here
  leave_after_sending(ChatRequestBytes(ScenarioRequest("no-answer")));
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(
          R"(POST /v1/chat/completions 499 [0-9.]+ms id=\S+ model=m key=\S+( conv=[0-9a-f]{8})? replica=0 route=)"),
      &match));
  const std::string error_body = ScenarioRequest("stalled-error");
  leave_after_sending("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                      std::to_string(error_body.size()) + "\r\n\r\n" + error_body);
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(
          R"(POST /v1/messages 499 [0-9.]+ms id=\S+ model=m key=\S+( conv=[0-9a-f]{8})? replica=0 route=)"),
      &match));
  RawConnection cut(port_);
  cut.Send(ChatRequestBytes(ScenarioRequest("cut-stream")));
  EXPECT_TRUE(cut.ReadToClose().starts_with("HTTP/1.1 200"));
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(
          R"(POST /v1/chat/completions 200 [0-9.]+ms id=\S+ model=m key=\S+( conv=[0-9a-f]{8})? replica=0 route=\S+ cut)"),
      &match));
  // An Anthropic stream cut after its opening: the opening's output count is no total, so none
  // is logged.
  const std::string opening_body = ScenarioRequest("cut-opening");
  RawConnection cut_opening(port_);
  cut_opening.Send("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                   std::to_string(opening_body.size()) + "\r\n\r\n" + opening_body);
  EXPECT_TRUE(cut_opening.ReadToClose().starts_with("HTTP/1.1 200"));
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(
          R"(POST /v1/messages 200 [0-9.]+ms id=\S+ model=m key=\S+( conv=[0-9a-f]{8})? replica=0 route=\S+ cut$)"),
      &match));
  // A client that leaves in the middle of a stream: said as such.
  {
    RawConnection leaving(port_);
    leaving.Send(ChatRequestBytes(ScenarioRequest("held-stream")));
    leaving.ReadUntil("\n\n");
  }
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(
          R"(POST /v1/chat/completions 200 [0-9.]+ms id=\S+ model=m key=\S+( conv=[0-9a-f]{8})? replica=0 route=\S+ left( ttft=\S+)?$)"),
      &match));
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  const json::object model = Admin(port_);
  EXPECT_EQ(model.at("follow_up_turns").as_int64(), 0);  // the error event was no turn
  EXPECT_EQ(Total(model, "usage_unknown"), 0);
  // The cut streams; not the error the client left, nor the stream it left.
  EXPECT_EQ(Total(model, "failed"), 2);
}

// A replica whose prefix cache reads nothing of the turns that come back to it (as when the
// prompt's head changes every turn): the admin API shows it, and the log says why once.
TEST_F(GatewayTest, TurnsThatReadNoHistoryFromTheCacheAreShownAndExplained) {
  std::atomic<int> answered{0};
  FakeReplica fake([&](const std::string& request) {
    // The prompt grows with the request; nothing of it read from the cache, which vLLM says by
    // leaving the count out (after a first answer that gave one).
    const std::string details =
        answered++ == 0 ? R"(,"prompt_tokens_details":{"cached_tokens":0})" : "";
    FakeAnswer a;
    a.bytes =
        JsonResponse(R"({"choices":[],"usage":{"prompt_tokens":)" + std::to_string(request.size()) +
                     R"(,"completion_tokens":3)" + details + "}}");
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--threads", "1"}));
  std::string history;
  for (int turn = 0; turn < 22; ++turn) {
    history += Words("turn" + std::to_string(turn), 20) + " ";
    const json::object body{
        {"model", "m"},
        {"messages", json::array{json::object{{"role", "user"}, {"content", history}}}}};
    ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", json::serialize(body),
                       {{"X-Claude-Code-Session-Id", "head-changes"}})
                  .status,
              200);
  }
  const json::object model = Admin(port_);
  EXPECT_EQ(model.at("replicas").at(0).at("returning_turns").as_int64(), 21);
  EXPECT_GT(model.at("replicas").at(0).at("history_tokens").as_int64(), 0);
  EXPECT_EQ(model.at("replicas").at(0).at("history_cached_tokens").as_int64(), 0);
  EXPECT_EQ(model.at("history_read_from_cache").as_double(), 0);
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("read only 0 % of that turn's prompt"), &match));
}

// A usage with prompt tokens but no cached share (vLLM without --enable-prompt-tokens-details, or
// with none cached) counts as computed, and as such in cache_unreported; one with it in
// cache_reported.
TEST_F(GatewayTest, PromptTokensWithoutACachedShareCountAsComputedAndUnreported) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    a.bytes = JsonResponse(
        request.find("details") != std::string::npos
            ? R"({"usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}})"
            : R"({"usage":{"prompt_tokens":10,"completion_tokens":1}})");
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (const char* scenario : {"plain", "plain", "details"})
    ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest(scenario)).status, 200);
  const json::object replica = Admin(port_).at("replicas").at(0).as_object();
  EXPECT_EQ(replica.at("cache_unreported").as_int64(), 2);
  EXPECT_EQ(replica.at("cache_reported").as_int64(), 1);
  EXPECT_EQ(replica.at("cached_prompt_tokens").as_int64(), 4);
  EXPECT_EQ(replica.at("computed_prompt_tokens").as_int64(), 26);
  EXPECT_EQ(replica.at("usage_unknown").as_int64(), 0);
}

TEST_F(GatewayTest, CachedAndComputedTotalsEqualTheUsageTheEngineReported) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  int64_t cached = 0, prompt = 0;
  // Anthropic streams: the usage is in the final message_delta (input_tokens excludes the tokens
  // read from the cache and those written to it).
  for (int t = 0; t < 4; ++t) {
    json::object body{
        {"model", "m"},
        {"max_tokens", 20},
        {"stream", true},
        {"messages",
         json::array{json::object{{"role", "user"}, {"content", Words("acct", 200 + 30 * t)}}}}};
    const HttpResult r = HttpPost(port_, "/v1/messages", json::serialize(body),
                                  {{"X-Claude-Code-Session-Id", "acct"}});
    ASSERT_EQ(r.status, 200);
    for (const SseEvent& e : ParseSse(r.body)) {
      if (e.event != "message_delta") continue;
      const auto usage = json::parse(e.data).at("usage");
      cached += usage.at("cache_read_input_tokens").as_int64();
      EXPECT_GT(usage.at("cache_creation_input_tokens").as_int64(), 0);
      prompt += usage.at("input_tokens").as_int64() +
                usage.at("cache_read_input_tokens").as_int64() +
                usage.at("cache_creation_input_tokens").as_int64();
    }
  }
  // OpenAI, whole responses and streams with include_usage.
  int running_usage_chunks = 0;
  for (int t = 0; t < 4; ++t) {
    json::object body{
        {"model", "m"},
        {"max_tokens", 8},
        {"stream", t % 2 == 1},
        {"messages", json::array{json::object{{"role", "user"}, {"content", Words("oai", 150)}}}}};
    // vLLM's continuous usage puts the usage so far in every chunk; only the last has the cache's.
    if (t % 2 == 1)
      body["stream_options"] =
          json::object{{"include_usage", true}, {"continuous_usage_stats", t == 3}};
    const HttpResult r =
        HttpPost(port_, "/v1/chat/completions", json::serialize(body), {{"X-Session-Id", "oai"}});
    ASSERT_EQ(r.status, 200);
    json::value usage;
    if (t % 2 == 0) {
      usage = json::parse(r.body).at("usage");
    } else {
      for (const SseEvent& e : ParseSse(r.body)) {
        if (e.data == "[DONE]" || !json::parse(e.data).as_object().contains("usage")) continue;
        usage = json::parse(e.data).at("usage");
        running_usage_chunks += !usage.as_object().contains("prompt_tokens_details");
      }
    }
    cached += usage.at("prompt_tokens_details").at("cached_tokens").as_int64();
    prompt += usage.at("prompt_tokens").as_int64();
  }
  ASSERT_GT(cached, 0);
  EXPECT_GE(running_usage_chunks, 8);
  // Answers that carry no usage by nature (count_tokens, other paths, errors) are not "usage
  // unknown".
  EXPECT_EQ(HttpPost(port_, "/v1/messages/count_tokens",
                     R"({"model":"m","messages":[{"role":"user","content":"hi"}]})")
                .status,
            200);
  EXPECT_EQ(HttpPost(port_, "/tokenize", R"({"model":"m","prompt":"hi"})").status, 404);
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", R"({"model":"m","max_tokens":0})").status, 400);
  const json::object model = Admin(port_);
  EXPECT_EQ(Total(model, "cached_prompt_tokens"), cached);
  EXPECT_EQ(Total(model, "computed_prompt_tokens"), prompt - cached);
  EXPECT_EQ(Total(model, "usage_unknown"), 0);
  EXPECT_EQ(Total(model, "cache_unreported"), 0);
  EXPECT_EQ(model.at("history").at("cached_tokens").as_int64(), cached);
  EXPECT_EQ(model.at("totals").at("cached_prompt_tokens").as_int64(), cached);
}

// A replica whose usage no engine could report (past any context) is not believed: the turn counts
// as one whose usage is unknown, and the working set stays a count of tokens, never negative.
TEST_F(GatewayTest, UsageNoEngineCouldReportIsNotBelieved) {
  FakeReplica fake([](const std::string&) {
    FakeAnswer a;
    a.bytes = JsonResponse(
        R"({"choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],)"
        R"("usage":{"prompt_tokens":10,"completion_tokens":500000000,"total_tokens":0,)"
        R"("prompt_tokens_details":{"cached_tokens":400000000}}})");
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  EXPECT_EQ(
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "absurd"}})
          .status,
      200);
  const json::object model = Admin(port_);
  const json::value& replica = model.at("replicas").at(0);
  EXPECT_EQ(replica.at("usage_unknown").as_int64(), 1) << replica;
  EXPECT_EQ(replica.at("cached_prompt_tokens").as_int64(), 0) << replica;
  EXPECT_GE(replica.at("active_context_tokens").as_int64(), 0) << replica;
  EXPECT_LT(replica.at("active_context_tokens").as_int64(), 100000) << replica;
}

// A turn its client stops (Claude Code's Esc) after its stream began: the replica read its prompt,
// and the stream's start said what the cache gave (an Anthropic message_start with the cache's
// fields, as recent vLLM sends it): its prompt tokens are counted, cached and computed as said
// (found by review: they were counted nowhere, below the engine's own count).
TEST_F(GatewayTest, ATurnItsClientStoppedCountsThePromptItsStartSplit) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  EscConversation esc(json::object{{"max_tokens", 500}, {"ignore_eos", true}});
  esc.Turn(port_, /*stop=*/false);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  const json::object before = Admin(port_);
  const std::string text = esc.Turn(port_, /*stop=*/true);
  std::smatch said;
  ASSERT_TRUE(std::regex_search(text, said, std::regex(R"(data: (\{"type":"message_start".*))")));
  const json::value start = json::parse(said[1].str());
  const json::object& usage = start.at("message").at("usage").as_object();
  const int64_t cached = usage.at("cache_read_input_tokens").as_int64();
  const int64_t computed =
      usage.at("input_tokens").as_int64() + usage.at("cache_creation_input_tokens").as_int64();
  ASSERT_GT(cached, 0);  // its history, read again
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  const json::object after = Admin(port_);
  EXPECT_EQ(Total(after, "cached_prompt_tokens") - Total(before, "cached_prompt_tokens"), cached);
  EXPECT_EQ(Total(after, "computed_prompt_tokens") - Total(before, "computed_prompt_tokens"),
            computed);
  EXPECT_EQ(Total(after, "usage_unknown"), Total(before, "usage_unknown"));
}

// A vLLM started without --enable-auto-tool-choice refuses every Claude Code turn (they all offer
// tools): the client gets its 400 in Anthropic's shape, and the log says once how to start vLLM.
TEST_F(GatewayTest, AReplicaThatRefusesToolsIsExplainedOnceInTheLog) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", {"--no-auto-tool-choice"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string body =
      R"({"model":"m","max_tokens":4,"tools":[{"name":"Bash","input_schema":{}}],)"
      R"("messages":[{"role":"user","content":"hello"}]})";
  for (int i = 0; i < 2; ++i) {
    const HttpResult r = HttpPost(port_, "/v1/messages", body);
    EXPECT_EQ(r.status, 400);
    const json::value error = json::parse(r.body);
    EXPECT_EQ(error.at("type"), "error") << r.body;
    EXPECT_NE(error.at("error").at("message").as_string().find("--enable-auto-tool-choice"),
              std::string::npos);
  }
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(
      std::regex("refuses requests that offer tools.*--enable-auto-tool-choice"), &match));
  EXPECT_EQ(gateway_->Stop(), 0);
  const auto& lines = gateway_->lines();
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const std::string& line) {
                            return line.find("refuses requests that offer tools") !=
                                   std::string::npos;
                          }),
            1);
}

// The routing settings in effect are in /metrics too, as a PATCH leaves them: a change in the
// placements can be lined up with the change that made it.
TEST_F(GatewayTest, TheMetricsSayTheRoutingSettingsAPatchLeaves) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::string metrics = HttpGet(port_, "/metrics").body;
  EXPECT_NE(metrics.find("warden_affinity{model=\"m\"} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("warden_overflow_limit{model=\"m\",auto=\"true\"} 8\n"),
            std::string::npos);
  EXPECT_NE(
      metrics.find("warden_routing_info{model=\"m\",policy=\"warden-seed\",admission=\"off\"} 1\n"),
      std::string::npos);
  ASSERT_EQ(
      HttpCall(
          port_, "PATCH", "/warden/v1/models/m",
          R"({"affinity": false, "overflow_limit": 3, "policy": "warden", "admission": "recent:4"})")
          .status,
      200);
  metrics = HttpGet(port_, "/metrics").body;
  EXPECT_NE(metrics.find("warden_affinity{model=\"m\"} 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("warden_overflow_limit{model=\"m\",auto=\"false\"} 3\n"),
            std::string::npos);
  EXPECT_NE(
      metrics.find("warden_routing_info{model=\"m\",policy=\"warden\",admission=\"recent:4\"} 1\n"),
      std::string::npos);
}

}  // namespace
}  // namespace warden::testing

namespace warden::testing {
namespace {

// The requests a fake OpenTelemetry collector got, and their spans (OTLP/JSON).
class FakeCollector {
 public:
  FakeCollector()
      : server_([this](const std::string& request) {
          std::lock_guard lock(mu_);
          requests_.push_back(request);
          return FakeAnswer{.bytes = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"};
        }) {}
  std::string url() const { return server_.url(); }
  // Every span sent so far.
  std::vector<json::object> Spans() {
    std::lock_guard lock(mu_);
    std::vector<json::object> spans;
    for (const std::string& r : requests_) {
      const json::value doc = json::parse(r.substr(r.find("\r\n\r\n") + 4));
      for (const json::value& rs : doc.at("resourceSpans").as_array())
        for (const json::value& ss : rs.at("scopeSpans").as_array())
          for (const json::value& s : ss.at("spans").as_array()) spans.push_back(s.as_object());
    }
    return spans;
  }
  std::string FirstRequestLine() {
    std::lock_guard lock(mu_);
    return requests_.empty() ? "" : requests_[0].substr(0, requests_[0].find("\r\n"));
  }

 private:
  std::mutex mu_;
  std::vector<std::string> requests_;
  FakeReplica server_;
};

// A span attribute's value as text ("" if the span has none of that key).
std::string Attribute(const json::object& span, std::string_view key) {
  for (const json::value& a : span.at("attributes").as_array()) {
    if (a.at("key").as_string() != key) continue;
    const json::object& v = a.at("value").as_object();
    if (v.contains("stringValue")) return std::string(v.at("stringValue").as_string());
    if (v.contains("intValue")) return std::string(v.at("intValue").as_string());
    return json::serialize(v.at("doubleValue"));
  }
  return "";
}

// With otlp_traces_endpoint, each request relayed is a span in the client's trace (its
// traceparent), and the replica gets the gateway's span as its parent; a request without one
// starts a trace; a trace the client does not record is passed on unrecorded, with no span.
TEST_F(GatewayTest, RelayedRequestsAreSpansInTheClientsTraceWhichTheReplicaJoins) {
  constexpr std::string_view kTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
  constexpr std::string_view kClientSpan = "00f067aa0ba902b7";
  std::mutex mu;
  std::vector<std::string> replica_traceparents;  // as the replica got them, in order
  FakeReplica replica([&](const std::string& request) {
    std::smatch m;
    std::lock_guard lock(mu);
    replica_traceparents.push_back(
        std::regex_search(request, m, std::regex("\r\ntraceparent: ([^\r]*)\r\n")) ? m[1].str()
                                                                                   : "");
    const std::string body =
        R"({"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":)"
        R"("assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":40,)"
        R"("completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":32}}})";
    return FakeAnswer{.bytes =
                          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          "Content-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body};
  });
  FakeCollector collector;
  ASSERT_NO_FATAL_FAILURE(
      StartGatewayBefore(replica, {"--otlp-traces-endpoint", collector.url() + "/v1/traces"}));
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hello"}]})";
  const std::string client_parent = fmt::format("00-{}-{}-01", kTrace, kClientSpan);
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", body,
                     {{"x-session-id", "traced"}, {"traceparent", client_parent}})
                .status,
            200);
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", body, {{"x-session-id", "untraced"}}).status,
            200);
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", body,
                     {{"x-session-id", "unsampled"},
                      {"traceparent", fmt::format("00-{}-{}-00", kTrace, kClientSpan)}})
                .status,
            200);
  ASSERT_TRUE(Eventually([&] { return collector.Spans().size() >= 2; }));
  EXPECT_EQ(collector.FirstRequestLine(), "POST /v1/traces HTTP/1.1");
  std::vector<std::string> sent;
  {
    std::lock_guard lock(mu);
    sent = replica_traceparents;
  }
  ASSERT_EQ(sent.size(), 3u);
  const std::vector<json::object> spans = collector.Spans();
  ASSERT_EQ(spans.size(), 2u);

  // (Each span is sent as its request ends, which may follow the client's next request.)
  const bool first_is_traced = spans[0].at("traceId").as_string() == kTrace;
  // The client's trace: the replica's parent is the gateway's span, whose parent is the client's.
  const json::object& traced = spans[first_is_traced ? 0 : 1];
  EXPECT_EQ(traced.at("traceId").as_string(), kTrace);
  EXPECT_EQ(traced.at("parentSpanId").as_string(), kClientSpan);
  EXPECT_EQ(sent[0], fmt::format("00-{}-{}-01", kTrace, traced.at("spanId").as_string()));
  EXPECT_EQ(traced.at("name").as_string(), "POST /v1/chat/completions");
  EXPECT_EQ(Attribute(traced, "http.response.status_code"), "200");
  EXPECT_EQ(Attribute(traced, "warden.replica"), "0");
  EXPECT_EQ(Attribute(traced, "warden.route"), "new");
  EXPECT_EQ(Attribute(traced, "gen_ai.request.model"), "m");
  EXPECT_EQ(Attribute(traced, "gen_ai.usage.input_tokens"), "40");
  EXPECT_EQ(Attribute(traced, "warden.cached_tokens"), "32");
  EXPECT_EQ(Attribute(traced, "gen_ai.usage.output_tokens"), "2");
  EXPECT_FALSE(traced.contains("status"));  // no error
  EXPECT_LE(std::stoll(std::string(traced.at("startTimeUnixNano").as_string())),
            std::stoll(std::string(traced.at("endTimeUnixNano").as_string())));

  // No traceparent: a trace of its own, begun by the gateway's span.
  const json::object& own = spans[first_is_traced ? 1 : 0];
  EXPECT_NE(own.at("traceId").as_string(), kTrace);
  EXPECT_FALSE(own.contains("parentSpanId"));
  EXPECT_EQ(sent[1], fmt::format("00-{}-{}-01", own.at("traceId").as_string(),
                                 own.at("spanId").as_string()));

  // Unsampled: passed on as such (the gateway's span id, the client's flag), and never sent.
  const std::regex unsampled(fmt::format("00-{}-[0-9a-f]{{16}}-00", kTrace));
  EXPECT_TRUE(std::regex_match(sent[2], unsampled)) << sent[2];
  EXPECT_NE(sent[2].substr(36, 16), kClientSpan);
  EXPECT_TRUE(Eventually(
      [&] { return SimMetric(port_, "warden_trace_spans_total", "exported", "true") == 2; }));
  EXPECT_EQ(collector.Spans().size(), 2u);

  // A span not sent yet when the gateway stops goes as it stops.
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", body, {{"x-session-id", "last"}}).status, 200);
  ASSERT_EQ(gateway_->Stop(), 0);
  EXPECT_EQ(collector.Spans().size(), 3u);
}

// Without otlp_traces_endpoint the client's traceparent goes to the replica as it came.
TEST_F(GatewayTest, WithoutTracesTheClientsTraceparentGoesOnAsItCame) {
  std::mutex mu;
  std::string got;
  FakeReplica replica([&](const std::string& request) {
    std::smatch m;
    std::lock_guard lock(mu);
    if (std::regex_search(request, m, std::regex("\r\ntraceparent: ([^\r]*)\r\n"))) got = m[1];
    return FakeAnswer{.bytes = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"};
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(replica));
  const std::string parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", R"({"model":"m","messages":[]})",
                     {{"traceparent", parent}})
                .status,
            200);
  std::lock_guard lock(mu);
  EXPECT_EQ(got, parent);
}

}  // namespace
}  // namespace warden::testing

namespace warden::testing {
namespace {

// The edges of traces: the client's tracestate kept with its trace and dropped with a trace of
// the gateway's own (W3C Trace Context, section 4.3); a path that is not UTF-8 escaped in the
// span, so that the batch stays valid JSON (found by review: the collector refused the whole
// batch); an answer that breaks off after its head went out is an error span all the same.
TEST_F(GatewayTest, TracesKeepToTheSpecificationAndMarkBrokenAnswers) {
  std::mutex mu;
  std::vector<std::string> got;  // the requests as the replica got them, in order
  FakeReplica replica([&](const std::string& request) {
    {
      std::lock_guard lock(mu);
      got.push_back(request);
    }
    if (request.find("x-session-id: breaks") != std::string::npos) {
      return FakeAnswer{.bytes =
                            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}"
                            "\n\n",
                        .close_after_ms = 0};  // and no [DONE]
    }
    return FakeAnswer{.bytes = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"};
  });
  FakeCollector collector;
  ASSERT_NO_FATAL_FAILURE(
      StartGatewayBefore(replica, {"--otlp-traces-endpoint", collector.url() + "/v1/traces"}));
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hello"}]})";
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", body,
                     {{"x-session-id", "joins"},
                      {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                      {"tracestate", "rojo=00f067aa0ba902b7"}})
                .status,
            200);
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", body,
                     {{"x-session-id", "starts"},
                      {"traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"},
                      {"tracestate", "congo=t61rcWkgMzE"}})
                .status,
            200);
  const HttpResult odd = HttpPost(port_, "/v1/odd\xff\xfe", body, {{"x-session-id", "odd"}});
  const HttpResult broken =
      HttpPost(port_, "/v1/chat/completions",
               R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})",
               {{"x-session-id", "breaks"}});
  EXPECT_EQ(broken.status, 200);
  ASSERT_TRUE(Eventually([&] {
    return SimMetric(port_, "warden_trace_spans_total", "exported", "true") +
               SimMetric(port_, "warden_trace_spans_total", "exported", "false") >=
           4;
  }));
  EXPECT_EQ(SimMetric(port_, "warden_trace_spans_total", "exported", "false"), 0);
  const std::vector<json::object> spans = collector.Spans();  // (parsed: valid UTF-8 JSON)
  ASSERT_EQ(spans.size(), 4u);
  std::vector<std::string> requests;
  {
    std::lock_guard lock(mu);
    requests = got;
  }
  const auto field = [](const std::string& request, const std::string& name) {
    std::smatch m;
    return std::regex_search(request, m, std::regex("\r\n" + name + ": ([^\r]*)\r\n")) ? m[1].str()
                                                                                       : "";
  };
  ASSERT_GE(requests.size(), 3u);
  EXPECT_EQ(field(requests[0], "tracestate"), "rojo=00f067aa0ba902b7");  // its trace: kept
  EXPECT_TRUE(
      field(requests[0], "traceparent").starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
  EXPECT_EQ(field(requests[1], "tracestate"), "");  // a trace of the gateway's: dropped
  EXPECT_FALSE(
      field(requests[1], "traceparent").starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736"));
  bool odd_seen = false, broken_seen = false;
  for (const json::object& span : spans) {
    const std::string name(span.at("name").as_string());
    if (name.starts_with("POST /v1/odd")) {
      odd_seen = true;
      EXPECT_EQ(Attribute(span, "http.response.status_code"), std::to_string(odd.status));
    }
    if (Attribute(span, "warden.outcome") == "broke off") {
      broken_seen = true;
      EXPECT_EQ(Attribute(span, "http.response.status_code"), "200");
      EXPECT_EQ(span.at("status").at("code"), 2);  // an error
    }
  }
  EXPECT_TRUE(odd_seen);
  EXPECT_TRUE(broken_seen);
}

}  // namespace
}  // namespace warden::testing
