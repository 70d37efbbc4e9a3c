// `warden serve`: HTTP at the edges: malformed and unusual requests, error shapes, compression,
// connection limits.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// Connections that send no request head within --header-timeout are closed, whether silent,
// dribbling a head a byte at a time, or kept alive after an answer; others are served meanwhile.
TEST_F(GatewayTest, ConnectionsThatSendNoHeadInTimeAreClosed) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--header-timeout", "1"}));
  RawConnection silent(port_), dribbling(port_), kept_alive(port_);
  dribbling.Send("POST /v1/mess");
  kept_alive.Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_NE(kept_alive.ReadUntil("\r\n\r\n").find("HTTP/1.1 200"), std::string::npos);
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);
  // Closed within a sweep or two of the timeout: before RawConnection's 5 s of silence.
  for (RawConnection* c : {&silent, &dribbling, &kept_alive}) {
    c->ReadToClose();
    EXPECT_TRUE(c->closed());
  }
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);
}

// A client that closes in the middle of its request's head (a probe, a client gone) is answered
// in case it still reads, and logged, but is no error the gateway answered: warden_error_answers
// counts the 400 of a head it read whole and refused, not these.
TEST_F(GatewayTest, AHeadItsClientCutOffIsLoggedButNoErrorAnswered) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--access-log"}));
  const double before = SimMetric(port_, "warden_error_answers_total", "status", "400");
  std::smatch line;
  // One at a time: the lines of connections served at once may come in either order.
  const std::pair<const char*, const char*> cut_off[] = {
      {"G", R"(- - 400 .*refused: .*the client cut its head off)"},
      {"GET /health HTTP/1.1\r\n", R"(GET /health 400 .*refused: .*the client cut its head off)"},
      {"POST /v1/messages HTTP/1.1\r\nHo",
       R"(POST /v1/messages 400 .*refused: .*the client cut its head off)"}};
  for (const auto& [opening, logged] : cut_off) {
    RawConnection(port_).Send(opening);  // closed at once
    EXPECT_TRUE(gateway_->WaitForLine(std::regex(logged), &line)) << logged;
  }
  // One that leaves in the middle of its body is logged as a 499, as one that leaves before its
  // answer (found by review: it left no line).
  RawConnection(port_).Send(
      "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{\"model\"");
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/messages 499 [0-9.]+ms left in the middle of its body)"), &line));
  RawConnection malformed(port_);
  malformed.Send(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n");
  EXPECT_NE(malformed.ReadToClose().find("HTTP/1.1 400"), std::string::npos);
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/chat/completions 400 [0-9.]+ms id=[0-9a-f]+ refused: )"), &line));
  EXPECT_EQ(SimMetric(port_, "warden_error_answers_total", "status", "400"), before + 1);
}

