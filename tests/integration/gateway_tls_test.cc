// `warden serve`: TLS to the replicas and from the clients.
#include "gateway_test_fixture.h"

namespace warden::testing {
namespace {

// A replica at an https:// URL: the gateway speaks TLS to it, checks its certificate (here
// against the test's own, given as the CA file) and its name, keeps the connection for the next
// requests, and streams pass byte for byte. Trusting only the system's authorities, it refuses the
// certificate and the replica is never used.
TEST_F(GatewayTest, AReplicaBehindHttpsIsReachedOverTls) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  const std::string dir = std::string(WARDEN_FIXTURES_DIR) + "/tls/";
  TlsFront front(sim_ports_[0], dir + "localhost-cert.pem", dir + "localhost-key.pem");
  upstream_args_ = {"--url", "https://localhost:" + std::to_string(front.port())};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--tls-ca-file", dir + "localhost-cert.pem"}));
  const auto healthy = [&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); };
  ASSERT_TRUE(Eventually(healthy));
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("url").as_string(),
            "https://localhost:" + std::to_string(front.port()));
  Conversation c("tls", 100);
  for (int t = 0; t < 3; ++t) {
    const Turn turn = c.Next(port_);
    EXPECT_EQ(turn.status, 200) << turn.body;
    EXPECT_EQ(turn.route, t == 0 ? "new" : "sticky");
  }
  const std::string body = json::serialize(json::object{
      {"model", "m"},
      {"max_tokens", 40},
      {"stream", true},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("tls", 200)}}}}});
  const Headers session = {{"X-Claude-Code-Session-Id", "tls-bytes"}, {"X-Request-Id", "fixed"}};
  HttpPost(port_, "/v1/messages", body, session);  // warms the replica's cache
  const HttpResult via_gateway = HttpPost(port_, "/v1/messages", body, session);
  const HttpResult direct =
      HttpPost(sim_ports_[0], "/v1/messages", body, {{"X-Request-Id", "fixed"}});
  ASSERT_EQ(via_gateway.status, 200);
  EXPECT_EQ(via_gateway.body, direct.body);
  EXPECT_GT(via_gateway.body.size(), 2000u);
  EXPECT_GT(Admin(port_).at("replicas").at(0).at("cached_prompt_tokens").as_int64(), 0);
  EXPECT_EQ(front.refused(), 0);
  EXPECT_EQ(front.server_name(), "localhost");  // SNI
  // The connection is kept from request to request: 20 requests make a handshake or two (and the
  // health checks and scrapes, each on a connection of its own, one each).
  const int before = front.handshakes();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(c.Next(port_, 1).status, 200);
  EXPECT_LT(front.handshakes() - before, 15);
  // Health checks and scrapes keep theirs too: a second of them (ten, at 0.2 s) makes at most one
  // (a window of time observed, not waited on for something to happen).
  const int idle_before = front.handshakes();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LE(front.handshakes() - idle_before, 1);

  ASSERT_EQ(gateway_->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(StartGateway());  // the system's authorities only
  ASSERT_TRUE(Eventually([&] { return front.refused() >= 1; }));
  const HttpResult refused = HttpPost(port_, "/v1/messages", body, session);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_FALSE(healthy());

  // A certificate for another name (localhost's, at 127.0.0.2) is refused too, though its
  // authority is trusted; with tls_verify off, nothing is checked.
  TlsFront elsewhere(sim_ports_[0], dir + "localhost-cert.pem", dir + "localhost-key.pem",
                     "127.0.0.2");
  ASSERT_EQ(gateway_->Stop(), 0);
  upstream_args_ = {"--url", "https://127.0.0.2:" + std::to_string(elsewhere.port())};
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--tls-ca-file", dir + "localhost-cert.pem"}));
  ASSERT_TRUE(Eventually([&] { return elsewhere.refused() >= 1; }));
  EXPECT_EQ(HttpPost(port_, "/v1/messages", body, session).status, 503);
  EXPECT_EQ(elsewhere.handshakes(), 0);
  ASSERT_EQ(gateway_->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--tls-verify", "off"}));
  ASSERT_TRUE(Eventually(healthy));
  EXPECT_EQ(HttpPost(port_, "/v1/messages", body, session).status, 200);
  EXPECT_EQ(elsewhere.server_name(), "");  // an IP address: no name to send
}

// The gateway's own listener over TLS: clients reach it over https, with the same bytes as in
// clear and their conversations sticky; a request in plain http is told so in the API's shape; a
// client that does not trust the certificate is counted; SIGHUP takes a renewed certificate for
// the connections that follow.
TEST_F(GatewayTest, ClientsReachTheGatewayOverTls) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "5"));
  const std::string fixtures = std::string(WARDEN_FIXTURES_DIR) + "/tls/";
  const std::string old_ca = fixtures + "localhost-cert.pem";
  const std::string new_ca = fixtures + "renewed-cert.pem";
  const std::string cert = TempFile("cert.pem", ReadFile(old_ca));
  const std::string key = TempFile("key.pem", ReadFile(fixtures + "localhost-key.pem"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--tls-cert-file", cert, "--tls-key-file", key}));
  const std::string turn = json::serialize(json::object{
      {"model", "m"},
      {"max_tokens", 40},
      {"stream", true},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("https", 300)}}}}});
  const Headers session = {{"X-Claude-Code-Session-Id", "tls-client"}, {"X-Request-Id", "fixed"}};
  const std::vector<HttpResult> turns = HttpsCalls(port_, old_ca, 2, "POST", "/v1/messages", turn,
                                                   session);  // one connection, kept alive
  ASSERT_EQ(turns.size(), 2u);
  ASSERT_EQ(turns[0].status, 200) << turns[0].error << turns[0].body;
  ASSERT_EQ(turns[1].status, 200) << turns[1].error << turns[1].body;
  EXPECT_EQ(turns[0].header("x-warden-route"), "new");
  EXPECT_EQ(turns[1].header("x-warden-route"), "sticky");
  const std::string home = turns[0].header("x-warden-replica");
  EXPECT_EQ(turns[1].header("x-warden-replica"), home);
  const HttpResult direct =
      HttpPost(sim_ports_[std::stoi(home)], "/v1/messages", turn, {{"X-Request-Id", "fixed"}});
  EXPECT_EQ(turns[1].body, direct.body);  // the stream's bytes, unchanged through TLS
  EXPECT_GT(turns[1].body.size(), 2000u);

  const HttpResult plain = HttpPost(port_, "/v1/messages", turn, session);
  EXPECT_EQ(plain.status, 400);
  EXPECT_EQ(json::parse(plain.body).at("type"), "error");  // Anthropic's shape on /v1/messages
  EXPECT_EQ(json::parse(plain.body).at("error").at("type"), "invalid_request_error");
  EXPECT_NE(plain.body.find("use https://"), std::string::npos) << plain.body;
  EXPECT_EQ(HttpsCall(port_, new_ca, "GET", "/warden/v1/models").status, 0);  // not trusted
  EXPECT_TRUE(Eventually([&] {  // counted when the server reads the client's alert
    return HttpsCall(port_, old_ca, "GET", "/metrics")
               .body.find("warden_tls_handshake_failures_total 2") != std::string::npos;
  }));

  // A connection the gateway closes ends with TLS's close_notify: the client knows it is whole.
  EXPECT_EQ(HttpsEndAfterClose(port_, old_ca, "/warden/v1/models"), "End of file");

  // A client that leaves mid-stream over TLS ends its request at the replica.
  const std::string long_turn =
      R"({"model":"m","max_tokens":20000,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"leaving"}]})";
  const HttpResult left =
      HttpsStream(port_, old_ca, "/v1/messages", long_turn,
                  {{"X-Claude-Code-Session-Id", "tls-leaver"}}, [](std::string_view piece) {
                    return piece.find("content_block_delta") == std::string::npos;
                  });
  EXPECT_EQ(left.status, 200) << left.error;
  const auto running = [&] {
    double n = 0;
    for (uint16_t sim : sim_ports_) n += SimMetric(sim, "vllm:num_requests_running");
    return n;
  };
  EXPECT_TRUE(Eventually([&] {
    const HttpResult model = HttpsCall(port_, old_ca, "GET", "/warden/v1/models/m");
    return running() == 0 && model.status == 200 &&
           Total(json::parse(model.body).as_object(), "in_flight") == 0;
  }));

  std::ofstream(cert, std::ios::trunc) << ReadFile(new_ca);
  std::ofstream(key, std::ios::trunc) << ReadFile(fixtures + "renewed-key.pem");
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(std::regex("SIGHUP: TLS certificate read again"), &match));
  EXPECT_EQ(HttpsCall(port_, old_ca, "GET", "/warden/v1/models").status, 0);
  const HttpResult renewed = HttpsCall(port_, new_ca, "POST", "/v1/messages", turn, session);
  EXPECT_EQ(renewed.status, 200) << renewed.error;
  EXPECT_EQ(renewed.header("x-warden-route"), "sticky");
  EXPECT_EQ(renewed.header("x-warden-replica"), home);

  // A key that is not the certificate's: the reload is refused, and the renewed one stays.
  std::ofstream(key, std::ios::trunc) << ReadFile(fixtures + "localhost-key.pem");
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(std::regex("the TLS certificate stays as it was"), &match));
  EXPECT_EQ(HttpsCall(port_, new_ca, "GET", "/warden/v1/models").status, 200);
}