// What plain HTTP clients do at the edges of the protocol: each request gets its own answer, and
// nothing takes the gateway down.
// A replica's response head may be as large as a client's request head (64 KiB), not Beast's
// default 8 KiB: a 9 KB field passes.
TEST_F(GatewayTest, AReplicasLongResponseHeaderPasses) {
  const std::string cookie(9000, 'c');
  FakeReplica fake([&](const std::string&) {
    const std::string body = R"({"ok":true})";
    return FakeAnswer{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Long: " + cookie +
                      "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body};
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  const HttpResult r = HttpPost(port_, "/v1/chat/completions", R"({"model":"m","messages":[]})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-long"), cookie);
}

TEST_F(GatewayTest, HttpEdgeCasesGetTheirOwnAnswerAndNothingCrashes) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string body =
      R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hello there"}]})";
  const std::string stream_body =
      R"({"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]})";
  const auto post = [](std::string_view version, std::string_view extra, std::string_view b) {
    return "POST /v1/messages " + std::string(version) + "\r\nHost: 127.0.0.1\r\n" +
           "Content-Type: application/json\r\nContent-Length: " + std::to_string(b.size()) +
           "\r\n" + std::string(extra) + "\r\n";
  };

  // Expect: 100-continue (curl sends it for bodies over 1 MB): one interim answer from the
  // gateway, then the request's own; the replica's connection is not left with a stray answer
  // that the next request would receive.
  for (int i = 0; i < 3; ++i) {
    RawConnection c(port_);
    c.Send(post("HTTP/1.1", "Expect: 100-continue\r\nConnection: close\r\n", body));
    ASSERT_NE(c.ReadUntil("\r\n\r\n").find("HTTP/1.1 100 Continue"), std::string::npos);
    c.Send(body);
    const std::string answer = c.ReadToClose();
    EXPECT_TRUE(c.closed());
    EXPECT_EQ(answer.find("100 Continue", 20), std::string::npos) << answer;
    EXPECT_NE(answer.find("HTTP/1.1 200 OK"), std::string::npos) << answer;
    EXPECT_NE(answer.find(R"("type":"message")"), std::string::npos) << answer;
    const HttpResult next = HttpPost(port_, "/v1/messages", stream_body);
    EXPECT_EQ(next.status, 200);
    EXPECT_EQ(next.header("content-type").rfind("text/event-stream", 0), 0u) << next.body;
  }

  // HTTP/1.0 knows no chunks: a stream ends with the connection instead.
  {
    RawConnection c(port_);
    c.Send(post("HTTP/1.0", "", stream_body) + stream_body);
    const std::string answer = c.ReadToClose();
    EXPECT_TRUE(c.closed());
    EXPECT_NE(answer.find("HTTP/1.1 200 OK"), std::string::npos) << answer;
    EXPECT_EQ(answer.find("Transfer-Encoding"), std::string::npos) << answer;
    EXPECT_NE(answer.find("\r\n\r\nevent: message_start"), std::string::npos) << answer;
    EXPECT_NE(answer.find("event: message_stop"), std::string::npos) << answer;
  }

  // HTTP/1.0 with keep-alive (ApacheBench -k): the answer says the connection stays open, and it
  // does: a second request on it is answered.
  {
    RawConnection c(port_);
    for (int i = 1; i <= 2; ++i) {
      c.Send(post("HTTP/1.0", "Connection: keep-alive\r\n", body) + body);
      const std::string answers = c.ReadUntil(R"("output_tokens")", i);
      EXPECT_FALSE(c.closed()) << answers;
      const size_t head = answers.rfind("HTTP/1.1 200 OK\r\n");
      ASSERT_NE(head, std::string::npos) << answers;
      EXPECT_NE(answers.find("Connection: keep-alive\r\n", head), std::string::npos) << answers;
    }
    // The gateway's own answers too.
    c.Send("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    const std::string answers = c.ReadUntil("\r\n\r\n", 3);  // the third answer's head
    EXPECT_NE(answers.find("Connection: keep-alive", answers.rfind("HTTP/1.")), std::string::npos)
        << answers;
    c.Send(post("HTTP/1.0", "Connection: keep-alive\r\n", body) + body);
    EXPECT_NE(c.ReadUntil(R"("output_tokens")", 3).rfind(R"("output_tokens")"), std::string::npos);
    EXPECT_FALSE(c.closed());
  }

  // A chunked body whose lines end in a bare LF: refused at once (400, in the API's shape), not
  // waited on for a CRLF that never comes.
  {
    char size[17];
    std::snprintf(size, sizeof size, "%zx", body.size());
    RawConnection c(port_);
    c.Send(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n" +
        std::string(size) + "\n" + body + "\n0\n\n");
    const std::string answer = c.ReadUntil("\r\n\r\n");
    EXPECT_NE(answer.find("HTTP/1.1 400 Bad Request"), std::string::npos) << answer;
    EXPECT_NE(c.ReadToClose().find(R"("type":"error")"), std::string::npos);
  }

  // Fields too large for Beast's field container (64 KiB): in the header (431), and in a chunked
  // body's trailer (400); a request line over the limit (414). The gateway keeps serving.
  {
    RawConnection c(port_);
    c.Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + std::string(70000, 'a') +
           "\r\n\r\n");
    EXPECT_NE(c.ReadToClose().find("HTTP/1.1 431"), std::string::npos);
  }
  // The same limit for a head of many small fields, counted as a whole (found by review: 6,000
  // fields, 70 KB, were passed on to a replica, since Beast's limit bounds what it holds at once).
  {
    std::string fields;
    for (int i = 0; i < 8000; ++i) fields += "X-H" + std::to_string(i % 10) + ": v\r\n";  // 72 KB
    RawConnection c(port_);
    c.Send("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields +
           "Content-Length: 2\r\n\r\n{}");
    const std::string answer = c.ReadToClose();
    EXPECT_NE(answer.find("HTTP/1.1 431"), std::string::npos) << answer.substr(0, 200);
    EXPECT_EQ(answer.find("x-warden-replica"), std::string::npos);
  }
  {
    RawConnection c(port_);
    c.Send("GET /health?" + std::string(100000, 'q') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    EXPECT_NE(c.ReadToClose().find("HTTP/1.1 414"), std::string::npos);
  }
  // In the shape of the API the cut request line names: Anthropic's, the admin API's.
  for (const auto& [path, shape] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/messages", R"({"type":"error","error":{"type":"invalid_request_error",)"},
           {"/warden/v1/models", R"({"error":{"message":"the request line is over)"}}) {
    RawConnection c(port_);
    c.Send("GET " + path + "?" + std::string(100000, 'q') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const std::string answer = c.ReadToClose();
    EXPECT_NE(answer.find("HTTP/1.1 414"), std::string::npos) << path;
    EXPECT_NE(answer.find(shape), std::string::npos) << answer;
  }
  // A chunk-size line's extensions, and a trailer of many small fields, are bounded too (they were
  // kept whole in memory for as long as the client sent them): answered without their end.
  for (const std::string& unending : {"1;" + std::string(200000, 'e'), "1\r\nx\r\n0\r\n" + [] {
                                        std::string fields;
                                        for (int i = 0; i < 20000; ++i)
                                          fields += "X-T" + std::to_string(i) + ": v\r\n";
                                        return fields;
                                      }()}) {
    RawConnection c(port_);
    c.Send("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
           unending);
    const std::string answer = c.ReadToClose();
    EXPECT_NE(answer.find("HTTP/1.1 400"), std::string::npos) << answer.substr(0, 300);
    EXPECT_NE(answer.find("over 64 KiB"), std::string::npos) << answer.substr(0, 300);
  }
  // What the gateway does not do, and heads RFC 9112 says to refuse.
  for (const auto& [head, status] : std::vector<std::pair<std::string, std::string>>{
           {"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", "501"},
           // A WebSocket cannot pass (vLLM's /v1/realtime); h2c's upgrade is ignored.
           {"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
            "Upgrade: WebSocket\r\nSec-WebSocket-Version: 13\r\n\r\n",
            "501"},
           {"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
            "200"},
           // A TRACE passed on would echo the replicas' API key the gateway adds.
           {"TRACE /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "405"},
           {"GET 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
           {"GET /health#top HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
           {"GET * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
           // RFC 9110 §4.2: an absolute-form target names a host, and no user.
           {"GET http:///health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
           {"GET http://:80/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
           {"GET http://u@127.0.0.1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
           {"GET http://127.0.0.1:80/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "200"},
           {"GET HTTP://localhost/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "200"},
           {"GET /health HTTP/1.1\r\n\r\n", "400"},
           {"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: y\r\n\r\n", "400"},
           // RFC 9112 §3.2: a Host value that is no host is a 400 (whatever allowed_hosts says).
           {"GET /health HTTP/1.1\r\nHost: a/b\r\n\r\n", "400"},
           {"GET /health HTTP/1.1\r\nHost: local host\r\n\r\n", "400"},
           {"GET /health HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", "200"},
           {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "505"},  // HTTP/2 with prior knowledge
           {"GET /health HTTP/1.2\r\nHost: 127.0.0.1\r\n\r\n", "505"},
           {"GET /health http/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            "400"},  // malformed, not another version
           // A space left in the target, or doubled: malformed too (once answered 505).
           {"GET /he alth HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
           {"GET /health  HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
           {"GET /health HTTP/1.1\nHost: x\n\n", "400"},
           // RFC 9112 §6.1: no Transfer-Encoding in HTTP/1.0 (a 1.0 hop would frame it otherwise)
           {"POST /v1/messages HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: "
            "chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nGET /health HTTP/1.0\r\n\r\n",
            "400"},
           {"GET /health HTTP/1.0\r\n\r\n", "200"},
           // RFC 9112 §2.2: empty lines before a request line are ignored.
           {"\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "200"}}) {
    RawConnection c(port_);
    c.Send(head);
    const std::string answer = c.ReadUntil("\r\n");
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 " + status) ||
                answer.starts_with("HTTP/1.0 " + status))
        << head << " -> " << answer;
  }
  {
    RawConnection c(port_);
    c.Send("TRACE /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const std::string answer = c.ReadToClose();
    EXPECT_NE(answer.find("\r\nAllow: GET, HEAD, POST"), std::string::npos) << answer;
    EXPECT_NE(answer.find(R"("type":"error")"), std::string::npos) << answer;  // Anthropic's shape
  }
  {
    RawConnection c(port_);
    c.Send(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: "
        "chunked\r\n\r\n0\r\nX-T: " +
        std::string(65534, 't') + "\r\n\r\n");
    const std::string answer = c.ReadToClose();
    EXPECT_NE(answer.find("HTTP/1.1 400"), std::string::npos);
    EXPECT_NE(answer.find(R"({"type":"error","error":{)"), std::string::npos) << answer;
  }
  {  // a client that ends a POST's body with a CRLF of its own: the next request is read
    RawConnection c(port_);
    c.Send(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body +
        "\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(OkResponses(c.ReadToClose()), 2);
  }
  {  // a request line refused before its target was parsed still gets its API's error shape
    RawConnection c(port_);
    c.Send("POST /v1/messages HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}");
    const std::string answer = c.ReadToClose();
    EXPECT_NE(answer.find("HTTP/1.1 400"), std::string::npos);
    EXPECT_NE(answer.find(R"({"type":"error","error":{)"), std::string::npos) << answer;
  }
  {
    RawConnection c(port_);
    c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12x\r\n\r\n");
    const std::string answer = c.ReadToClose();
    EXPECT_NE(answer.find("HTTP/1.1 400"), std::string::npos);
    EXPECT_NE(answer.find(R"({"error":{)"), std::string::npos) << answer;
  }
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);
  EXPECT_EQ(HttpPost(port_, "/v1/messages", body).status, 200);

  // Model names in the admin API are percent-decoded, as the panel encodes them; a name that is
  // not UTF-8 is still quoted in valid JSON.
  EXPECT_EQ(HttpGet(port_, "/warden/v1/models/%6D").status, 200);
  // The models list spelt another way is the gateway's too, not one replica's (found by review).
  const auto listed = [&](const std::string& target) {
    return json::serialize(json::parse(HttpGet(port_, target).body).at("data"));
  };
  EXPECT_EQ(listed("/v1/%6Dodels"), listed("/v1/models"));
  EXPECT_EQ(listed("/v1/./models"), listed("/v1/models"));
  const HttpResult not_utf8 = HttpGet(port_, "/v1/models/x%FF%FE");  // quoted in valid JSON
  EXPECT_EQ(not_utf8.status, 404);
  EXPECT_NE(json::parse(not_utf8.body).at("error").at("message").as_string().find("x\\xff\\xfe"),
            std::string::npos)
      << not_utf8.body;
  const HttpResult bare = HttpGet(port_, "/warden");  // the gateway's, not passed to a replica
  EXPECT_EQ(bare.status, 404);
  EXPECT_NE(bare.body.find("no admin endpoint"), std::string::npos) << bare.body;
  EXPECT_EQ(HttpGet(port_, "/warden/v1/models/m%zz").status, 400);
  const HttpResult unknown = HttpGet(port_, "/warden/v1/models/%ff%fe");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NO_THROW(json::parse(unknown.body)) << unknown.body;

  // The gateway's own pages are its own whatever the method: a replica is not asked for them.
  const int served = Total(Admin(port_), "requests");
  for (const char* target : {"/metrics", "/health", "/panel", "/panel/assets/x.js"}) {
    const HttpResult posted = HttpCall(port_, "POST", target, "{}");
    EXPECT_EQ(posted.status, 405) << target;
    EXPECT_EQ(posted.header("allow"), "GET, HEAD") << target;
    EXPECT_NE(posted.body.find("to GET or HEAD only"), std::string::npos) << posted.body;
  }
  EXPECT_EQ(HttpCall(port_, "DELETE", "/metrics").status, 405);
  EXPECT_EQ(Total(Admin(port_), "requests"), served);
}

// vLLM refuses a prompt longer than the context in OpenAI's words, on /v1/messages too; Claude
// Code compacts its conversation only when told in Anthropic's ("prompt is too long: N tokens > M
// maximum"). The gateway says it so on /v1/messages; other errors, and other paths, pass as they
// are.
TEST_F(GatewayTest, AContextErrorOnMessagesIsSaidInAnthropicsWords) {
  const std::string vllm_error =
      R"({"type":"error","error":{"type":"BadRequestError","message":"This model's maximum context length is 32768 tokens. However, your request has 32817 input tokens. Please reduce the length of the input messages."}})";
  const std::string other_error =
      R"({"type":"error","error":{"type":"BadRequestError","message":"messages: Field required"}})";
  // Today's vLLM, on a request whose max_tokens leaves the reply no room (Claude Code's 32000).
  const std::string room_error =
      R"json({"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum context length is 100001 tokens and your request has 81126 input tokens (32000 > 100001 - 81126). (parameter=max_tokens, value=32000)","type":"BadRequestError","param":"max_tokens","code":400}})json";
  // vLLM since its renderer: the prompt counted up to one token past the room left for it.
  const std::string renderer_error =
      R"json({"type":"error","error":{"type":"BadRequestError","message":"You passed 769 input tokens and requested 32000 output tokens. However, the model's context length is only 32768 tokens, resulting in a maximum input length of 768 tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=769)"}})json";
  // vLLM's VLLMValidationError, with the parameter after its message.
  const std::string max_tokens_error =
      R"json({"type":"error","error":{"type":"BadRequestError","message":"max_tokens=40000 cannot be greater than max_model_len=max_total_tokens=32768. Please request fewer output tokens. (parameter=max_tokens, value=40000)"}})json";
  // Later vLLM's Anthropic endpoint: any exception is a 500.
  const std::string internal_error =
      R"json({"type":"error","error":{"type":"internal_error","message":"You passed 769 input tokens and requested 32000 output tokens. However, the model's context length is only 32768 tokens, resulting in a maximum input length of 768 tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=769)"}})json";
  FakeReplica fake([&](const std::string& request) {
    const auto asks = [&](const char* word) { return request.find(word) != std::string::npos; };
    const std::string& body = asks("other")      ? other_error
                              : asks("room")     ? room_error
                              : asks("renderer") ? renderer_error
                              : asks("maxtok")   ? max_tokens_error
                              : asks("internal") ? internal_error
                                                 : vllm_error;
    FakeAnswer a;
    if (asks("chunked")) {  // no length: in chunks, split in the message
      const size_t half = body.size() / 2;
      a.bytes = fmt::format(
          "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
          "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
          half, body.substr(0, half), body.size() - half, body.substr(half));
      return a;
    }
    a.bytes =
        std::string(asks("internal") ? "HTTP/1.1 500 Internal Server Error"
                                     : "HTTP/1.1 400 Bad Request") +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--threads", "1"}));

  const HttpResult said = HttpPost(port_, "/v1/messages?beta=true", ScenarioRequest("long"));
  EXPECT_EQ(said.status, 400);
  EXPECT_EQ(said.header("content-length"), std::to_string(said.body.size()));
  const json::value error = json::parse(said.body);
  EXPECT_EQ(error.at("type"), "error");
  EXPECT_EQ(error.at("error").at("type"), "invalid_request_error");
  const std::string message(error.at("error").at("message").as_string());
  EXPECT_TRUE(message.starts_with("prompt is too long: 32817 tokens > 32768 maximum")) << message;

  const json::value room =
      json::parse(HttpPost(port_, "/v1/messages", ScenarioRequest("room")).body);
  const std::string room_message(room.at("error").at("message").as_string());
  EXPECT_TRUE(room_message.starts_with(
      "input length and `max_tokens` exceed context limit: 81126 + 32000 > 100001"))
      << room_message;

  // A prompt counted only in part: its size is guessed from the request's (4 bytes a token).
  for (const size_t text : {100000u, 200000u}) {
    const std::string body = R"({"model":"m","max_tokens":32000,"messages":[{"role":"user",)"
                             R"("content":"renderer )" +
                             std::string(text, 'x') + R"("}]})";
    const long estimate = static_cast<long>(body.size() / 4);
    const json::value guessed = json::parse(HttpPost(port_, "/v1/messages", body).body);
    const std::string guessed_message(guessed.at("error").at("message").as_string());
    EXPECT_TRUE(guessed_message.starts_with(
        estimate < 32768
            ? "input length and `max_tokens` exceed context limit: " + std::to_string(estimate) +
                  " + 32000 > 32768"
            : "prompt is too long: " + std::to_string(estimate) + " tokens > 32768 maximum"))
        << guessed_message;
  }

  // The reply's room, with the parameter vLLM names after its message: the context is the
  // number after max_model_len, not the value at the end.
  const std::string max_tokens_message(
      json::parse(HttpPost(port_, "/v1/messages", ScenarioRequest("maxtok")).body)
          .at("error")
          .at("message")
          .as_string());
  EXPECT_NE(max_tokens_message.find("+ 40000 > 32768"), std::string::npos) << max_tokens_message;
  // Said in a 500 (later vLLM), or in chunks: the same words, as a 400.
  for (const char* scenario : {"internal", "chunked"}) {
    const HttpResult r = HttpPost(port_, "/v1/messages", ScenarioRequest(scenario));
    EXPECT_EQ(r.status, 400) << scenario;
    EXPECT_EQ(r.header("content-length"), std::to_string(r.body.size())) << scenario;
    const std::string m(json::parse(r.body).at("error").at("message").as_string());
    EXPECT_TRUE(m.starts_with(std::string(scenario) == "internal"
                                  ? "input length and `max_tokens` exceed context limit: "
                                  : "prompt is too long: 32817 tokens > 32768 maximum"))
        << scenario << ": " << m;
  }

  // Another error keeps its message, with Anthropic's type name for vLLM's own.
  EXPECT_EQ(
      HttpPost(port_, "/v1/messages", ScenarioRequest("other")).body,
      R"({"type":"error","error":{"type":"invalid_request_error","message":"messages: Field required"}})");
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("long")).body, vllm_error);
  // The connection was read to its end each time: it serves the next request.
  EXPECT_EQ(HttpPost(port_, "/v1/messages", ScenarioRequest("long")).status, 400);
  // Counted as the replica's client errors (reworded or not, the 500 too), not as the gateway's
  // own.
  EXPECT_EQ(Total(Admin(port_), "client_error_answers"), 10);
  EXPECT_EQ(Total(Admin(port_), "error_answers"), 0);
  EXPECT_EQ(SimMetric(port_, "warden_replica_client_error_answers_total"), 10);
  EXPECT_EQ(SimMetric(port_, "warden_error_answers_total", "status", "400"), 0);
}

// Paths the gateway does not serve itself take bodies that are not JSON (vLLM's audio endpoints
// take multipart uploads): passed on unchanged, while the API's own endpoints still refuse them.
TEST_F(GatewayTest, BodiesThatAreNotJsonPassThroughOnOtherPaths) {
  const std::string upload =
      "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b--\r\n";
  FakeReplica fake([&](const std::string& request) {
    FakeAnswer a;
    const bool whole = request.ends_with("\r\n\r\n" + upload);
    a.bytes = JsonResponse(whole ? R"({"text":"ok"})" : R"({"text":"mangled"})");
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult r = HttpPost(port_, "/v1/audio/transcriptions", upload,
                                {{"Content-Type", "multipart/form-data; boundary=b"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"text":"ok"})");
  const HttpResult refused = HttpPost(port_, "/v1/chat/completions", upload);
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(fake.requests(), 1);
}

// `n` connections, each sent `bytes` (a request begun and held), in order.
std::vector<std::unique_ptr<RawConnection>> HoldConnections(uint16_t port, int n,
                                                            const std::string& bytes) {
  std::vector<std::unique_ptr<RawConnection>> holders;
  for (int i = 0; i < n; ++i) {
    holders.push_back(std::make_unique<RawConnection>(port));
    holders.back()->Send(bytes);
  }
  return holders;
}

// At max_connections: a new client is served, room made for it by closing `oldest`.
void ExpectANewClientServedAndTheOldestClosed(uint16_t port, RawConnection& oldest) {
  const HttpResult served =
      HttpPost(port, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "in"}});
  EXPECT_EQ(served.status, 200) << served.body << served.error;
  EXPECT_GE(SimMetric(port, "warden_connections_shed_total"), 1);
  oldest.ReadToClose();
  EXPECT_TRUE(oldest.closed());
}

// At max_connections, a new client closes the connection that has waited longest for a request's
// head: clients holding connections open with half a head cannot keep the others out (found by
// a security review: 20,000 of them took every file descriptor, and the gateway answered no one).
TEST_F(GatewayTest, AtMaxConnectionsTheOldestHalfSentHeadMakesRoom) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1", "--max-connections", "16"}));
  // The first has waited longest.
  const auto holders = HoldConnections(port_, 16, "GET / HTTP/1.1\r\nHo");
  ExpectANewClientServedAndTheOldestClosed(port_, *holders.front());
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex(R"(the most this thread keeps \(max_connections\))"),
                                    &match));
}

// Connections that sent a request's head and hold its body make room too, once they have taken
// far longer than an upload takes (found by review: clients holding bodies locked every other
// client out for the request's whole five minutes).
TEST_F(GatewayTest, AtMaxConnectionsAConnectionHoldingItsBodyMakesRoomInTheEnd) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1", "--max-connections", "16"}));
  const auto holders = HoldConnections(port_, 16,
                                       "POST /v1/chat/completions HTTP/1.1\r\nHost: "
                                       "127.0.0.1\r\nContent-Type: application/json\r\n"
                                       "Content-Length: 1000\r\n\r\n{\"model\":");
  ExpectANewClientServedAndTheOldestClosed(port_, *holders.front());
}

// Kept-alive connections between requests make room too, and a client that comes is never the one
// closed (found by review: room made ahead of it closed the connection just accepted, and a
// client holding connections after one GET /health each locked every new one out).
TEST_F(GatewayTest, AtMaxConnectionsIdleKeptAliveConnectionsMakeRoomForNewClients) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1", "--max-connections", "16"}));
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(std::make_unique<RawConnection>(port_));
    idle.back()->Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    ASSERT_NE(idle.back()->ReadUntil("\r\n\r\n").find("200 OK"), std::string::npos);
  }
  for (int i = 0; i < 3; ++i) {
    const HttpResult r = HttpGet(port_, "/health");
    EXPECT_EQ(r.status, 200) << r.error;
  }
  EXPECT_GE(SimMetric(port_, "warden_connections_shed_total"), 1);
}

// A transcription's upload names its model in a form field: with two models, it goes to that
// one's replica, an alias replaced by the served name (found by review: it went to the first).
TEST_F(GatewayTest, AnUploadGoesToTheModelItsFormNames) {
  const auto upload = [](const std::string& model) {
    return "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
           "RIFF\r\n--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" +
           model + "\r\n--b--\r\n";
  };
  const auto echo = [](const char* which) {
    return [which](const std::string& request) {
      FakeAnswer a;
      const bool served_name = request.find("\r\n\r\nw\r\n--b--") != std::string::npos;
      a.bytes =
          JsonResponse(std::string(R"({"text":")") + which + (served_name ? " w" : "") + R"("})");
      return a;
    };
  };
  FakeReplica chat(echo("chat")), whisper(echo("whisper"));
  const std::string config_path = ::testing::TempDir() + "/warden-upload.yaml";
  {
    std::ofstream f(config_path);
    f << "models:\n  - name: m\n    url: " << chat.url() << "\n  - name: w\n    aliases: "
      << "['whisper-*']\n    url: " << whisper.url() << "\n";
  }
  std::vector<uint16_t> ports;
  gateway_ = StartWarden({"serve", "--config", config_path, "--listen", "127.0.0.1:0"}, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];
  const Headers form = {{"Content-Type", "multipart/form-data; boundary=b"}};
  EXPECT_EQ(HttpPost(port_, "/v1/audio/transcriptions", upload("w"), form).body,
            R"({"text":"whisper w"})");
  EXPECT_EQ(HttpPost(port_, "/v1/audio/transcriptions", upload("whisper-large-v3"), form).body,
            R"({"text":"whisper w"})");
  EXPECT_EQ(HttpPost(port_, "/v1/audio/transcriptions", upload("m"), form).body,
            R"({"text":"chat"})");
  EXPECT_EQ(HttpPost(port_, "/v1/audio/transcriptions", upload("other"), form).status, 404);
}

// A request body in a transfer coding other than chunked cannot be framed: 501, and its bytes are
// never taken for a request of their own. A chunked body's trailer is not passed on as header
// fields (nor read for a session key).
TEST_F(GatewayTest, UnknownTransferCodingsAreRefusedAndRequestTrailersDropped) {
  std::mutex mu;
  std::vector<std::string> seen;
  FakeReplica fake([&](const std::string& request) {
    std::lock_guard lock(mu);
    seen.push_back(request);
    FakeAnswer a;
    a.bytes = JsonResponse(R"({"ok":true})");
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (const char* coding : {"gzip", "gzip, chunked", "identity"}) {
    RawConnection c(port_);
    c.Send(std::string(
               "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: ") +
           coding + "\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const std::string answer = c.ReadToClose();
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 501")) << coding << ": " << answer;
    EXPECT_NE(answer.find("\"error\""), std::string::npos) << answer;  // OpenAI's shape
  }
  {  // with a large body still coming after the head: answered all the same
    RawConnection c(port_);
    c.Send("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n" +
           std::string(512 * 1024, 'z'));
    const std::string answer = c.ReadToClose();
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 501")) << answer;
    EXPECT_NE(answer.find("\"type\":\"error\""), std::string::npos) << answer;  // Anthropic's
  }
  const std::string body = ScenarioRequest("trailers");
  RawConnection c(port_);
  char size[32];
  std::snprintf(size, sizeof size, "%zx", body.size());
  c.Send(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: "
      "chunked\r\n\r\n" +
      std::string(size) + "\r\n" + body +
      "\r\n0\r\nAuthorization: Bearer injected\r\nX-Session-ID: from-trailer\r\n\r\n");
  const std::string answer = c.ReadUntil(R"({"ok":true})");
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer;
  const json::object key_sources = Admin(port_).at("key_sources").as_object();
  EXPECT_EQ(key_sources.at("header").as_int64(), 0);  // keyed by its opening, not the trailer
  EXPECT_EQ(key_sources.at("opening").as_int64(), 1);
  std::lock_guard lock(mu);
  ASSERT_EQ(seen.size(), 1u);  // nothing smuggled
  EXPECT_EQ(seen[0].find("injected"), std::string::npos) << seen[0];
  EXPECT_EQ(seen[0].find("from-trailer"), std::string::npos) << seen[0];
  EXPECT_TRUE(seen[0].ends_with(body)) << seen[0];
}

// A request line in absolute form (which HTTP/1.1 servers must accept) is routed like its path,
// and goes to the replica in origin form. Fields its Connection field names are hop-by-hop: not
// passed on, nor are credentials for a proxy (Proxy-Authorization).
TEST_F(GatewayTest, AnAbsoluteFormTargetIsRoutedByItsPath) {
  std::mutex mu;
  std::string seen;
  FakeReplica fake([&](const std::string& request) {
    std::lock_guard lock(mu);
    seen = request;
    FakeAnswer a;
    a.bytes = JsonResponse(R"({"ok":true})");
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string body = R"({"model":"claude-x","messages":[{"role":"user","content":"hi"}]})";
  RawConnection c(port_);
  c.Send(
      "POST http://127.0.0.1:8080/v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
      "Connection: x-hop\r\nX-Hop: secret\r\nConnection: keep-alive\r\n"
      "Proxy-Authorization: Basic proxysecret\r\n"
      "X-Claude-Code-Session-Id: abs\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  const std::string answer = c.ReadUntil(R"({"ok":true})");
  EXPECT_NE(answer.find("x-warden-route: new"), std::string::npos) << answer;
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(seen.starts_with("POST /v1/messages?beta=true HTTP/1.1\r\n")) << seen;
    EXPECT_NE(seen.find(R"("model":"m")"), std::string::npos) << seen;  // the alias resolved
    EXPECT_EQ(seen.find("secret"), std::string::npos) << seen;  // neither X-Hop nor credentials
    EXPECT_NE(seen.find("X-Claude-Code-Session-Id: abs"), std::string::npos) << seen;
  }
  // Every field named goes, however many are named (it was the first 64).
  std::string names;
  for (int i = 0; i < 100; ++i) names += "x-n" + std::to_string(i) + ", ";
  RawConnection many(port_);
  many.Send("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: " + names +
            "X-Last\r\nX-Last: secret\r\nX-Kept: kept\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\n\r\n" + body);
  many.ReadUntil(R"({"ok":true})");
  std::lock_guard again(mu);
  EXPECT_EQ(seen.find("secret"), std::string::npos) << seen;
  EXPECT_NE(seen.find("X-Kept: kept"), std::string::npos) << seen;
}

// The fields a replica's Connection field names are hop-by-hop too: not passed to the client.
TEST_F(GatewayTest, FieldsAReplicasConnectionFieldNamesAreNotPassedOn) {
  FakeReplica fake([](const std::string&) {
    const std::string body = R"({"ok":true})";
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 200 OK\r\nX-Secret: s\r\nConnection: keep-alive, x-secret\r\n"
        "X-Kept: k\r\nConnection: X-Other\r\nx-other: o\r\nX-Warden-Replica: 99\r\n"
        "x-warden-route: made-up\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult r = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("named"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"ok":true})");
  EXPECT_EQ(r.header("x-secret"), "");
  EXPECT_EQ(r.header("x-other"), "");
  EXPECT_EQ(r.header("x-kept"), "k");
  EXPECT_EQ(r.header("x-warden-replica"), "0");  // the gateway's fields only, not the replica's
  EXPECT_EQ(r.header("x-warden-route"), "new");
  RawConnection raw(port_);
  raw.Send(ChatRequestBytes(ScenarioRequest("named")));
  std::string head = raw.ReadUntil("\r\n\r\n");
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_EQ(head.find("x-warden-replica: 99"), std::string::npos) << head;
  EXPECT_EQ(head.find("made-up"), std::string::npos) << head;
}

// What a proxy must not pass on, and answers with no body: trailers are dropped, a 204 carries
// no Content-Length, and a response that is not valid HTTP gets a 502 in the API's shape, is not
// sent twice, and leaves the replica in service.
TEST_F(GatewayTest, TrailersBodilessAnswersAndBrokenResponses) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    if (request.find("trailers") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
          "Trailer: x-t\r\n\r\n2\r\n{}\r\n0\r\nx-t: promoted\r\nset-cookie: evil=1\r\n\r\n";
    } else if (request.find("empty") != std::string::npos) {
      a.bytes = "HTTP/1.1 204 No Content\r\n\r\n";
    } else if (request.find("badchunk") != std::string::npos) {
      a.bytes = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
      a.close_after_ms = 0;
    } else if (request.find("cut") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\"";
      a.close_after_ms = 0;
    } else if (request.find("gzipped") != std::string::npos) {  // no coding it can pass on
      a.bytes = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b\x08";
      a.close_after_ms = 0;
    } else if (request.find("upgraded") != std::string::npos) {  // no upgrade was asked for
      a.bytes = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n" +
                JsonResponse(R"({"after":"upgrade"})");
    } else if (request.find("both") != std::string::npos) {
      a.bytes =
          "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n"
          "0\r\n\r\n";
      a.close_after_ms = 0;
    } else {
      a.bytes = JsonResponse(R"({"ok":true})");
    }
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  const HttpResult trailers = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("trailers"));
  EXPECT_EQ(trailers.status, 200);
  EXPECT_EQ(trailers.body, "{}");
  EXPECT_EQ(trailers.header("x-t"), "");
  EXPECT_EQ(trailers.header("set-cookie"), "");
  const HttpResult empty = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("empty"));
  EXPECT_EQ(empty.status, 204);
  EXPECT_EQ(empty.header("content-length"), "");
  EXPECT_EQ(empty.header("transfer-encoding"), "");
  for (const char* scenario : {"badchunk", "both", "gzipped", "upgraded"}) {
    const int before = fake.requests();
    const HttpResult broken = HttpPost(port_, "/v1/chat/completions", ScenarioRequest(scenario));
    EXPECT_EQ(broken.status, 502) << scenario;
    EXPECT_EQ(json::parse(broken.body).at("error").at("type").as_string(), "server_error")
        << broken.body;
    EXPECT_EQ(fake.requests(), before + 1) << scenario << ": sent once";
  }
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("fine")).status, 200);
  // Cut short after its head went out: the client sees the connection end, and it counts too.
  RawConnection cut(port_);
  cut.Send(ChatRequestBytes(ScenarioRequest("cut")));
  const std::string received = cut.ReadToClose();
  EXPECT_NE(received.find("Content-Length: 100"), std::string::npos) << received;
  EXPECT_TRUE(cut.closed());
  const json::object model = Admin(port_);
  EXPECT_EQ(Total(model, "failed"), 5);  // the five broken answers
  EXPECT_EQ(Total(model, "in_flight"), 0);
}

// A body larger than the socket buffers on the way: the gateway's writes stop short, and what the
// kernel did not take goes out once the client reads on, in order (net/write_now.h).
TEST_F(GatewayTest, ALargeBodyReachesTheClientWholeAndInOrder) {
  std::string body(24 << 20, '\0');
  for (size_t i = 0; i < body.size(); ++i)
    body[i] = static_cast<char>('a' + (i * 7 + i / 4093) % 26);
  FakeReplica fake([&](const std::string&) {
    FakeAnswer a;
    a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n" + body;
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult r = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("large"));
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body.size(), body.size());
  EXPECT_TRUE(r.body == body);  // not EXPECT_EQ: a 24 MiB diff is no help
}

// A client that reads nothing of its answer is cut off after the send timeout, and its request
// ended upstream (the replica's write fails), instead of holding the replica for as long as it
// likes.
TEST_F(GatewayTest, AClientThatReadsNothingIsCutOffAfterTheSendTimeout) {
  const std::string body(64 << 20, 'x');  // more than every socket buffer on the way holds
  FakeReplica fake([&](const std::string&) {
    FakeAnswer a;
    a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n" + body;
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--send-timeout", "1", "--access-log"}));
  RawConnection client(port_);
  client.Send(ChatRequestBytes(ScenarioRequest("never read")));
  EXPECT_TRUE(Eventually([&] { return fake.answers() == 1; }, 15)) << "the replica is still held";
  EXPECT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  // Its access-log line says the client left the response unfinished (it read like a clean 200).
  std::smatch line;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex(R"(POST /v1/chat/completions 200 .* left)"), &line));
}

TEST_F(GatewayTest, BadRequestsGetTheRightStatusInEachApisShape) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string config_path = ::testing::TempDir() + "/warden-errors.yaml";
  {
    std::ofstream f(config_path);
    f << "body_limit_mb: 0.01\nmodels:\n"
      << "  - name: m\n    url: http://127.0.0.1:" << sim_ports_[0] << "\n"
      << "    aliases: [mm, \"claude-*\"]\n"
      << "  - name: dead\n    url: http://127.0.0.1:1\n    scrape_interval_s: 60\n";
  }
  std::vector<uint16_t> ports;
  gateway_ = StartWarden({"serve", "--config", config_path, "--listen", "127.0.0.1:0"}, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];

  const HttpResult malformed = HttpPost(port_, "/v1/messages", R"({"model":"m","messages":[)");
  EXPECT_EQ(malformed.status, 400);
  const auto a = json::parse(malformed.body);
  EXPECT_EQ(a.at("type").as_string(), "error");
  EXPECT_EQ(a.at("error").at("type").as_string(), "invalid_request_error");

  const HttpResult malformed_openai = HttpPost(port_, "/v1/chat/completions", "{nope");
  EXPECT_EQ(malformed_openai.status, 400);
  EXPECT_EQ(json::parse(malformed_openai.body).at("error").at("type").as_string(),
            "invalid_request_error");

  // A model that is no name, and no body at all: the gateway's 400, nothing routed.
  for (const char* model : {"5", R"(["m"])"}) {
    const HttpResult typed = HttpPost(
        port_, "/v1/messages",
        std::string(R"({"model":)") + model + R"(,"messages":[{"role":"user","content":"x"}]})",
        {{"X-Claude-Code-Session-Id", "typed"}});
    EXPECT_EQ(typed.status, 400) << model;
    EXPECT_NE(typed.body.find("model: expected a string"), std::string::npos) << typed.body;
  }
  // A null model is none (vLLM's OpenAI APIs take it so): with several served, which is not said.
  const HttpResult null_model = HttpPost(
      port_, "/v1/messages", R"({"model":null,"messages":[{"role":"user","content":"x"}]})",
      {{"X-Claude-Code-Session-Id", "typed"}});
  EXPECT_EQ(null_model.status, 404);
  EXPECT_NE(null_model.body.find("names no model and several are served"), std::string::npos)
      << null_model.body;
  const HttpResult surrogate = HttpPost(
      port_, "/v1/messages", R"({"model":"m\ud800","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(surrogate.status, 400);
  EXPECT_NE(surrogate.body.find("model: the string is not valid JSON text"), std::string::npos)
      << surrogate.body;
  const HttpResult bad_escape = HttpPost(
      port_, "/v1/messages", R"({"model":"m\x","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(bad_escape.status, 400);
  EXPECT_NE(bad_escape.body.find("(a bad escape, or"), std::string::npos) << bad_escape.body;
  const HttpResult empty = HttpPost(port_, "/v1/chat/completions", "");
  EXPECT_EQ(empty.status, 400);
  EXPECT_NE(empty.body.find("the request has no body"), std::string::npos) << empty.body;
  EXPECT_EQ(Total(Admin(port_), "requests"), 0);
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), 0);

  const HttpResult unknown =
      HttpPost(port_, "/v1/chat/completions",
               R"({"model":"gpt-7","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(json::parse(unknown.body).at("error").at("code").as_string(), "model_not_found");
  // It says what is served (a wrong case is the usual mistake).
  EXPECT_NE(json::parse(unknown.body)
                .at("error")
                .at("message")
                .as_string()
                .find("model 'gpt-7' is not served here (served: m (also mm, claude-*); dead;"),
            std::string_view::npos)
      << unknown.body;
  // A base URL with /v1 once too many (Claude Code's ANTHROPIC_BASE_URL=http://host/v1): said,
  // not passed on for the replica's bare 404, which Claude Code takes for a model problem.
  const HttpResult doubled = HttpPost(
      port_, "/v1/v1/messages", R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(doubled.status, 404);
  EXPECT_NE(json::parse(doubled.body).at("error").at("message").as_string().find("repeats /v1"),
            std::string_view::npos)
      << doubled.body;
  EXPECT_EQ(json::parse(doubled.body).at("type"), "error");  // Anthropic's shape, as meant
  // In OpenAI's shape, a path no server has is no unknown model.
  const HttpResult doubled_openai =
      HttpPost(port_, "/v1/v1/chat/completions",
               R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(doubled_openai.status, 404);
  EXPECT_TRUE(json::parse(doubled_openai.body).at("error").at("code").is_null())
      << doubled_openai.body;
  // A base URL without the /v1 OpenAI's SDKs want: said too, in the shape of the API meant.
  const HttpResult bare_openai = HttpPost(
      port_, "/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(bare_openai.status, 404);
  EXPECT_NE(json::parse(bare_openai.body).at("error").at("message").as_string().find("lacks /v1"),
            std::string_view::npos)
      << bare_openai.body;
  const HttpResult bare_messages = HttpPost(port_, "/messages?beta=true", R"({"model":"m"})");
  EXPECT_EQ(bare_messages.status, 404);
  EXPECT_EQ(json::parse(bare_messages.body).at("type"), "error") << bare_messages.body;

  const HttpResult unknown_anthropic = HttpPost(
      port_, "/v1/messages", R"({"model":"gpt-7","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(unknown_anthropic.status, 404);
  EXPECT_EQ(json::parse(unknown_anthropic.body).at("error").at("type").as_string(),
            "not_found_error");

  const std::string big = json::serialize(json::object{
      {"model", "m"},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("b", 3000)}}}}});
  const HttpResult too_large = HttpPost(port_, "/v1/messages", big);
  EXPECT_EQ(too_large.status, 413);
  EXPECT_EQ(json::parse(too_large.body).at("error").at("type").as_string(), "request_too_large");
  // Whatever the path: an admin PATCH over the limit is not read either.
  const HttpResult admin_too_large = HttpCall(port_, "PATCH", "/warden/v1/models/m", big);
  EXPECT_EQ(admin_too_large.status, 413);
  EXPECT_EQ(json::parse(admin_too_large.body),  // in the admin API's own shape
            json::parse(R"({"error":{"message":"request body is over the gateway's limit of )" +
                        std::to_string(10485) + R"( bytes"}})"));
  // A client that sends a body far over the limit whole before it reads still gets the answer:
  // the rest is read and dropped, not reset under it.
  const HttpResult far_too_large = HttpPost(port_, "/v1/messages", std::string(48 << 20, 'x'));
  EXPECT_EQ(far_too_large.status, 413) << far_too_large.error;

  const HttpResult no_replica =
      HttpPost(port_, "/v1/messages",
               R"({"model":"dead","max_tokens":4,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(no_replica.status, 503);
  EXPECT_EQ(json::parse(no_replica.body).at("error").at("type").as_string(), "overloaded_error");
  EXPECT_EQ(no_replica.header("retry-after"), "60");  // its next health check

  // And the gateway still serves good requests.
  const HttpResult ok =
      HttpPost(port_, "/v1/messages",
               R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(HttpCall(port_, "HEAD", "/").status, 200);
  // OPTIONS * is about the gateway itself: answered here, not relayed (found by review).
  const HttpResult options = HttpCall(port_, "OPTIONS", "*");
  EXPECT_EQ(options.status, 200);
  // The methods a TRACE's 405 names too, PATCH (the admin API's) among them (found by review).
  EXPECT_EQ(options.header("allow"), "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS");
  // The models: served names and aliases that are names (a pattern is not a model to list), in
  // a shape both APIs' clients read; and any name the gateway routes, by itself.
  const json::value models = json::parse(HttpGet(port_, "/v1/models").body);
  std::vector<std::string> ids;
  for (const auto& m : models.at("data").as_array()) ids.emplace_back(m.at("id").as_string());
  EXPECT_EQ(ids, (std::vector<std::string>{"m", "mm", "dead"}));
  EXPECT_EQ(models.at("data").at(1).at("root").as_string(), "m");
  // vLLM names a parent for a LoRA adapter only: an alias is the model under another name.
  EXPECT_TRUE(models.at("data").at(1).at("parent").is_null());
  EXPECT_EQ(models.at("has_more").as_bool(), false);
  EXPECT_EQ(models.at("first_id").as_string(), "m");
  EXPECT_EQ(models.at("last_id").as_string(), "dead");
  // Paged as Anthropic's list when asked (found by review: a cursor gave its own model again).
  const auto page = [&](const std::string& query) {
    const json::value list = json::parse(HttpGet(port_, "/v1/models?" + query).body);
    std::string got;
    for (const auto& m : list.at("data").as_array())
      got += std::string(m.at("id").as_string()) + ",";
    return got + (list.at("has_more").as_bool() ? "more" : "end");
  };
  EXPECT_EQ(page("limit=1"), "m,more");
  EXPECT_EQ(page("after_id=m&limit=1"), "mm,more");
  EXPECT_EQ(page("after_id=mm"), "dead,end");
  EXPECT_EQ(page("before_id=dead&limit=1"), "mm,more");
  EXPECT_EQ(page("before_id=mm"), "m,end");
  // A limit that is no positive integer is a 400, as Anthropic's API answers (found by review: it
  // listed every model), in Anthropic's shape to its clients.
  for (const std::string limit : {"abc", "0", "-1", "2x"}) {
    const HttpResult bad = HttpGet(port_, "/v1/models?limit=" + limit);
    EXPECT_EQ(bad.status, 400) << limit;
    EXPECT_NE(
        bad.body.find(R"({"error":{"message":"limit: ')" + limit + "' is no positive integer"),
        std::string::npos)
        << bad.body;
  }
  EXPECT_NE(
      HttpCall(port_, "GET", "/v1/models?limit=abc", "", {{"anthropic-version", "2023-06-01"}})
          .body.find(R"({"type":"error","error":{"type":"invalid_request_error")"),
      std::string::npos);
  // The context length is the replicas' (vLLM's /v1/models), once one has answered: the
  // simulator's for m, none for the model whose replica never answers.
  const int64_t served_length = json::parse(HttpGet(sim_ports_[0], "/v1/models").body)
                                    .at("data")
                                    .at(0)
                                    .at("max_model_len")
                                    .as_int64();
  EXPECT_TRUE(Eventually([&] {
    const json::value now = json::parse(HttpGet(port_, "/v1/models").body);
    const json::object& m = now.at("data").at(0).as_object();
    return m.contains("max_model_len") && m.at("max_model_len").as_int64() == served_length;
  }));
  EXPECT_FALSE(json::parse(HttpGet(port_, "/v1/models").body)
                   .at("data")
                   .at(2)
                   .as_object()
                   .contains("max_model_len"));
  const HttpResult one = HttpGet(port_, "/v1/models/claude-opus-4");
  EXPECT_EQ(one.status, 200);
  EXPECT_EQ(json::parse(one.body).at("id").as_string(), "claude-opus-4");
  EXPECT_EQ(json::parse(one.body).at("root").as_string(), "m");
  EXPECT_EQ(json::parse(one.body).at("type").as_string(), "model");
  const HttpResult none = HttpGet(port_, "/v1/models/gpt-7");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(json::parse(none.body).at("error").at("type").as_string(), "invalid_request_error");
  const HttpResult none_anthropic =
      HttpCall(port_, "GET", "/v1/models/gpt-7", "", {{"anthropic-version", "2023-06-01"}});
  EXPECT_EQ(none_anthropic.status, 404);
  EXPECT_EQ(json::parse(none_anthropic.body).at("error").at("type").as_string(), "not_found_error");
  // Without peers configured, no one may post homes.
  EXPECT_EQ(HttpPost(port_, "/warden/v1/peer/homes", R"({"models":[]})").status, 404);

  // Each error the gateway answered itself is counted by its status (the admin API's own are
  // not), none of them as a replica's.
  EXPECT_EQ(SimMetric(port_, "warden_error_answers_total", "status", "400"), 12);  // 5 of limits
  EXPECT_EQ(SimMetric(port_, "warden_error_answers_total", "status", "404"), 9);
  EXPECT_EQ(SimMetric(port_, "warden_error_answers_total", "status", "413"), 2);
  EXPECT_EQ(SimMetric(port_, "warden_error_answers_total", "status", "503"), 1);
  // Shown at 0 before the first (found by review: a series that appears with its first error
  // loses that one to rate()).
  const std::string metrics = HttpCall(port_, "GET", "/metrics", "").body;
  for (const char* status : {"401", "429"}) {
    EXPECT_NE(
        metrics.find("warden_error_answers_total{status=\"" + std::string(status) + "\"} 0\n"),
        std::string::npos)
        << status;
  }
  EXPECT_EQ(SimMetric(port_, "warden_build_info", "version", WARDEN_VERSION), 1);
  EXPECT_EQ(SimMetric(port_, "warden_replica_client_error_answers_total"), 0);
}

// A replica URL that is the gateway itself: the request comes back carrying the gateway's Via
// entry and is refused at once (it went round 64 times, until the overflow limit).
TEST_F(GatewayTest, ARequestThatComesBackToTheGatewayIsRefused) {
  const uint16_t port = FreePort();
  const std::string self = "http://127.0.0.1:" + std::to_string(port);
  upstream_args_ = {"--url", self};
  std::vector<uint16_t> ports;
  // Its own address as a replica's: refused at start (found by review).
  auto refused =
      ChildProcess::Start({WARDEN_BIN, "serve", "--listen", "127.0.0.1:" + std::to_string(port),
                           "--model", "m", "--url", "http://localhost:" + std::to_string(port)});
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->Wait(std::chrono::seconds(10)), 2);  // (the reason: GatewayConfig tests)
  EXPECT_FALSE(PortListening(port));
  // Two gateways that name each other (not to be seen from either's config): the request that
  // comes back is refused, by its Via entry, one hop on (found by review).
  const uint16_t other_port = FreePort();
  const std::string other = "http://127.0.0.1:" + std::to_string(other_port);
  gateway_ = StartWarden(
      {"serve", "--listen", "127.0.0.1:" + std::to_string(port), "--model", "m", "--url", other},
      &ports);
  ASSERT_NE(gateway_, nullptr);
  std::unique_ptr<ChildProcess> second =
      StartWarden({"serve", "--listen", "127.0.0.1:" + std::to_string(other_port), "--model", "m",
                   "--url", self},
                  &ports);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(Eventually([&] { return Admin(port).at("replicas").at(0).at("healthy").as_bool(); }));
  const HttpResult r = HttpPost(port, "/v1/chat/completions", ChatBody("loop", 5, 4));
  EXPECT_EQ(r.status, 508);
  EXPECT_NE(r.body.find("came back to this gateway"), std::string::npos) << r.body;
  EXPECT_NE(json::parse(r.body).as_object().if_contains("error"), nullptr);  // OpenAI's shape
  // The loop is said in the log of the gateway it came back to, with the way it went.
  std::smatch said;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(
          R"(a request came back to this gateway \((warden-[0-9a-f]+)\) by way of )"
          R"(1\.1 \1, 1\.1 warden-[0-9a-f]+, 1\.1 \1: a model's replica URL leads back here)"),
      &said));
  // The same for a call the gateway makes to every server (it called itself thousands of times
  // over, until out of file descriptors: found by review).
  const HttpResult crossed = HttpPost(port, "/reset_prefix_cache", "");
  EXPECT_EQ(crossed.status, 502);
  EXPECT_NE(crossed.body.find("answered 508"), std::string::npos) << crossed.body;
  EXPECT_LT(crossed.body.size(), 2000u) << crossed.body;  // one hop, not thousands
}

// A page a replica serves (vLLM's /docs, or HTML on an API path from a proxy in front of it) is
// passed on in a sandbox: on the panel's origin it could read the admin token the panel keeps.
TEST_F(GatewayTest, AReplicasOwnPagesArePassedOnInASandbox) {
  FakeReplica fake([](const std::string& head) {
    FakeAnswer a;
    if (head.starts_with("GET /docs")) {
      const std::string page = "<html><script>localStorage.getItem('x')</script></html>";
      a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: " +
                std::to_string(page.size()) + "\r\n\r\n" + page;
    } else {
      a.bytes = JsonResponse(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}})");
    }
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake));
  const HttpResult docs = HttpGet(port_, "/docs");
  EXPECT_EQ(docs.status, 200);
  EXPECT_NE(docs.body.find("<script>"), std::string::npos);
  EXPECT_EQ(docs.header("content-security-policy"),
            "sandbox allow-scripts allow-forms allow-popups");
  const HttpResult api = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("sandbox"));
  EXPECT_EQ(api.status, 200);
  EXPECT_EQ(api.header("content-security-policy"),
            "sandbox allow-scripts allow-forms allow-popups");
}

// `text` in gzip's format (zlib), as a client compresses a body it uploads.
std::string Gzipped(const std::string& text) {
  z_stream s{};
  deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&s, text.size()) + 32, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  s.avail_in = static_cast<uInt>(text.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

// vLLM says its Anthropic endpoint's errors with its own type names (BadRequestError): the
// gateway passes them on with Anthropic's (found by review). A body keyed by Claude Code's header
// is read for its model only, so a replica is what finds it malformed here.
TEST_F(GatewayTest, AReplicasErrorOnTheMessagesApiHasAnthropicsTypeName) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult bad = HttpPost(
      port_, "/v1/messages?beta=true",
      R"({"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}],})",
      {{"x-claude-code-session-id", "e1"}});
  EXPECT_EQ(bad.status, 400);
  const json::value body = json::parse(bad.body);
  EXPECT_EQ(body.at("type").as_string(), "error") << bad.body;
  EXPECT_EQ(body.at("error").at("type").as_string(), "invalid_request_error") << bad.body;
  EXPECT_FALSE(body.at("error").at("message").as_string().empty()) << bad.body;
}

// An API endpoint takes POST alone: another method is answered here, 405 in the API's shape
// with Allow: POST, and reaches no replica (vLLM's own answer is FastAPI's bare {"detail": ...},
// and the gateway counted it as a request of the replica: found by review). A long name quoted
// in an error is cut.
TEST_F(GatewayTest, AnotherMethodThanPostOnTheApiIs405InItsShape) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const HttpResult put = HttpCall(port_, "PUT", "/v1/chat/completions", "{}");
  EXPECT_EQ(put.status, 405);
  EXPECT_EQ(put.header("allow"), "POST");
  EXPECT_EQ(json::parse(put.body).at("error").at("message"),
            "/v1/chat/completions takes POST, not PUT")
      << put.body;
  const HttpResult get = HttpCall(port_, "GET", "/v1/messages", "");
  EXPECT_EQ(get.status, 405);
  EXPECT_EQ(json::parse(get.body).at("type"), "error") << get.body;
  EXPECT_EQ(HttpCall(port_, "DELETE", "/v1/completions", "").status, 405);
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("requests").as_int64(), 0);
  EXPECT_EQ(SimMetric(sim_ports_[0], "vllm:prompt_tokens_total"), 0);

  const std::string name(100000, 'm');
  const HttpResult unknown =
      HttpPost(port_, "/v1/chat/completions",
               R"({"model":")" + name + R"(","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_LT(unknown.body.size(), 2000u);
  EXPECT_NE(unknown.body.find("... (100000 bytes)"), std::string::npos) << unknown.body;
}

// Every error status a replica answers on /v1/messages in OpenAI's shape (vLLM's 404 for a model
// it does not serve, its 503 while its engine is down) reaches Anthropic's clients in Anthropic's,
// whose SDKs and Claude Code read error.type.
TEST_F(GatewayTest, EveryReplicaErrorOnTheMessagesApiIsSaidInAnthropicsShape) {
  std::atomic<int> status{404};
  FakeReplica errs([&](const std::string&) {
    const std::string body = fmt::format(
        R"({{"object":"error","message":"said with {}","type":"SomeError","param":null,"code":{}}})",
        status.load(), status.load());
    FakeAnswer a;
    a.bytes = fmt::format(
        "HTTP/1.1 {} Whatever\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        status.load(), body.size(), body);
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(errs));
  for (const auto& [code, type] : std::vector<std::pair<int, std::string>>{
           {404, "not_found_error"}, {422, "invalid_request_error"}, {501, "api_error"}}) {
    status = code;
    const HttpResult r =
        HttpPost(port_, "/v1/messages",
                 R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})");
    EXPECT_EQ(r.status, code) << r.body;
    const json::value body = json::parse(r.body);
    EXPECT_EQ(body.at("error").at("type").as_string(), type) << r.body;
    EXPECT_EQ(body.at("error").at("message").as_string(), fmt::format("said with {}", code));
  }
  // And on the paths under it (count_tokens, which Claude Code sends too).
  status = 400;
  const HttpResult counted =
      HttpPost(port_, "/v1/messages/count_tokens", R"({"model":"m","messages":[]})");
  EXPECT_EQ(counted.status, 400);
  EXPECT_EQ(json::parse(counted.body).at("error").at("type").as_string(), "invalid_request_error")
      << counted.body;
}

// A plain-text error (uvicorn's "Internal Server Error", a proxy's page) on Anthropic's API goes
// out as JSON in Anthropic's shape, with the text as its message: the SDKs read error.type.
TEST_F(GatewayTest, APlainTextErrorOnTheMessagesApiIsSaidAsJson) {
  FakeReplica errs([](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
        "Content-Length: 21\r\n\r\nInternal Server Error";
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(errs));
  const HttpResult r =
      HttpPost(port_, "/v1/messages",
               R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(r.body,
            R"({"type":"error","error":{"type":"api_error","message":"Internal Server Error"}})");
}

// An encoded error body (the client's Accept-Encoding went to the replica) that is not said again
// (no message in it) is passed on as it came: rewritten, it once went out as plain JSON still said
// to be gzip (found by review).
TEST_F(GatewayTest, AnEncodedErrorOnTheMessagesApiIsPassedOnAsItIs) {
  const std::string gzipped("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xab\xae\x05\x00", 14);
  FakeReplica errs([&](const std::string&) {
    FakeAnswer a;
    a.bytes =
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
        "Content-Encoding: gzip\r\nContent-Length: 14\r\n\r\n" +
        gzipped;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(errs));
  const HttpResult r =
      HttpPost(port_, "/v1/messages",
               R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})",
               {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.header("content-encoding"), "gzip");
  EXPECT_EQ(r.body, gzipped);
}

// An error a proxy in front of the replica compressed (the client's Accept-Encoding went on) is
// read decoded and said in Anthropic's shape, plain (found by review: it went out in OpenAI's,
// still gzipped); one in a coding the gateway does not know goes out as it came.
TEST_F(GatewayTest, ACompressedErrorOnTheMessagesApiIsSaidInAnthropicsShape) {
  std::atomic<bool> brotli{false};
  FakeReplica errs([&](const std::string&) {
    const std::string body = brotli
                                 ? std::string("\x0b\x03\x80{}\x03", 6)
                                 : Gzipped(R"({"object":"error","message":"said in gzip",)"
                                           R"("type":"BadRequestError","param":null,"code":400})");
    FakeAnswer a;
    a.bytes =
        fmt::format(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Encoding: {}\r\n"
            "Content-Length: {}\r\n\r\n",
            brotli ? "br" : "gzip", body.size()) +
        body;
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(errs));
  const std::string request =
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})";
  const HttpResult r = HttpPost(port_, "/v1/messages", request, {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.header("content-encoding"), "");
  EXPECT_EQ(r.body, R"({"type":"error","error":{"type":"invalid_request_error",)"
                    R"("message":"said in gzip"}})");
  brotli = true;
  const HttpResult kept = HttpPost(port_, "/v1/messages", request, {{"Accept-Encoding", "br"}});
  EXPECT_EQ(kept.status, 400);
  EXPECT_EQ(kept.header("content-encoding"), "br");
  EXPECT_EQ(kept.body, std::string("\x0b\x03\x80{}\x03", 6));
}

TEST_F(GatewayTest, ACompressedBodyIsDecodedRoutedAndPassedOnPlain) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--body-limit-mb", "1"}));
  const auto zstd = [](const std::string& text) {
    std::string out(ZSTD_compressBound(text.size()), '\0');
    out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
    return out;
  };
  // Keyed by the body only (Claude Code's metadata.user_id), under an alias the gateway rewrites.
  const std::string body =
      R"({"model":"claude-haiku-4-5","max_tokens":4,"metadata":{"user_id":)"
      R"("user_a_account_b_session_zipped"},"messages":[{"role":"user","content":")" +
      Words("zip", 300) + R"("}]})";
  const HttpResult first =
      HttpPost(port_, "/v1/messages", Gzipped(body), {{"Content-Encoding", "gzip"}});
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.header("x-warden-route"), "new");
  const HttpResult second =
      HttpPost(port_, "/v1/messages", zstd(body), {{"Content-Encoding", "zstd"}});
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.header("x-warden-route"), "sticky");
  EXPECT_EQ(second.header("x-warden-replica"), first.header("x-warden-replica"));
  // The replica read the prompt the first turn left in its cache: it got the same plain text.
  EXPECT_GT(json::parse(second.body).at("usage").at("cache_read_input_tokens").as_int64(), 200)
      << second.body;
  // Said to be coded with identity: plain as it came, and routed by what it says like the others.
  const HttpResult plain =
      HttpPost(port_, "/v1/messages", body, {{"Content-Encoding", "identity"}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.header("x-warden-route"), "sticky");
  EXPECT_EQ(plain.header("x-warden-replica"), first.header("x-warden-replica"));
  const auto error_of = [](const HttpResult& r) {
    return std::string(json::parse(r.body).at("error").at("message").as_string());
  };
  const HttpResult brotli =
      HttpPost(port_, "/v1/chat/completions", "\x1b\x02\x00", {{"Content-Encoding", "br"}});
  EXPECT_EQ(brotli.status, 415);
  EXPECT_EQ(error_of(brotli),
            "Content-Encoding 'br' is not supported: the gateway decodes gzip, deflate and zstd");
  // Said to be coded, whatever it looks like; and compressed once only.
  const HttpResult labelled = HttpPost(port_, "/v1/messages", body, {{"Content-Encoding", "br"}});
  EXPECT_EQ(labelled.status, 415);
  const HttpResult twice =
      HttpPost(port_, "/v1/messages", Gzipped(Gzipped(body)), {{"Content-Encoding", "gzip, gzip"}});
  EXPECT_EQ(twice.status, 415);
  EXPECT_EQ(error_of(twice), "more than one Content-Encoding: the gateway decodes one");
  const HttpResult cut =
      HttpPost(port_, "/v1/messages", Gzipped(body).substr(0, 40), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(cut.status, 400);
  EXPECT_EQ(json::parse(cut.body).at("type").as_string(), "error");  // Anthropic's shape
  EXPECT_EQ(error_of(cut), "the body is not valid gzip data, as its Content-Encoding says");
  // A small body that decodes past the body limit.
  const HttpResult bomb =
      HttpPost(port_, "/v1/chat/completions", Gzipped(std::string(4 << 20, ' ')),
               {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(bomb.status, 413);
  EXPECT_EQ(error_of(bomb),
            "the request body, decoded (gzip), is over the gateway's limit of 1048576 bytes");
  EXPECT_EQ(Total(Admin(port_), "requests"), 3);
}

// What a few compressed bytes become is held while the request lasts: over all requests, at most
// eight body limits of decoded bodies; past that a 503, until requests end.
TEST_F(GatewayTest, DecodedBodiesHeldAtOnceAreBounded) {
  FakeReplica fake([](const std::string&) { return FakeAnswer{}; });  // holds every request
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(fake, {"--body-limit-mb", "1"}));
  const std::string body = R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":")" +
                           std::string(1'000'000, 'x') + R"("}]})";
  const std::string gzipped = Gzipped(body);
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
      "application/json\r\nContent-Encoding: gzip\r\nContent-Length: " +
      std::to_string(gzipped.size()) + "\r\n\r\n" + gzipped;
  {
    std::vector<std::unique_ptr<RawConnection>> held;
    for (int i = 0; i < 8; ++i) {  // 8 MB of the 8 MiB
      held.push_back(std::make_unique<RawConnection>(port_));
      held.back()->Send(request);
    }
    ASSERT_TRUE(Eventually([&] { return fake.requests() == 8; }));
    RawConnection ninth(port_);
    ninth.Send(request);
    const std::string answer = ninth.ReadUntil("}}");
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 503")) << answer.substr(0, 300);
    EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer.substr(0, 300);
    EXPECT_NE(answer.find("the gateway holds 8388608 bytes of decoded request bodies"),
              std::string::npos)
        << answer.substr(0, 400);
    EXPECT_NE(answer.find(R"("code":"gateway_resources_exhausted")"), std::string::npos)
        << answer.substr(0, 400);
    EXPECT_EQ(fake.requests(), 8);
    EXPECT_EQ(SimMetric(port_, "warden_compressed_bodies_refused_total", "reason", "memory"), 1);
  }  // the eight clients hang up: their requests end, and their bodies are let go
  RawConnection tenth(port_);
  tenth.Send(request);
  EXPECT_TRUE(Eventually([&] { return fake.requests() == 9; }));
}