// A response the replica broke off ends, over TLS, without close_notify: an HTTP/1.0 client,
// whose body ends with the connection, can tell it from a whole one (as nginx does it).
TEST_F(GatewayTest, AResponseBrokenOffEndsTheTlsConnectionUncleanly) {
  FakeReplica fake([](const std::string& request) {
    FakeAnswer a;
    const bool whole = request.find("whole") != std::string::npos;
    a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n";
    a.bytes += whole ? std::string(40, 'w') : "{\"partial\":";
    a.close_after_ms = whole ? -1 : 0;
    return a;
  });
  const std::string fixtures = std::string(WARDEN_FIXTURES_DIR) + "/tls/";
  const std::string ca = fixtures + "localhost-cert.pem";
  upstream_args_ = {"--url", fake.url()};
  ASSERT_NO_FATAL_FAILURE(
      StartGateway({"--tls-cert-file", ca, "--tls-key-file", fixtures + "localhost-key.pem"}));
  ASSERT_TRUE(Eventually([&] {
    const HttpResult model = HttpsCall(port_, ca, "GET", "/warden/v1/models/m");
    return model.status == 200 &&
           json::parse(model.body).at("replicas").at(0).at("healthy").as_bool();
  }));
  const auto request = [](std::string_view word) {
    const std::string body =
        R"({"model":"m","messages":[{"role":"user","content":")" + std::string(word) + R"("}]})";
    return "POST /v1/chat/completions HTTP/1.0\r\nHost: localhost\r\nContent-Type: "
           "application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  const ReadToEnd whole = HttpsReadToEnd(port_, ca, request("whole"));
  EXPECT_NE(whole.bytes.find(std::string(40, 'w')), std::string::npos) << whole.bytes;
  EXPECT_EQ(whole.end, "End of file");
  const ReadToEnd broken = HttpsReadToEnd(port_, ca, request("broken"));
  EXPECT_TRUE(broken.bytes.starts_with("HTTP/1.0 200") || broken.bytes.starts_with("HTTP/1.1 200"))
      << broken.bytes;
  EXPECT_TRUE(broken.bytes.ends_with("{\"partial\":")) << broken.bytes;
  EXPECT_EQ(broken.end, "stream truncated");
}

}  // namespace
}  // namespace warden::testing