// `request` sent on each of `connections` new connections to `port`, not waiting for answers.
std::vector<std::unique_ptr<RawConnection>> SendOnEach(uint16_t port, const std::string& request,
                                                       int connections) {
  std::vector<std::unique_ptr<RawConnection>> sent;
  for (int i = 0; i < connections; ++i) {
    sent.push_back(std::make_unique<RawConnection>(port));
    sent.back()->Send(request);
  }
  return sent;
}

// A request whose body decodes to 9 MiB of spaces from about 9 KB of gzip.
std::string SpacesGzipped() {
  const std::string gzipped = Gzipped(std::string(9 << 20, ' '));
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
         "application/json\r\nContent-Encoding: gzip\r\nContent-Length: " +
         std::to_string(gzipped.size()) + "\r\n\r\n" + gzipped;
}

// Decoding is done off the gateway's threads: bodies that take long to decode (each 8 MiB, the
// body limit here, before it is found too large) hold no one else up. With one thread, a request
// sent while they decode is answered before the last of them is.
TEST_F(GatewayTest, AClientsRequestIsAnsweredWhileOtherClientsBodiesDecode) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1", "--body-limit-mb", "8"}));
  const std::string request = SpacesGzipped();
  // (Decoded one after the other, on the one decoding thread.)
  std::vector<std::unique_ptr<RawConnection>> compressed = SendOnEach(port_, request, 12);
  const HttpResult other = HttpCall(port_, "GET", "/warden/v1/models/m", "");
  EXPECT_EQ(other.status, 200);
  EXPECT_FALSE(compressed.back()->AnswerWaiting())
      << "every decoding ended before the other was answered";
  for (auto& c : compressed) {
    const std::string answer = c->ReadUntil("}}");
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 413")) << answer.substr(0, 300);
    EXPECT_NE(answer.find("decoded (gzip), is over the gateway's limit of 8388608 bytes"),
              std::string::npos)
        << answer.substr(0, 400);
  }
}

// At most 16 bodies wait for each decoding thread (one here): those past them get a 503 to send
// again, rather than a wait behind every other client's.
TEST_F(GatewayTest, CompressedBodiesWaitingToBeDecodedAreBounded) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1", "--body-limit-mb", "8"}));
  const std::string request = SpacesGzipped();
  std::vector<std::unique_ptr<RawConnection>> compressed = SendOnEach(port_, request, 24);
  int too_large = 0, refused = 0;
  for (auto& c : compressed) {
    const std::string answer = c->ReadUntil("}}");
    if (answer.starts_with("HTTP/1.1 413")) {
      ++too_large;
    } else {
      ++refused;
      EXPECT_TRUE(answer.starts_with("HTTP/1.1 503")) << answer.substr(0, 300);
      EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer.substr(0, 300);
      EXPECT_NE(answer.find("the gateway has 16 compressed request bodies to decode, its most"),
                std::string::npos)
          << answer.substr(0, 400);
    }
  }
  EXPECT_GE(too_large, 16);
  EXPECT_GE(refused, 1);
  EXPECT_EQ(SimMetric(port_, "warden_compressed_bodies_refused_total", "reason", "queue"), refused);
  EXPECT_EQ(SimMetric(port_, "warden_compressed_bodies_refused_total", "reason", "memory"), 0);
  // Once they are done, compressed bodies are decoded again.
  RawConnection later(port_);
  later.Send(request);
  EXPECT_TRUE(later.ReadUntil("}}").starts_with("HTTP/1.1 413"));
}

// A small compressed body is decoded at once on the gateway's thread: it waits for no large one,
// nor is refused while they fill the decoding queue (found by review: a burst of 17 small ones
// read in one turn of the loop got 503s). One that decodes to more than the gateway's thread
// decodes (64 KiB) is decoded whole off it.
TEST_F(GatewayTest, SmallCompressedBodiesAreDecodedWithoutWaitingForLargeOnes) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1", "--body-limit-mb", "8"}));
  const std::string request = SpacesGzipped();
  std::vector<std::unique_ptr<RawConnection>> compressed = SendOnEach(port_, request, 24);
  const Headers gzip = {{"Content-Encoding", "gzip"}};
  const HttpResult small =
      HttpPost(port_, "/v1/chat/completions", Gzipped(ChatBody("small", 20, 4)), gzip);
  EXPECT_EQ(small.status, 200) << small.body;
  EXPECT_TRUE(std::any_of(compressed.begin(), compressed.end(), [](const auto& c) {
    return !c->AnswerWaiting();
  })) << "every large body was decoded first";
  for (auto& c : compressed) c->ReadUntil("}}");
  std::string words;
  for (int i = 0; i < 20000; ++i) words += "hello ";
  const std::string long_prompt = json::serialize(
      json::object{{"model", "m"},
                   {"max_tokens", 4},
                   {"messages", json::array{json::object{{"role", "user"}, {"content", words}}}}});
  const std::string coded = Gzipped(long_prompt);
  ASSERT_LT(coded.size(), 4096u);
  const HttpResult decoded_off = HttpPost(port_, "/v1/chat/completions", coded, gzip);
  EXPECT_EQ(decoded_off.status, 200) << decoded_off.body;
  EXPECT_EQ(json::parse(decoded_off.body).at("usage").at("prompt_tokens").as_int64() > 20000, true);
}

// DNS rebinding: a page on another site points its own name at 127.0.0.1 and uses the gateway as
// its own origin; only the Host field gives it away. On a loopback address the gateway answers
// local names and addresses only, and allowed_hosts adds names.
TEST_F(GatewayTest, OnLoopbackItAnswersLocalNamesOnly) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string port = std::to_string(port_);
  const Headers evil = {{"Host", "evil.example:" + port}};
  const HttpResult models = HttpCall(port_, "GET", "/warden/v1/models/m", "", evil);
  EXPECT_EQ(models.status, 403);
  const std::string message =
      json::parse(models.body).at("error").at("message").as_string().c_str();
  EXPECT_NE(message.find("'evil.example'"), std::string::npos) << message;
  EXPECT_NE(message.find("allowed_hosts"), std::string::npos) << message;
  const HttpResult patch = HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"affinity": false})",
                                    {{"Host", "evil.example:" + port},
                                     {"Origin", "http://evil.example:" + port},
                                     {"Sec-Fetch-Site", "same-origin"}});
  EXPECT_EQ(patch.status, 403);
  EXPECT_TRUE(Admin(port_).at("affinity").as_bool());
  for (const char* page : {"/panel", "/metrics"}) {
    const HttpResult r = HttpCall(port_, "GET", page, "", evil);
    EXPECT_EQ(r.status, 403) << page;
    EXPECT_NE(r.body.find("allowed_hosts"), std::string::npos) << page;
  }
  for (const std::string& host :
       std::vector<std::string>{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port}) {
    EXPECT_EQ(HttpCall(port_, "GET", "/warden/v1/models/m", "", {{"Host", host}}).status, 200)
        << host;
  }
  // The model API too, in its own shape, and paths passed on to a replica.
  const HttpResult completion =
      HttpCall(port_, "POST", "/v1/messages",
               R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}]})", evil);
  EXPECT_EQ(completion.status, 403);
  EXPECT_EQ(json::parse(completion.body).at("type"), "error");
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/models", "", evil).status, 403);
  EXPECT_EQ(HttpCall(port_, "POST", "/sleep", "{}", evil).status, 403);
  EXPECT_EQ(HttpCall(port_, "POST", "/v1/messages",
                     R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}]})",
                     {{"Host", "localhost:" + port}})
                .status,
            200);
  // An absolute-form target names the host in place of the Host field.
  RawConnection absolute(port_);
  absolute.Send(
      "GET http://evil.example/warden/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Connection: close\r\n\r\n");
  EXPECT_TRUE(absolute.ReadToClose().starts_with("HTTP/1.1 403")) << "absolute form";

  gateway_.reset();
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--allowed-host", "*.example"}));
  EXPECT_EQ(HttpCall(port_, "GET", "/warden/v1/models/m", "",
                     {{"Host", "evil.example:" + std::to_string(port_)}})
                .status,
            200);
  EXPECT_EQ(HttpCall(port_, "GET", "/panel", "", {{"Host", "gw.elsewhere"}}).status, 403);
}

// A body's room is given memory as its bytes come, not as its Content-Length announces: clients
// that announce 30 MiB each and send a byte cost the gateway next to nothing.
TEST_F(GatewayTest, AnAnnouncedBodyCostsMemoryOnlyAsItsBytesCome) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "5"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  const auto resident_kib = [&] { return ProcStatusKib(gateway_->pid(), "VmRSS:"); };
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("warm")).status, 200);
  const long before = resident_kib();
  std::vector<std::unique_ptr<RawConnection>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<RawConnection>(port_));
    clients.back()->Send(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        "application/json\r\n"
        "Expect: 100-continue\r\nContent-Length: 31457280\r\n\r\n");
    ASSERT_TRUE(clients.back()->ReadUntil("\r\n\r\n").starts_with("HTTP/1.1 100 Continue"));
    clients.back()->Send("{");
  }
  // One thread: what followed each 100 Continue has run before this request is answered.
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("after")).status, 200);
  EXPECT_LT(resident_kib() - before, 16 * 1024) << "KiB";
}

}  // namespace
}  // namespace warden::testing
