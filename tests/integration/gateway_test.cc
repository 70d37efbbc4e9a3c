// `warden serve` in front of real `warden sim` processes, over loopback.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "core/workload/trace.h"
#include "eventually.h"
#include "fake_replica.h"
#include "http_client.h"
#include "tls_front.h"
#include "util/prometheus.h"
#include "words.h"

namespace warden::testing {
namespace {

namespace json = boost::json;

struct Turn {
  int status = 0;
  int replica = -1;
  std::string route;
  std::string body;
};

// A Claude-Code-style conversation: each turn resends the whole history.
class Conversation {
 public:
  Conversation(std::string id, int first_words, int turn_words = 30, int max_tokens = 16,
               bool keyed = true)
      : id_(std::move(id)), turn_words_(turn_words), max_tokens_(max_tokens), keyed_(keyed) {
    messages_.push_back(json::object{{"role", "user"}, {"content", Words(id_ + "w", first_words)}});
  }

  Turn Next(uint16_t port, int max_tokens = -1) {
    json::object body{{"model", "claude-sonnet-4-5"},
                      {"max_tokens", max_tokens > 0 ? max_tokens : max_tokens_},
                      {"system", Words("system", 60)},
                      {"messages", messages_}};
    Headers headers;
    if (keyed_) headers.emplace_back("X-Claude-Code-Session-Id", id_);
    const HttpResult r = HttpPost(port, "/v1/messages", json::serialize(body), headers);
    Turn t{r.status,
           r.header("x-warden-replica").empty() ? -1 : std::stoi(r.header("x-warden-replica")),
           r.header("x-warden-route"), r.body};
    if (r.status == 200) {
      const auto reply = json::parse(r.body);
      messages_.push_back(json::object{
          {"role", "assistant"}, {"content", reply.at("content").at(0).at("text").as_string()}});
      messages_.push_back(json::object{
          {"role", "user"}, {"content", Words(id_ + "t" + std::to_string(turns_), turn_words_)}});
    }
    ++turns_;
    return t;
  }
  const std::string& id() const { return id_; }

 private:
  std::string id_;
  int turn_words_;
  int max_tokens_;
  bool keyed_;
  int turns_ = 0;
  json::array messages_;
};

// A file holding `text` in the test's temporary folder; returns its path.
std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path =
      ::testing::TempDir() + "/warden-" + name + "-" + std::to_string(::getpid());
  std::ofstream(path) << text;
  return path;
}

json::object Admin(uint16_t port, const std::string& model = "m") {
  const HttpResult r = HttpGet(port, "/warden/v1/models/" + model);
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body).as_object();
}

int64_t Total(const json::object& model, const char* field) {
  int64_t sum = 0;
  for (const auto& r : model.at("replicas").as_array()) sum += r.at(field).as_int64();
  return sum;
}

double SimMetric(uint16_t port, const std::string& name, const std::string& label = "",
                 const std::string& value = "");

// The bytes of a POST /v1/messages request with `body`, keyed by `session` if not empty.
std::string MessagesRequestBytes(const std::string& body, const std::string& session = "") {
  std::string head =
      "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  if (!session.empty()) head += "X-Claude-Code-Session-Id: " + session + "\r\n";
  return head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A connection the server has accepted (a request answered on it), so that it is not in the
// listen backlog when the test goes on.
std::unique_ptr<RawConnection> AcceptedConnection(uint16_t port) {
  auto c = std::make_unique<RawConnection>(port);
  c->Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_NE(c->ReadUntil("\r\n\r\n").find("HTTP/1.1 200"), std::string::npos);
  return c;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Whether the file at `path` names the conversation `key` (as a JSON string).
bool FileHasKey(const std::string& path, const std::string& key) {
  return ReadFile(path).find("\"" + key + "\"") != std::string::npos;
}

// How many "200 OK" responses `received` holds.
int OkResponses(std::string_view received) {
  int n = 0;
  for (size_t at = received.find("HTTP/1.1 200"); at != std::string_view::npos;
       at = received.find("HTTP/1.1 200", at + 1))
    ++n;
  return n;
}

// A long streamed turn on a thread of its own (ignore_eos: exactly `tokens` tokens).
class BackgroundStream {
 public:
  BackgroundStream(uint16_t port, const std::string& session, int tokens,
                   const std::string& words) {
    const json::object body{
        {"model", "m"},
        {"max_tokens", tokens},
        {"stream", true},
        {"ignore_eos", true},
        {"messages", json::array{json::object{{"role", "user"}, {"content", words}}}}};
    thread_ = std::thread([this, port, session, text = json::serialize(body)] {
      result_ = HttpStream(port, "/v1/messages", text, {{"X-Claude-Code-Session-Id", session}},
                           [this](std::string_view) {
                             started_ = true;
                             return true;
                           });
    });
  }
  ~BackgroundStream() {
    if (thread_.joinable()) thread_.join();
  }
  // Whether its first bytes have come.
  bool started() const { return started_; }
  // Waits for its end.
  const HttpResult& Finish() {
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  std::atomic<bool> started_{false};
  HttpResult result_;
  std::thread thread_;
};

class GatewayTest : public ::testing::Test {
 protected:
  // One simulator process with `ranks` data-parallel ranks.
  void StartDpSim(int ranks, const std::string& time_scale = "100",
                  const std::vector<std::string>& extra = {}) {
    std::vector<uint16_t> ports;
    std::vector<std::string> args = {"sim",
                                     "--port",
                                     "0",
                                     "--model",
                                     "m",
                                     "--dp",
                                     std::to_string(ranks),
                                     "--time-scale",
                                     time_scale,
                                     "--api-latency",
                                     "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    sims_.push_back(StartWarden(args, &ports));
    ASSERT_NE(sims_.back(), nullptr);
    sim_ports_.push_back(ports[0]);
    upstream_args_ = {"--url", "http://127.0.0.1:" + std::to_string(ports[0]), "--dp",
                      std::to_string(ranks)};
  }
  // `n` simulator processes, one replica each.
  void StartSims(int n, const std::string& time_scale = "100",
                 const std::vector<std::string>& extra = {}) {
    upstream_args_.clear();
    for (int i = 0; i < n; ++i) {
      std::vector<uint16_t> ports;
      std::vector<std::string> args = {
          "sim", "--port", "0", "--model", "m", "--time-scale", time_scale, "--api-latency", "0"};
      args.insert(args.end(), extra.begin(), extra.end());
      sims_.push_back(StartWarden(args, &ports));
      ASSERT_NE(sims_.back(), nullptr);
      sim_ports_.push_back(ports[0]);
      upstream_args_.push_back("--url");
      upstream_args_.push_back("http://127.0.0.1:" + std::to_string(ports[0]));
    }
  }
  // Drains replica `replica` of model m, or takes it back, through the admin API.
  void SetDraining(int replica, bool draining) {
    ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                       R"({"replicas": [{"index": )" + std::to_string(replica) +
                           R"(, "draining": )" + (draining ? "true" : "false") + "}]}")
                  .status,
              200);
  }
  void StartGateway(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"serve",   "--listen", "127.0.0.1:0",    "--model", "m",
                                     "--alias", "claude-*", "--max-num-seqs", "32"};
    const auto given = [&](const char* flag) {
      return std::find(extra.begin(), extra.end(), flag) != extra.end();
    };
    // The test's own shards and scrape interval, else these.
    if (!given("--scrape-interval")) args.insert(args.end(), {"--scrape-interval", "0.2"});
    if (!given("--threads")) args.insert(args.end(), {"--threads", "2"});
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<uint16_t> ports;
    gateway_ = StartWarden(args, &ports, 1, gateway_file_limit_);
    ASSERT_NE(gateway_, nullptr);
    port_ = ports[0];
  }
  int gateway_file_limit_ = 0;  // StartWarden's file_limit for the gateway
  // A gateway on `port` in front of the replicas started (StartSims, StartDpSim), peered with the
  // gateway on `peer`, both syncing every 50 ms.
  std::unique_ptr<ChildProcess> StartPeerGateway(uint16_t port, uint16_t peer,
                                                 const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--model",
                                     "m",
                                     "--alias",
                                     "claude-*",
                                     "--scrape-interval",
                                     "0.2",
                                     "--peer",
                                     "http://127.0.0.1:" + std::to_string(peer),
                                     "--peer-sync-interval",
                                     "0.05"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  }
  // Stops simulator `i` (one of StartSims') and waits until the gateway holds it for unhealthy.
  void StopSim(size_t i) {
    ASSERT_EQ(sims_[i]->Stop(), 0);
    ASSERT_TRUE(
        Eventually([&] { return !Admin(port_).at("replicas").at(i).at("healthy").as_bool(); }));
  }
  // Starts simulator `i` again on its port, as StartSims does, with `extra` arguments.
  void StartSimAgain(size_t i, const std::vector<std::string>& extra) {
    std::vector<uint16_t> ports;
    std::vector<std::string> args = {"sim",
                                     "--port",
                                     std::to_string(sim_ports_[i]),
                                     "--model",
                                     "m",
                                     "--time-scale",
                                     "100",
                                     "--api-latency",
                                     "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    sims_[i] = StartWarden(args, &ports);
    ASSERT_NE(sims_[i], nullptr);
  }
  // A restart of simulator `i`, which serves LoRA adapters loaded at run time, seen by the gateway.
  void RestartSimWithLoraUpdating(size_t i) {
    ASSERT_NO_FATAL_FAILURE(StopSim(i));
    ASSERT_NO_FATAL_FAILURE(StartSimAgain(i, {"--runtime-lora-updating"}));
  }
  // The gateway in front of `fake` alone, once it holds the fake for healthy.
  void StartGatewayBefore(const FakeReplica& fake, std::vector<std::string> extra = {}) {
    upstream_args_ = {"--url", fake.url()};
    ASSERT_NO_FATAL_FAILURE(StartGateway(std::move(extra)));
    ASSERT_TRUE(
        Eventually([&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
  }

  // A simulated replica that, like vLLM with --api-key, wants `key`; its port in `ports`.
  void StartSimWithKey(const std::string& key, std::vector<uint16_t>* ports) {
    sims_.push_back(StartWarden({"sim", "--port", "0", "--model", "m", "--time-scale", "100",
                                 "--api-latency", "0", "--api-key", key},
                                ports));
    ASSERT_NE(sims_.back(), nullptr);
  }

  // One simulated replica with the tiny profile's 1 K-token cache (one request of 150 words, with
  // room for a 60-token reply, fills it) behind a gateway running `admission`.
  void StartTinyReplicaBehindTheGateway(const std::string& admission,
                                        std::vector<std::string> extra = {}) {
    std::vector<uint16_t> ports;
    sims_.push_back(StartWarden({"sim", "--port", "0", "--model", "m", "--profile", "tiny",
                                 "--time-scale", "1", "--api-latency", "0"},
                                &ports));
    ASSERT_NE(sims_.back(), nullptr);
    sim_ports_.push_back(ports[0]);
    upstream_args_ = {"--url", "http://127.0.0.1:" + std::to_string(ports[0])};
    extra.insert(extra.begin(), {"--admission", admission});
    ASSERT_NO_FATAL_FAILURE(StartGateway(std::move(extra)));
    ASSERT_TRUE(Eventually(
        [&] { return Admin(port_).at("replicas").at(0).at("kv_cache_tokens").as_int64() > 0; }));
    // The room the gateway counts is the simulator's, vLLM's null block left out.
    const std::regex logged("KV cache ([0-9]+) tokens per rank");
    std::smatch kv;
    for (const std::string& line : sims_.back()->lines()) {
      if (std::regex_search(line, kv, logged)) break;
    }
    ASSERT_FALSE(kv.empty());
    EXPECT_EQ(Admin(port_).at("replicas").at(0).at("kv_cache_tokens").as_int64(),
              std::stoll(kv[1].str()));
    EXPECT_TRUE(Admin(port_).at("replicas").at(0).at("kv_offloading_gib").is_null());
  }

  // A gateway on `port` whose one peer is the gateway on `peer_port`, in front of `urls` (the
  // sims' by default) as model `model`, sending to its peer every 50 ms.
  std::unique_ptr<ChildProcess> StartPeer(uint16_t port, uint16_t peer_port,
                                          std::vector<std::string> urls = {},
                                          const std::string& model = "m") {
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--model",
                                     model,
                                     "--peer",
                                     "http://127.0.0.1:" + std::to_string(peer_port),
                                     "--peer-sync-interval",
                                     "0.05"};
    if (urls.empty()) urls = upstream_args_;
    args.insert(args.end(), urls.begin(), urls.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  }

  std::vector<std::unique_ptr<ChildProcess>> sims_;
  std::vector<uint16_t> sim_ports_;
  std::vector<std::string> upstream_args_;
  std::unique_ptr<ChildProcess> gateway_;
  uint16_t port_ = 0;
};

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

// A restarted gateway with a state file sends each conversation back to the replica that holds
// its history: saved at SIGTERM (phase 1) or by the periodic save before a SIGKILL (phase 2), and
// mapped by URL when the config lists the replicas in another order.
TEST_F(GatewayTest, ARestartedGatewayKeepsConversationsOnTheirReplicasThroughItsStateFile) {
  ASSERT_NO_FATAL_FAILURE(StartSims(3));
  const std::string dir = ::testing::TempDir() + "/warden-state-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  const std::vector<std::string> stop_config = {"--state-file", state, "--state-save-interval",
                                                "3600"};
  const std::vector<std::string> periodic_config = {"--state-file", state, "--state-save-interval",
                                                    "0.1"};
  const std::vector<std::string> in_order = upstream_args_;
  std::vector<std::string> reversed;  // the same replicas, listed the other way round
  for (size_t i = in_order.size(); i >= 2; i -= 2) {
    reversed.push_back(in_order[i - 2]);
    reversed.push_back(in_order[i - 1]);
  }
  auto moved = [](int replica) { return 2 - replica; };  // index after reversing 3 replicas

  constexpr int kSessions = 6;
  // Opens kSessions conversations named prefix0, prefix1, ...; their first turns' replicas.
  auto open = [&](const std::string& prefix, std::vector<Conversation>* conversations) {
    std::vector<int> homes;
    for (int s = 0; s < kSessions; ++s) {
      conversations->emplace_back(prefix + std::to_string(s), 120);
      const Turn turn = conversations->back().Next(port_);
      EXPECT_EQ(turn.status, 200) << turn.body;
      homes.push_back(turn.replica);
    }
    return homes;
  };

  // Phase 1: saved at SIGTERM; the replicas come back in reverse order.
  ASSERT_NO_FATAL_FAILURE(StartGateway(stop_config));
  std::vector<Conversation> conversations;
  const std::vector<int> homes = open("kept", &conversations);
  EXPECT_EQ(std::set<int>(homes.begin(), homes.end()).size(), 3u);
  // A stateful Responses API conversation: its continuation names only the previous response.
  const HttpResult opened =
      HttpPost(port_, "/v1/responses",
               json::serialize(json::object{
                   {"model", "m"}, {"input", Words("chain", 150)}, {"max_output_tokens", 4}}));
  ASSERT_EQ(opened.status, 200) << opened.body;
  const std::string response_id(json::parse(opened.body).at("id").as_string());
  const int response_home = std::stoi(opened.header("x-warden-replica"));
  EXPECT_FALSE(std::filesystem::exists(state));  // nothing saved before the stop
  EXPECT_EQ(gateway_->Stop(), 0);
  ASSERT_TRUE(std::filesystem::exists(state));
  upstream_args_ = reversed;
  ASSERT_NO_FATAL_FAILURE(StartGateway(stop_config));
  // The Responses API conversation is kept twice, by its reply and (retired) by its opening, and
  // known and restored once.
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), kSessions + 1);
  EXPECT_EQ(Admin(port_).at("sessions").at("active").as_int64(), kSessions + 1);
  EXPECT_EQ(SimMetric(port_, "warden_state_file_restored_conversations"), kSessions + 1);
  const HttpResult continued =
      HttpPost(port_, "/v1/responses",
               json::serialize(json::object{{"model", "m"},
                                            {"previous_response_id", response_id},
                                            {"input", "and then?"},
                                            {"max_output_tokens", 4}}));
  ASSERT_EQ(continued.status, 200) << continued.body;
  EXPECT_EQ(continued.header("x-warden-route"), "sticky");
  EXPECT_EQ(std::stoi(continued.header("x-warden-replica")), moved(response_home));
  for (int s = 0; s < kSessions; ++s) {
    const Turn turn = conversations[s].Next(port_);
    ASSERT_EQ(turn.status, 200) << turn.body;
    EXPECT_EQ(turn.route, "sticky") << "conversation " << s;
    EXPECT_EQ(turn.replica, moved(homes[s])) << "conversation " << s;
    // Its history is read from the replica's cache, not computed again.
    EXPECT_GT(json::parse(turn.body).at("usage").at("cache_read_input_tokens").as_int64(), 150)
        << "conversation " << s;
  }
  // ... and each counts as a turn returning to its replica (found by review: the state file did
  // not keep its previous turn's prompt).
  EXPECT_GE(Total(Admin(port_), "returning_turns"), kSessions);

  // Phase 2: killed, with nothing saved at exit: the periodic save has the new conversations.
  gateway_->Stop();
  upstream_args_ = in_order;
  ASSERT_NO_FATAL_FAILURE(StartGateway(periodic_config));
  std::vector<Conversation> later;
  const std::vector<int> later_homes = open("saved", &later);
  ASSERT_TRUE(
      Eventually([&] { return FileHasKey(state, "saved" + std::to_string(kSessions - 1)); }));
  // Counted once the write is synced, a moment after the file is in place.
  EXPECT_TRUE(Eventually([&] {
    return SimMetric(port_, "warden_state_file_saves_total", "result", "written") >= 1 &&
           SimMetric(port_, "warden_state_file_saved_timestamp_seconds") > 1.7e9;
  }));
  EXPECT_EQ(SimMetric(port_, "warden_state_file_saves_total", "result", "failed"), 0);
  gateway_->Kill();
  ASSERT_NO_FATAL_FAILURE(StartGateway(periodic_config));
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), 2 * kSessions + 1);
  // Nothing saved yet by this one: the file's own save says how old it is (found by review: 0
  // until the first change, so an idle gateway's file looked never saved).
  EXPECT_EQ(SimMetric(port_, "warden_state_file_saves_total", "result", "written"), 0);
  EXPECT_GT(SimMetric(port_, "warden_state_file_saved_timestamp_seconds"), 1.7e9);
  for (int s = 0; s < kSessions; ++s) {
    const Turn turn = later[s].Next(port_);
    ASSERT_EQ(turn.status, 200) << turn.body;
    EXPECT_EQ(turn.route, "sticky") << "conversation " << s;
    EXPECT_EQ(turn.replica, later_homes[s]) << "conversation " << s;
  }
  gateway_->Stop();
  std::filesystem::remove_all(dir);
}

// A replica drained before the gateway restarts stays drained, found by its URL (the replicas
// come back listed the other way round), and nothing is routed there.
TEST_F(GatewayTest, ADrainedReplicaStaysDrainedThroughTheStateFile) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  const std::string dir = ::testing::TempDir() + "/warden-drain-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  std::filesystem::remove(state);
  const std::vector<std::string> config = {"--state-file", state, "--state-save-interval", "3600"};
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  ASSERT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m",
                     R"({"replicas": [{"index": 0, "draining": true}]})")
                .status,
            200);
  EXPECT_EQ(gateway_->Stop(), 0);
  upstream_args_ = {upstream_args_[2], upstream_args_[3], upstream_args_[0], upstream_args_[1]};
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  const json::array replicas = Admin(port_).at("replicas").as_array();
  EXPECT_FALSE(replicas.at(0).at("draining").as_bool());
  EXPECT_TRUE(replicas.at(1).at("draining").as_bool());
  EXPECT_EQ(replicas.at(1).at("url").as_string(),
            "http://127.0.0.1:" + std::to_string(sim_ports_[0]));
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(0).at("healthy").as_bool(); }));
  for (const char* id : {"d1", "d2"}) EXPECT_EQ(Conversation(id, 50).Next(port_).replica, 0) << id;
  EXPECT_EQ(gateway_->Stop(), 0);

  // A drain time from the future (written by a clock that ran ahead) is taken as now: kept, it
  // made every peer's later change look older, and was saved again at every save.
  const auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  json::value saved = json::parse(ReadFile(state));
  saved.at("models").at(0).as_object()["drain_changed_at"] = unix_now() + 2 * 86400;
  std::ofstream(state, std::ios::trunc) << json::serialize(saved);
  ASSERT_NO_FATAL_FAILURE(StartGateway(config));
  EXPECT_TRUE(Admin(port_).at("replicas").at(1).at("draining").as_bool());
  EXPECT_EQ(Conversation("d3", 50).Next(port_).replica, 0);  // something new to save
  EXPECT_EQ(gateway_->Stop(), 0);
  const json::value resaved = json::parse(ReadFile(state));
  EXPECT_LE(resaved.at("models").at(0).at("drain_changed_at").to_number<double>(), unix_now() + 1);
  std::filesystem::remove_all(dir);
}

// In a restart the old gateway drains while the new one already serves: the old one's last save
// is at the signal, so it never writes over what the new one has saved since.
TEST_F(GatewayTest, ADrainingGatewayDoesNotWriteOverItsSuccessorsStateFile) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "5"));
  const std::string dir = ::testing::TempDir() + "/warden-overlap-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  const uint16_t port = FreePort();
  auto start = [&] {
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--model",
                                     "m",
                                     "--state-file",
                                     state,
                                     "--state-save-interval",
                                     "0.1"};
    args.insert(args.end(), {"--alias", "claude-*"});
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  };
  auto file_has = [&](const std::string& key) { return FileHasKey(state, key); };
  std::unique_ptr<ChildProcess> old_gateway = start();
  ASSERT_NE(old_gateway, nullptr);
  Conversation before("before", 40);
  ASSERT_EQ(before.Next(port).status, 200);
  BackgroundStream stream(port, "long", 300, Words("long", 30));
  ASSERT_TRUE(Eventually([&] { return stream.started(); }));
  // And a new conversation on its way in: the old gateway routes it during the drain.
  const std::string during = MessagesRequestBytes(
      R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"during"}]})", "during");
  const auto late = AcceptedConnection(port);
  late->Send(during.substr(0, during.size() - 30));
  ASSERT_EQ(::kill(old_gateway->pid(), SIGTERM), 0);
  ASSERT_TRUE(Eventually([&] { return !PortListening(port); }));  // it stopped accepting
  const std::unique_ptr<ChildProcess> new_gateway = start();
  ASSERT_NE(new_gateway, nullptr);
  Conversation after("after", 40);
  ASSERT_EQ(after.Next(port).status, 200);
  EXPECT_TRUE(Eventually([&] { return file_has("after"); }));
  late->Send(during.substr(during.size() - 30));
  EXPECT_EQ(OkResponses(late->ReadToClose()), 2);
  EXPECT_EQ(stream.Finish().status, 200);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(10)), 0);  // drained: its stream ended whole
  EXPECT_TRUE(file_has("after"));  // it wrote nothing over the new gateway's file, then or at exit
  EXPECT_FALSE(file_has("during"));
  EXPECT_TRUE(file_has("before"));
  new_gateway->Stop();
  std::filesystem::remove_all(dir);
}

// Handing over on one state file: the gateway that replaces a draining one can only take the
// port once the old one has let it go, and the old one saves before it does; so even with a large
// table (a slow save), the new gateway starts from every conversation the old one routed.
TEST_F(GatewayTest, AGatewayTakingOverAfterADrainStartsFromItsLastConversations) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(4));
  const std::string dir = ::testing::TempDir() + "/warden-handover-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  const uint16_t port = FreePort();
  auto start = [&](const std::string& save_interval) {
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--model",
                                     "m",
                                     "--alias",
                                     "claude-*",
                                     "--state-file",
                                     state,
                                     "--state-save-interval",
                                     save_interval};
    args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
    std::vector<uint16_t> ports;
    return StartWarden(args, &ports);
  };
  {  // A file of 60,000 conversations (the replicas' ids as the gateway writes them).
    std::unique_ptr<ChildProcess> first = start("0.1");
    ASSERT_NE(first, nullptr);
    ASSERT_EQ(Conversation("seed", 40).Next(port).status, 200);
    ASSERT_TRUE(Eventually([&] { return FileHasKey(state, "seed"); }));
    ASSERT_EQ(first->Stop(), 0);
    std::ifstream in(state);
    json::value file = json::parse(
        std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
    json::array& conversations = file.at("models").at(0).at("conversations").as_array();
    for (int i = 0; i < 60000; ++i) {
      conversations.push_back(json::object{{"key", "bulk-" + std::to_string(i)},
                                           {"home", i % 4},
                                           {"last_replica", i % 4},
                                           {"idle_s", 1},
                                           {"context_tokens", 1000}});
    }
    std::ofstream(state) << json::serialize(file);
  }
  std::unique_ptr<ChildProcess> old_gateway = start("1000");  // no periodic save
  ASSERT_NE(old_gateway, nullptr);
  Conversation fresh("fresh", 40);
  const Turn first = fresh.Next(port);
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(first.route, "new");
  ASSERT_EQ(::kill(old_gateway->pid(), SIGTERM), 0);
  // The new gateway starts the moment the old one lets the port go.
  ASSERT_TRUE(Eventually([&] { return HttpGet(port, "/health").status == 0; }));
  const std::unique_ptr<ChildProcess> new_gateway = start("1000");
  ASSERT_NE(new_gateway, nullptr);
  const Turn next = fresh.Next(port);
  EXPECT_EQ(next.route, "sticky");
  EXPECT_EQ(next.replica, first.replica);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(10)), 0);
  new_gateway->Stop();
  std::filesystem::remove_all(dir);
}

// A state file the gateway cannot open (another user's, say; here a link to itself) is set aside
// too, not written over by the first save: before, its conversations were lost.
TEST_F(GatewayTest, AStateFileThatCannotBeOpenedIsKeptAside) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string dir = ::testing::TempDir() + "/warden-unopened-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  std::filesystem::create_symlink("state.json", state);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  const std::regex kept_aside(
      R"(cannot read it .*starting with no conversations \(the file is kept as .*state\.json\.unreadable\.[0-9]+\))");
  EXPECT_TRUE(
      std::any_of(gateway_->lines().begin(), gateway_->lines().end(),
                  [&](const std::string& line) { return std::regex_search(line, kept_aside); }));
  ASSERT_EQ(Conversation("after-unopened", 40).Next(port_).status, 200);
  EXPECT_TRUE(Eventually([&] { return FileHasKey(state, "after-unopened"); }));
  int kept = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("state.json.unreadable."))
      kept += std::filesystem::is_symlink(entry.symlink_status());
  }
  EXPECT_EQ(kept, 1);
  EXPECT_EQ(gateway_->Stop(), 0);
  std::filesystem::remove_all(dir);
}

// A state file the gateway cannot read (cut short, say) is kept aside, not written over by the
// first save.
TEST_F(GatewayTest, AnUnreadableStateFileIsKeptAside) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string dir = ::testing::TempDir() + "/warden-unreadable-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string state = dir + "/state.json";
  const std::string cut = R"({"warden_state":1,"writer_started_at":1,"saved_at":1,"models":[{"na)";
  std::ofstream(state) << cut;
  // Files set aside before, in the seconds around this start: none is written over.
  const auto unix_now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const auto read = [](const std::string& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  std::vector<std::string> earlier;
  for (auto t = unix_now - 1; t <= unix_now + 20; ++t) {
    earlier.push_back(state + ".unreadable." + std::to_string(t));
    std::ofstream(earlier.back()) << "earlier";
  }
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  // Said before the gateway listened: among the lines read while it started.
  const std::regex kept_aside(
      R"(starting with no conversations \(the file is kept as .*state\.json\.unreadable\.[0-9]+\.2\))");
  EXPECT_TRUE(
      std::any_of(gateway_->lines().begin(), gateway_->lines().end(),
                  [&](const std::string& line) { return std::regex_search(line, kept_aside); }));
  std::string aside_path;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("state.json.unreadable.") &&
        read(entry.path().string()) == cut)
      aside_path = entry.path().string();
  }
  EXPECT_TRUE(aside_path.ends_with(".2")) << aside_path;
  for (const std::string& path : earlier) EXPECT_EQ(read(path), "earlier") << path;
  for (const std::string& path : earlier) std::filesystem::remove(path);
  ASSERT_EQ(Conversation("after-unreadable", 40).Next(port_).status, 200);
  EXPECT_TRUE(Eventually([&] { return FileHasKey(state, "after-unreadable"); }));
  EXPECT_EQ(gateway_->Stop(), 0);

  // A file readable in part (a hand-edited entry gone wrong): what can be read is used, what
  // cannot is counted in the log, and the file as it was is kept aside too.
  std::filesystem::remove(aside_path);
  json::value damaged = json::parse(ReadFile(state));
  json::array& conversations = damaged.at("models").at(0).at("conversations").as_array();
  ASSERT_EQ(conversations.size(), 1u);
  conversations.push_back(json::object{{"key", "broken"}, {"home", "zero"}});
  const std::string damaged_text = json::serialize(damaged);
  std::ofstream(state, std::ios::trunc) << damaged_text;
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  const std::regex counted(
      R"(skipped as malformed: 0 model\(s\), 1 conversation\(s\), 0 replica name\(s\) \(the )"
      R"(file as it was is kept as .*state\.json\.unreadable\.[0-9]+\))");
  EXPECT_TRUE(
      std::any_of(gateway_->lines().begin(), gateway_->lines().end(),
                  [&](const std::string& line) { return std::regex_search(line, counted); }));
  EXPECT_EQ(Admin(port_).at("sessions").at("known").as_int64(), 1);  // the readable one
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("state.json.unreadable."))
      EXPECT_EQ(ReadFile(entry.path().string()), damaged_text);
  }
  gateway_->Stop();
  std::filesystem::remove_all(dir);
}

// A save that failed (here: its directory did not exist yet) is tried again with nothing new to
// save; and a conversation that came during the drain is in the file the gateway leaves.
TEST_F(GatewayTest, AFailedSaveIsRetriedAndTheDrainsConversationsAreSaved) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string dir = ::testing::TempDir() + "/warden-retry-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);  // a missing folder at start is refused
  const std::string state = dir + "/state.json";
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  std::filesystem::remove_all(dir);  // and one gone later makes the saves fail
  auto file_has = [&](const std::string& key) { return FileHasKey(state, key); };
  Conversation early("early", 40);
  ASSERT_EQ(early.Next(port_).status, 200);
  ASSERT_TRUE(Eventually(
      [&] { return SimMetric(port_, "warden_state_file_saves_total", "result", "failed") >= 1; }));
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(Eventually([&] { return file_has("early"); }));

  const std::string request = MessagesRequestBytes(
      R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"late"}]})", "late");
  const auto late = AcceptedConnection(port_);
  late->Send(request.substr(0, request.size() - 30));
  ASSERT_EQ(::kill(gateway_->pid(), SIGTERM), 0);
  EXPECT_TRUE(Eventually([&] { return HttpGet(port_, "/health").status == 0; }));
  late->Send(request.substr(request.size() - 30));
  EXPECT_EQ(OkResponses(late->ReadToClose()), 2);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0);
  EXPECT_TRUE(file_has("late"));  // saved at exit: no other gateway had written the file since
  EXPECT_TRUE(file_has("early"));
  std::filesystem::remove_all(dir);
}

// A file whose writer started "in the future" (a clock stepped back since, or a file from another
// machine) is no successor's: the gateway saves over it.
TEST_F(GatewayTest, AStateFileFromTheFutureIsNoSuccessors) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string state = ::testing::TempDir() + "/warden-future-" + std::to_string(::getpid());
  const double future =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
      600;
  std::ofstream(state) << R"({"warden_state":1,"writer_started_at":)" << std::fixed << future
                       << R"(,"saved_at":0,"models":[]})";
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state, "--state-save-interval", "0.1"}));
  Conversation c("now", 40);
  ASSERT_EQ(c.Next(port_).status, 200);
  EXPECT_TRUE(Eventually([&] { return FileHasKey(state, "now"); }));
  EXPECT_EQ(SimMetric(port_, "warden_state_file_saves_total", "result", "refused"), 0);
  std::filesystem::remove(state);
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

std::string ChatBody(const std::string& id, int words, int max_tokens) {
  return json::serialize(json::object{
      {"model", "m"},
      {"max_tokens", max_tokens},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words(id, words)}}}}});
}

// A 150-word chat request (60-token reply) of conversation `session`.
HttpResult KeyedChatTurn(uint16_t port, const std::string& session, const std::string& words) {
  return HttpPost(port, "/v1/chat/completions", ChatBody(words, 150, 60),
                  {{"X-Session-ID", session}});
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

// vLLM's /metrics does not say its --max-num-seqs: a replica that keeps requests waiting at the
// same running count while its KV cache has room runs fewer than configured, and the log says so
// (the overflow limit, auto, follows max_num_seqs).
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

// vLLM serves LoRA adapters (--lora-modules) beside the model under their own names, listed in its
// /v1/models with the model as their parent. The gateway learns them there: a request naming one
// goes to the model's replicas with its name unchanged (an alias is rewritten; an adapter must
// not be), keeps its conversation on one replica, and the gateway lists the adapter too.
TEST_F(GatewayTest, RequestsForALoraAdapterTheReplicasServeAreRoutedUnderItsName) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(
      2, "100", {"--lora-modules", "sql=/adapters/sql", "claude-lora=/adapters/claude-lora"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());  // with the alias claude-*
  ASSERT_TRUE(Eventually([&] {
    return Admin(port_).at("served_names") == json::value(json::array{"claude-lora", "sql"});
  }));
  const auto turn = [&](const std::string& model, const std::string& words) {
    return HttpPost(port_, "/v1/chat/completions",
                    json::serialize(json::object{
                        {"model", model},
                        {"max_tokens", 8},
                        {"messages", json::array{json::object{{"role", "user"},
                                                              {"content", Words(words, 150)}}}}}),
                    {{"X-Session-ID", "lora-" + model}});
  };
  const HttpResult first = turn("sql", "lora");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(json::parse(first.body).at("model"), json::value("sql"));  // not rewritten to "m"
  const HttpResult again = turn("sql", "lora");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.header("x-warden-route"), "sticky");
  EXPECT_EQ(again.header("x-warden-replica"), first.header("x-warden-replica"));
  EXPECT_GT(json::parse(again.body)
                .at("usage")
                .at("prompt_tokens_details")
                .at("cached_tokens")
                .as_int64(),
            100);
  // A name the replicas serve goes as it is even where an alias matches it too (the alias would
  // run the base model in the adapter's place); an alias still names the model to the replicas.
  const HttpResult adapter = turn("claude-lora", "shadowed");
  ASSERT_EQ(adapter.status, 200) << adapter.body;
  EXPECT_EQ(json::parse(adapter.body).at("model"), json::value("claude-lora"));
  const HttpResult aliased = turn("claude-x", "alias");
  ASSERT_EQ(aliased.status, 200) << aliased.body;
  EXPECT_EQ(json::parse(aliased.body).at("model"), json::value("m"));
  const HttpResult unknown = turn("other", "x");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("m (also claude-*) and 2 other names its servers list"),
            std::string::npos)
      << unknown.body;
  // Listed, with the model as its parent and the path it was loaded from as its root (as vLLM
  // lists it), and found by its id.
  const json::value models = json::parse(HttpGet(port_, "/v1/models").body);
  bool listed = false;
  for (const json::value& entry : models.at("data").as_array()) {
    if (entry.at("id") == json::value("sql"))
      listed = entry.at("parent") == json::value("m") && entry.at("root") == "/adapters/sql";
  }
  EXPECT_TRUE(listed) << json::serialize(models);
  EXPECT_EQ(HttpGet(port_, "/v1/models/sql").status, 200);
}

// vLLM loads a LoRA adapter at run time on the one server a request reaches. Through the gateway
// it is loaded on every server of the model, so that the adapter's requests can go to any replica;
// one loaded on a server directly is learnt at its first request, which goes only where it is.
TEST_F(GatewayTest, LoraAdaptersLoadedAtRunTimeAreOnEveryServerOrRequestsGoWhereTheyAre) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto listed_by = [&](uint16_t port) {
    std::set<std::string> ids;
    const json::value models = json::parse(HttpGet(port, "/v1/models").body);
    for (const json::value& m : models.at("data").as_array())
      ids.insert(std::string(m.at("id").as_string()));
    return ids;
  };
  const std::string sql = R"({"lora_name":"sql","lora_path":"/adapters/sql"})";
  const HttpResult loaded = HttpPost(port_, "/v1/load_lora_adapter", sql);
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  EXPECT_EQ(loaded.body,
            "Success: LoRA adapter 'sql' added successfully on 2 servers of model 'm'.");
  for (uint16_t sim : sim_ports_) EXPECT_EQ(listed_by(sim), (std::set<std::string>{"m", "sql"}));
  // Known at once, without waiting for the next read of the servers' names.
  EXPECT_EQ(Admin(port_).at("served_names"), json::value(json::array{"sql"}));
  // Sent again: every server has it already, and says so as vLLM does.
  const HttpResult again = HttpPost(port_, "/v1/load_lora_adapter", sql);
  EXPECT_EQ(again.status, 400);
  EXPECT_EQ(json::parse(again.body).at("error").at("message"),
            json::value("The lora adapter 'sql' has already been loaded."));
  // What every server refuses passes unchanged.
  const HttpResult no_path = HttpPost(port_, "/v1/load_lora_adapter", R"({"lora_name":"x"})");
  EXPECT_EQ(no_path.status, 400);
  EXPECT_EQ(json::parse(no_path.body).at("error").at("message"),
            json::value("Both 'lora_name' and 'lora_path' must be provided."));
  const auto turn = [&](const std::string& model, const std::string& session) {
    return HttpPost(port_, "/v1/chat/completions",
                    json::serialize(json::object{
                        {"model", model},
                        {"max_tokens", 4},
                        {"messages", json::array{json::object{{"role", "user"},
                                                              {"content", Words(session, 40)}}}}}),
                    {{"X-Session-ID", session}});
  };
  std::set<std::string> replicas;
  for (int s = 0; s < 4; ++s) {
    const HttpResult r = turn("sql", "sql-" + std::to_string(s));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body).at("model"), json::value("sql"));
    replicas.insert(r.header("x-warden-replica"));
  }
  EXPECT_EQ(replicas, (std::set<std::string>{"0", "1"}));  // on every server: placed by load
  // A path spelt with an escape is the same endpoint to vLLM's server, and to the gateway: a turn.
  // So are a doubled slash and a dot segment (a base URL ending in '/'), which vLLM's server
  // does not merge: the replica gets the path the gateway routed and counted, not a 404 counted
  // as a turn (found by review).
  for (const char* spelt :
       {"/v1/chat/completion%73", "//v1/chat/completions", "/v1/./chat/completions?x=1"}) {
    const HttpResult r = HttpPost(
        port_, spelt,
        json::serialize(json::object{
            {"model", "sql"},
            {"max_tokens", 4},
            {"messages",
             json::array{json::object{{"role", "user"}, {"content", Words("sql-0", 40)}}}}}),
        {{"X-Session-ID", "sql-0"}});
    ASSERT_EQ(r.status, 200) << spelt << " " << r.body;
    EXPECT_EQ(r.header("x-warden-route"), "sticky") << spelt;
  }
  // Loaded on the second server alone, behind the gateway's back: learnt at the first request
  // naming it, and its requests go there only.
  ASSERT_EQ(HttpPost(sim_ports_[1], "/v1/load_lora_adapter",
                     R"({"lora_name":"chat","lora_path":"/adapters/chat"})")
                .status,
            200);
  for (int s = 0; s < 4; ++s) {
    const HttpResult r = turn("chat", "chat-" + std::to_string(s));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), "1");
    EXPECT_EQ(r.header("x-warden-route"), "new");
  }
  // The admin API says where each adapter is, and which the gateway keeps on every server.
  EXPECT_EQ(Admin(port_).at("lora_adapters"),
            json::parse(R"([{"name":"chat","servers":[1],"loaded_through_gateway":false,)"
                        R"("pending_updates":[]},)"
                        R"({"name":"sql","servers":[0,1],"loaded_through_gateway":true,)"
                        R"("pending_updates":[]}])"));
  // Unloaded behind the gateway's back: the server's 404 has the gateway read the names again
  // (at most once a second), and the next request gets the gateway's own 404.
  ASSERT_EQ(HttpPost(sim_ports_[1], "/v1/unload_lora_adapter", R"({"lora_name":"chat"})").status,
            200);
  EXPECT_TRUE(Eventually([&] {
    const HttpResult r = turn("chat", "chat-0");
    return r.status == 404 && r.header("x-warden-replica").empty();
  }));
  // Unloaded everywhere: the gateway's own 404 at once.
  const HttpResult unloaded = HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  ASSERT_EQ(unloaded.status, 200) << unloaded.body;
  for (uint16_t sim : sim_ports_) EXPECT_EQ(listed_by(sim).count("sql"), 0u);
  const HttpResult gone = turn("sql", "sql-0");
  EXPECT_EQ(gone.status, 404);
  EXPECT_NE(gone.body.find("model 'sql' is not served here"), std::string::npos) << gone.body;
  EXPECT_EQ(gone.header("x-warden-replica"), "");
}

// Claude Code's /model turns a session to another model mid-way: under an adapter nothing of its
// history is cached anywhere, so it is a conversation of its own, homed where the adapter is.
TEST_F(GatewayTest, ASessionThatTurnsToAnAdapterIsAConversationOfItsOwn) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const auto turn = [&](const std::string& model) {
    return HttpPost(port_, "/v1/chat/completions",
                    json::serialize(json::object{
                        {"model", model},
                        {"max_tokens", 4},
                        {"messages", json::array{json::object{{"role", "user"},
                                                              {"content", Words("s", 40)}}}}}),
                    {{"X-Claude-Code-Session-Id", "session-1"}});
  };
  const HttpResult first = turn("m");
  ASSERT_EQ(first.status, 200) << first.body;
  const int home = std::stoi(first.header("x-warden-replica"));
  const int other = 1 - home;
  // The adapter is on the other server only (loaded there behind the gateway's back).
  ASSERT_EQ(HttpPost(sim_ports_[other], "/v1/load_lora_adapter",
                     R"({"lora_name":"chat","lora_path":"/adapters/chat"})")
                .status,
            200);
  for (const char* route : {"new", "sticky", "sticky"}) {
    const HttpResult r = turn("chat");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-warden-replica"), std::to_string(other));
    EXPECT_EQ(r.header("x-warden-route"), route);
  }
  // Back to the model: the session's own conversation, still at home.
  const HttpResult back = turn("m");
  EXPECT_EQ(back.header("x-warden-replica"), std::to_string(home));
  EXPECT_EQ(back.header("x-warden-route"), "sticky");
  EXPECT_EQ(Admin(port_).at("replicas").at(other).at("overflow"), json::value(0));
}

// A vLLM that restarts has forgotten the adapters loaded while it ran. The gateway loads those it
// loaded itself again on a server back from being down; one it unloaded stays unloaded.
TEST_F(GatewayTest, AServerBackFromARestartGetsTheAdaptersLoadedThroughTheGatewayAgain) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (const char* name : {"sql", "chat"}) {
    const std::string body = json::serialize(
        json::object{{"lora_name", name}, {"lora_path", std::string("/adapters/") + name}});
    ASSERT_EQ(HttpPost(port_, "/v1/load_lora_adapter", body).status, 200);
  }
  ASSERT_EQ(HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"chat"})").status, 200);
  ASSERT_NO_FATAL_FAILURE(RestartSimWithLoraUpdating(1));
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("lacks LoRA adapter 'sql'.*loaded it"), &match));
  const std::string listed = HttpGet(sim_ports_[1], "/v1/models").body;
  EXPECT_NE(listed.find(R"("id":"sql")"), std::string::npos) << listed;
  EXPECT_EQ(listed.find(R"("id":"chat")"), std::string::npos) << listed;
  // Known to serve it again: the adapter's new conversations go to either server.
  ASSERT_TRUE(
      Eventually([&] { return Admin(port_).at("replicas").at(1).at("healthy").as_bool(); }));
  std::set<std::string> replicas;
  for (int s = 0; s < 4; ++s) {
    const HttpResult r =
        HttpPost(port_, "/v1/chat/completions",
                 R"({"model":"sql","max_tokens":4,"messages":[{"role":"user","content":"restart )" +
                     std::to_string(s) + R"("}]})",
                 {{"X-Session-ID", "restart-" + std::to_string(s)}});
    ASSERT_EQ(r.status, 200) << r.body;
    replicas.insert(r.header("x-warden-replica"));
  }
  EXPECT_EQ(replicas, (std::set<std::string>{"0", "1"}));
}

// An adapter named like the model itself could never be reached (requests naming it go to the
// model); one named like an alias would take that alias's requests from the model: both loads are
// refused, and no server is sent them. One a pattern matches loads (adapters go before aliases,
// so that they work under `--alias '*'`).
TEST_F(GatewayTest, AnAdapterNamedLikeTheModelOrAnAliasIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--alias", "claude-x"}));
  const HttpResult refused =
      HttpPost(port_, "/v1/load_lora_adapter", R"({"lora_name":"m","lora_path":"/adapters/m"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(refused.body).at("error").at("message").as_string(),
            "a LoRA adapter cannot be named 'm': the name of a model served here");
  const HttpResult aliased = HttpPost(port_, "/v1/load_lora_adapter",
                                      R"({"lora_name":"claude-x","lora_path":"/adapters/x"})");
  EXPECT_EQ(aliased.status, 400);
  EXPECT_EQ(json::parse(aliased.body).at("error").at("message").as_string(),
            "a LoRA adapter cannot be named 'claude-x': an alias of model 'm', whose requests it "
            "would take");
  std::string listed = HttpGet(sim_ports_[0], "/v1/models").body;
  EXPECT_EQ(listed.find("/adapters/"), std::string::npos) << listed;
  const HttpResult matched = HttpPost(port_, "/v1/load_lora_adapter",
                                      R"({"lora_name":"claude-y","lora_path":"/adapters/y"})");
  EXPECT_EQ(matched.status, 200) << matched.body;
  listed = HttpGet(sim_ports_[0], "/v1/models").body;
  EXPECT_NE(listed.find("/adapters/y"), std::string::npos) << listed;
}

// A server restarted between two health checks, found without an adapter loaded through the
// gateway by the read of names a request's 404 makes, gets it at its next scrape (it waited for
// the periodic read, 30 s).
TEST_F(GatewayTest, AServerRestartedUnseenGetsItsAdaptersAgainAfterTheNext404) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--scrape-interval", "2"}));
  ASSERT_EQ(
      HttpPost(port_, "/v1/load_lora_adapter", R"({"lora_name":"sql","lora_path":"/adapters/sql"})")
          .status,
      200);
  ASSERT_EQ(sims_[1]->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(1, {"--runtime-lora-updating"}));
  // Until a request finds it out: a 404 from the restarted server, or a turn on the other one.
  for (int s = 0; s < 6; ++s) {
    HttpPost(port_, "/v1/chat/completions",
             R"({"model":"sql","max_tokens":4,"messages":[{"role":"user","content":"unseen )" +
                 std::to_string(s) + R"("}]})",
             {{"X-Session-ID", "unseen-" + std::to_string(s)}});
  }
  EXPECT_TRUE(Eventually(
      [&] {
        return HttpGet(sim_ports_[1], "/v1/models").body.find(R"("id":"sql")") != std::string::npos;
      },
      8));
}

// A server down when an adapter is loaded through the gateway gets it when it is back: the gateway
// keeps the adapters it loaded on every server until they are unloaded through it.
TEST_F(GatewayTest, AServerDownWhenAnAdapterWasLoadedGetsItWhenItIsBack) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_NO_FATAL_FAILURE(StopSim(1));
  const HttpResult loaded = HttpPost(port_, "/v1/load_lora_adapter",
                                     R"({"lora_name":"sql","lora_path":"/adapters/sql"})");
  EXPECT_EQ(loaded.status, 200);
  EXPECT_EQ(loaded.body,
            "Success: LoRA adapter 'sql' added successfully on 1 server of model "
            "'m'. Down, so not yet: http://127.0.0.1:" +
                std::to_string(sim_ports_[1]) + "; the gateway sends it there when it is back.");
  ASSERT_NO_FATAL_FAILURE(StartSimAgain(1, {"--runtime-lora-updating"}));
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("lacks LoRA adapter 'sql'.*loaded it"), &match));
  EXPECT_NE(HttpGet(sim_ports_[1], "/v1/models").body.find(R"("id":"sql")"), std::string::npos);
}

// A server that stops answering without a restart keeps its adapters: one unloaded through the
// gateway meanwhile is unloaded from it when it answers again.
TEST_F(GatewayTest, AServerSilentWhenAnAdapterWasUnloadedLosesItWhenItIsBack) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (const char* name : {"sql", "chat"}) {
    const std::string body = json::serialize(
        json::object{{"lora_name", name}, {"lora_path", std::string("/adapters/") + name}});
    ASSERT_EQ(HttpPost(port_, "/v1/load_lora_adapter", body).status, 200);
  }
  ASSERT_EQ(::kill(sims_[1]->pid(), SIGSTOP), 0);
  const bool silent =
      Eventually([&] { return !Admin(port_).at("replicas").at(1).at("healthy").as_bool(); });
  if (!silent) ::kill(sims_[1]->pid(), SIGCONT);
  ASSERT_TRUE(silent);
  const HttpResult unloaded = HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  // The admin API shows what the silent server still owes.
  const json::object admin = Admin(port_);
  ::kill(sims_[1]->pid(), SIGCONT);
  bool shown = false;
  for (const json::value& adapter : admin.at("lora_adapters").as_array()) {
    if (adapter.at("name") != "sql") continue;
    shown = adapter.at("pending_updates") == json::parse(R"([{"server":1,"update":"unload"}])");
  }
  EXPECT_TRUE(shown) << json::serialize(admin.at("lora_adapters"));
  EXPECT_EQ(unloaded.status, 200) << unloaded.body;
  EXPECT_NE(unloaded.body.find("removed successfully on 1 server"), std::string::npos)
      << unloaded.body;
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex("missed LoRA adapter 'sql' being unloaded through the gateway: unloaded it"),
      &match));
  const std::string listed = HttpGet(sim_ports_[1], "/v1/models").body;
  EXPECT_EQ(listed.find(R"("id":"sql")"), std::string::npos) << listed;
  EXPECT_NE(listed.find(R"("id":"chat")"), std::string::npos) << listed;  // not unloaded
}

// A load in place that a silent server missed reaches it when it answers again (it still lists
// the adapter, from the old path, so nothing else would).
TEST_F(GatewayTest, AServerSilentDuringAnInPlaceReloadGetsItWhenItIsBack) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_EQ(
      HttpPost(port_, "/v1/load_lora_adapter", R"({"lora_name":"sql","lora_path":"/adapters/v1"})")
          .status,
      200);
  ASSERT_EQ(::kill(sims_[1]->pid(), SIGSTOP), 0);
  const bool silent =
      Eventually([&] { return !Admin(port_).at("replicas").at(1).at("healthy").as_bool(); });
  if (!silent) ::kill(sims_[1]->pid(), SIGCONT);
  ASSERT_TRUE(silent);
  const HttpResult reloaded =
      HttpPost(port_, "/v1/load_lora_adapter",
               R"({"lora_name":"sql","lora_path":"/adapters/v2","load_inplace":true})");
  ::kill(sims_[1]->pid(), SIGCONT);
  EXPECT_EQ(reloaded.status, 200) << reloaded.body;
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex("missed LoRA adapter 'sql' being reloaded in place.*reloaded it in place now"),
      &match));
  for (uint16_t sim : sim_ports_) {
    const std::string listed = HttpGet(sim, "/v1/models").body;
    EXPECT_NE(listed.find(R"("root":"/adapters/v2")"), std::string::npos) << listed;
  }
}

// vLLM does one update of an adapter at a time; so does the gateway, per model, so that what it
// remembers follows the order they took effect in. An unload sent while a load is still under way
// (a download) waits for it, and then wins: the adapter is gone, and not loaded again later.
TEST_F(GatewayTest, AnUnloadSentDuringALoadWaitsForItAndWins) {
  ASSERT_NO_FATAL_FAILURE(
      StartSims(2, "100", {"--runtime-lora-updating", "--lora-load-seconds", "50"}));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  auto load = std::async(std::launch::async, [&] {
    return HttpPost(port_, "/v1/load_lora_adapter",
                    R"({"lora_name":"sql","lora_path":"/adapters/sql"})");
  });
  std::smatch match;
  for (auto& sim : sims_)
    ASSERT_TRUE(sim->WaitForLine(std::regex("loading LoRA adapter 'sql'"), &match));
  const HttpResult unloaded = HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  EXPECT_EQ(load.get().status, 200);
  EXPECT_EQ(unloaded.status, 200) << unloaded.body;
  EXPECT_EQ(unloaded.body,
            "Success: LoRA adapter 'sql' removed successfully on 2 servers of model 'm'.");
  for (uint16_t sim : sim_ports_)
    EXPECT_EQ(HttpGet(sim, "/v1/models").body.find("sql"), std::string::npos);
  EXPECT_EQ(Admin(port_).at("lora_adapters"), json::array{});  // nor remembered, to load again
}

// The adapters loaded through the gateway are in its state file: a gateway restarted in between
// still loads them on a server back from a restart.
TEST_F(GatewayTest, TheAdaptersLoadedThroughTheGatewayOutliveItsRestart) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100", {"--runtime-lora-updating"}));
  const std::string state = ::testing::TempDir() + "/warden-adapters-state.json";
  std::filesystem::remove(state);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state}));
  ASSERT_EQ(
      HttpPost(port_, "/v1/load_lora_adapter", R"({"lora_name":"sql","lora_path":"/adapters/sql"})")
          .status,
      200);
  ASSERT_EQ(gateway_->Stop(), 0);  // saved as it stops
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--state-file", state}));
  ASSERT_NO_FATAL_FAILURE(RestartSimWithLoraUpdating(1));
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("lacks LoRA adapter 'sql'.*loaded it"), &match));
  EXPECT_NE(HttpGet(sim_ports_[1], "/v1/models").body.find(R"("id":"sql")"), std::string::npos);
  std::filesystem::remove(state);
}

// A request naming a model the gateway does not know waits while the servers' names are read
// again (2 s here: one server does not answer its /v1/models); other requests run on its thread
// meanwhile. What it read of its own headers before must still be its own after: it once took
// the next request's session key (and could read freed memory).
TEST_F(GatewayTest, ARequestWaitingForTheServersNamesKeepsItsOwnHeaders) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100", {"--runtime-lora-updating"}));
  FakeReplica slow([](const std::string&) {
    const std::string body =
        R"({"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}})";
    return FakeAnswer{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body};
  });
  upstream_args_.insert(upstream_args_.end(), {"--url", slow.url()});
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  slow.HoldModelLists();
  ASSERT_EQ(HttpPost(sim_ports_[0], "/v1/load_lora_adapter",
                     R"({"lora_name":"chat","lora_path":"/adapters/chat"})")
                .status,
            200);
  auto waiting = std::async(std::launch::async, [&] {
    return HttpPost(port_, "/v1/chat/completions",
                    R"({"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"x"}]})",
                    {{"X-Session-ID", "waiting"}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // (it waits 2 s: no sync point)
  const HttpResult other = HttpPost(port_, "/v1/chat/completions", ChatBody("other", 5, 4),
                                    {{"X-Session-ID", "other-session"}, {"X-Padding", "p"}});
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(other.header("x-warden-route"), "new");
  const HttpResult waited = waiting.get();
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_EQ(waited.header("x-warden-route"), "new");  // its own key, not the other's (sticky)
  EXPECT_EQ(json::parse(waited.body).at("model"), json::value("chat"));
}

// Loading an adapter changes what the replicas serve: with an admin token, it takes that token
// (a client key does not do); with several models, the body names the one whose servers load it.
TEST_F(GatewayTest, AdapterUpdatesTakeTheAdminTokenAndNameTheirModel) {
  std::vector<uint16_t> ports;
  for (const std::string model : {"m", "n"}) {
    ports.clear();
    sims_.push_back(StartWarden(
        {"sim", "--port", "0", "--model", model, "--time-scale", "100", "--runtime-lora-updating"},
        &ports));
    ASSERT_NE(sims_.back(), nullptr);
    sim_ports_.push_back(ports[0]);
  }
  const std::string config_path = ::testing::TempDir() + "/warden-adapters.yaml";
  {
    std::ofstream f(config_path);
    f << "admin_token: s3cret\napi_keys: [{key: sk-client-key-1}]\nmodels:\n"
      << "  - {name: m, url: 'http://127.0.0.1:" << sim_ports_[0] << "'}\n"
      << "  - {name: n, url: 'http://127.0.0.1:" << sim_ports_[1] << "'}\n";
  }
  ports.clear();
  gateway_ = StartWarden({"serve", "--config", config_path, "--listen", "127.0.0.1:0"}, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];
  const std::string load = R"({"lora_name":"sql","lora_path":"/adapters/sql","model":"n"})";
  const HttpResult keyless = HttpPost(port_, "/v1/load_lora_adapter", load);
  EXPECT_EQ(keyless.status, 401);
  EXPECT_NE(keyless.body.find("admin token"), std::string::npos) << keyless.body;
  // However the path is spelt for vLLM's server (which decodes escapes) or a proxy before it.
  for (const char* path : {"/v1/load%5Flora_adapter", "//v1/load_lora_adapter",
                           "/v1/./load_lora_adapter", "/x/../v1/load_lora_adapter"}) {
    EXPECT_EQ(HttpPost(port_, path, load, {{"Authorization", "Bearer sk-client-key-1"}}).status,
              401)
        << path;
  }
  // SageMaker's adapter endpoints, which vLLM serves too, would load on one server: not passed on.
  const HttpResult sagemaker =
      HttpPost(port_, "/adapters", load, {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(sagemaker.status, 404);
  EXPECT_NE(sagemaker.body.find("/v1/load_lora_adapter"), std::string::npos) << sagemaker.body;
  EXPECT_EQ(
      HttpCall(port_, "DELETE", "/adapters/sql", "", {{"Authorization", "Bearer s3cret"}}).status,
      404);
  EXPECT_EQ(
      HttpPost(port_, "/v1/load_lora_adapter", load, {{"Authorization", "Bearer sk-client-key-1"}})
          .status,
      401);
  // A browser's preflight carries no credentials: it is let through (the request after it is not).
  const HttpResult preflight =
      HttpCall(port_, "OPTIONS", "/v1/load_lora_adapter", "",
               {{"Origin", "http://admin.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_NE(preflight.status, 401) << preflight.body;
  const Headers admin = {{"Authorization", "Bearer s3cret"}};
  // Only a JSON body, as vLLM's route takes (a web page's text/plain POST needs no preflight), and
  // nothing from a page of another site.
  const HttpResult text =
      HttpPost(port_, "/v1/load_lora_adapter", load,
               {{"Authorization", "Bearer s3cret"}, {"Content-Type", "text/plain"}});
  EXPECT_EQ(text.status, 415);
  EXPECT_NE(text.body.find("Only 'application/json' is allowed"), std::string::npos) << text.body;
  for (const Headers& page :
       {Headers{{"Origin", "http://evil.example"}}, Headers{{"Sec-Fetch-Site", "cross-site"}}}) {
    Headers headers = admin;
    headers.insert(headers.end(), page.begin(), page.end());
    EXPECT_EQ(
        HttpPost(port_, "/v1/unload_lora_adapter", R"({"lora_name":"x","model":"n"})", headers)
            .status,
        403);
  }
  const HttpResult unnamed = HttpPost(port_, "/v1/load_lora_adapter",
                                      R"({"lora_name":"sql","lora_path":"/adapters/sql"})", admin);
  EXPECT_EQ(unnamed.status, 400);
  EXPECT_NE(unnamed.body.find("several models"), std::string::npos) << unnamed.body;
  // Spelt otherwise, it is the same request.
  const HttpResult loaded = HttpPost(port_, "/v1/load%5Flora_adapter", load, admin);
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  EXPECT_NE(loaded.body.find("of model 'n'"), std::string::npos) << loaded.body;
  EXPECT_EQ(HttpGet(sim_ports_[0], "/v1/models").body.find("sql"), std::string::npos);
  EXPECT_NE(HttpGet(sim_ports_[1], "/v1/models").body.find("sql"), std::string::npos);
  // A client's request for it takes the client's key, as any other.
  const std::string request =
      R"({"model":"sql","max_tokens":4,"messages":[{"role":"user","content":"x"}]})";
  EXPECT_EQ(HttpPost(port_, "/v1/chat/completions", request, admin).status, 401);
  const HttpResult served = HttpPost(port_, "/v1/chat/completions", request,
                                     {{"Authorization", "Bearer sk-client-key-1"}});
  EXPECT_EQ(served.status, 200) << served.body;
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
    if (i == 0) ASSERT_EQ(::kill(sims_[0]->pid(), SIGSTOP), 0);  // the first one stays running
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
    if (i == 0) ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 1; }));
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
    if (i == 0) ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 1; }));
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

double SimMetric(uint16_t port, const std::string& name, const std::string& label,
                 const std::string& value) {
  std::vector<PrometheusSample> samples;
  std::string error;
  const HttpResult r = HttpGet(port, "/metrics");
  if (!ParsePrometheusText(r.body, &samples, &error)) return -1;
  double sum = 0;
  for (const auto& s : samples) {
    if (s.name == name && (label.empty() || s.label(label) == value)) sum += s.value;
  }
  return sum;
}

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

// A conversation over /v1/messages (Claude Code's session header) whose turns can be stopped
// mid-stream, as Claude Code's Esc does, once their first text has come; each turn then resends
// the history with a short reply and a new question. `fields`: the body's besides its messages.
struct EscConversation {
  explicit EscConversation(json::object fields) : fields(std::move(fields)) {}
  // The stream as the client got it.
  std::string Turn(uint16_t port, bool stop) {
    json::object body = fields;
    body["model"] = "m";
    body["stream"] = true;
    body["messages"] = messages;
    std::string text;
    const HttpResult r =
        HttpStream(port, "/v1/messages", json::serialize(body),
                   {{"X-Claude-Code-Session-Id", "esc"}}, [&](std::string_view data) {
                     text.append(data);
                     return !stop || text.find("text_delta") == std::string::npos;
                   });
    EXPECT_EQ(r.status, 200);
    messages.push_back(json::object{{"role", "assistant"}, {"content", "Sure."}});
    messages.push_back(json::object{{"role", "user"}, {"content", Words("more", 20)}});
    return text;
  }
  json::object fields;
  json::array messages{json::object{{"role", "user"}, {"content", Words("esc", 300)}}};
};

// A turn the client stops mid-stream (Claude Code's Esc) ends before the usage that says how much
// of its prompt the cache gave (vLLM puts it in message_delta): it counts neither as computed
// nor as a turn that missed its history, so the panel's shares and the log's history warning
// stay true; the next whole turn is counted as usual.
TEST_F(GatewayTest, ATurnTheClientStopsCountsNoCacheSplit) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1, "20"));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  EscConversation esc(json::object{{"max_tokens", 40}});
  const auto turn = [&](bool stop) { esc.Turn(port_, stop); };
  turn(false);
  turn(true);
  ASSERT_TRUE(Eventually([&] { return Total(Admin(port_), "in_flight") == 0; }));
  json::object replica = Admin(port_).at("replicas").at(0).as_object();
  EXPECT_EQ(replica.at("requests").as_int64(), 2);
  EXPECT_EQ(replica.at("cache_reported").as_int64(), 1);
  EXPECT_EQ(replica.at("cache_unreported").as_int64(), 0);
  EXPECT_EQ(replica.at("usage_unknown").as_int64(), 0);
  EXPECT_EQ(replica.at("returning_turns").as_int64(), 0);
  turn(false);
  replica = Admin(port_).at("replicas").at(0).as_object();
  EXPECT_EQ(replica.at("cache_reported").as_int64(), 2);
  EXPECT_EQ(replica.at("returning_turns").as_int64(), 1);
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

// A chat request naming `scenario` in its only message, for a fake replica to tell apart.
std::string ScenarioRequest(const std::string& scenario) {
  return R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":")" + scenario +
         R"("}]})";
}

// The bytes of a POST /v1/chat/completions request with `body`.
std::string ChatRequestBytes(const std::string& body) {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
         "application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string JsonResponse(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

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
    std::smatch said;  // the prompt's size, as message_start says it
    EXPECT_TRUE(std::regex_search(text, said, std::regex(R"("input_tokens":\s*([0-9]+))"))) << text;
    return said.empty() ? -1 : std::stoi(said[1]);
  };
  ASSERT_GT(turn(false), 0);
  const int cut_prompt = turn(true);
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
        "Content-Length: 2\r\n\r\n{}";
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
  // ends (BrokenStreamEvent).
  RawConnection stalled(port_);
  stalled.Send(ChatRequestBytes(ScenarioRequest("stall")));
  const std::string cut = stalled.ReadToClose();
  EXPECT_TRUE(stalled.closed());
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
  // The client's side up to the end of the body, or of the connection.
  const auto messages = [&](const std::string& scenario) {
    const std::string body =
        R"({"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":")" +
        scenario + R"("}]})";
    RawConnection c(port_);
    c.Send(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    return c.ReadUntil("\r\n0\r\n\r\n");
  };
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
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("failed").as_int64(), 3);
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
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("failed").as_int64(), 4);
  // On a path whose stream is not read for its end, the close is the end.
  RawConnection other(port_);
  other.Send("GET /v1/other/unframed HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const std::string other_stream = other.ReadUntil("\r\n0\r\n\r\n");
  EXPECT_EQ(other_stream.find("event: error"), std::string::npos) << other_stream;
  EXPECT_TRUE(other_stream.ends_with("data: {\"type\":\"message_start\"}\n\n\r\n0\r\n\r\n"))
      << other_stream;
  EXPECT_EQ(Admin(port_).at("replicas").at(0).at("failed").as_int64(), 4);
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

// At max_connections, a new client closes the connection that has waited longest for a request's
// head: clients holding connections open with half a head cannot keep the others out (found by
// a security review: 20,000 of them took every file descriptor, and the gateway answered no one).
TEST_F(GatewayTest, AtMaxConnectionsTheOldestHalfSentHeadMakesRoom) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1", "--max-connections", "16"}));
  std::vector<std::unique_ptr<RawConnection>> holders;
  for (int i = 0; i < 16; ++i) {
    holders.push_back(std::make_unique<RawConnection>(port_));
    holders.back()->Send("GET / HTTP/1.1\r\nHo");  // the first has waited longest
  }
  const HttpResult served =
      HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"), {{"x-session-id", "in"}});
  EXPECT_EQ(served.status, 200) << served.body << served.error;
  EXPECT_GE(SimMetric(port_, "warden_connections_shed_total"), 1);
  holders.front()->ReadToClose();
  EXPECT_TRUE(holders.front()->closed());
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex(R"(the most this thread keeps \(max_connections\))"),
                                    &match));
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
  EXPECT_NE(surrogate.body.find("model: the string is not valid Unicode"), std::string::npos)
      << surrogate.body;
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
  EXPECT_EQ(SimMetric(port_, "warden_error_answers_total", "status", "400"), 11);  // 5 of limits
  EXPECT_EQ(SimMetric(port_, "warden_error_answers_total", "status", "404"), 7);
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

// A replica that answers every request with a small JSON body.
FakeAnswer AnswerOkJson(const std::string&) {
  FakeAnswer a;
  a.bytes = JsonResponse(R"({"ok":true})");
  return a;
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

// The shards share their port (SO_REUSEPORT), but not with another process: a second gateway on
// the same address fails to start instead of taking half the connections.
TEST_F(GatewayTest, ASecondGatewayOnTheSamePortDoesNotStart) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::vector<std::string> argv = {WARDEN_BIN, "serve", "--listen",
                                   "127.0.0.1:" + std::to_string(port_)};
  argv.insert(argv.end(), upstream_args_.begin(), upstream_args_.end());
  argv.insert(argv.end(), {"--model", "m"});
  auto second = ChildProcess::Start(argv);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->Wait(std::chrono::seconds(10)), 1);
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);  // the first one still serves
}

// SIGHUP and SIGUSR2 while the gateway starts (here: waiting for a silent peer's homes) no
// longer end it by their default action: it serves, then reads its config again (found by
// review: a config deploy's reload during a restart took the gateway down).
TEST_F(GatewayTest, AReloadAskedForWhileTheGatewayStartsIsDoneOnceItServes) {
  FakeReplica silent_peer([](const std::string&) { return FakeAnswer{}; });  // never answers
  FakeReplica replica(AnswerOkJson);
  const uint16_t port = FreePort();
  auto gateway =
      ChildProcess::Start({WARDEN_BIN, "serve", "--listen", "127.0.0.1:" + std::to_string(port),
                           "--model", "m", "--url", replica.url(), "--peer", silent_peer.url()});
  ASSERT_NE(gateway, nullptr);
  ASSERT_TRUE(Eventually([&] { return silent_peer.requests() >= 1; }));  // asking for its homes
  EXPECT_FALSE(PortListening(port));
  ASSERT_EQ(::kill(gateway->pid(), SIGHUP), 0);
  std::smatch match;
  EXPECT_TRUE(gateway->WaitForLine(
      std::regex("SIGHUP came while the gateway started: reading the config again"), &match));
  EXPECT_EQ(HttpPost(port, "/v1/chat/completions", ScenarioRequest("x")).status, 200);
  ASSERT_EQ(::kill(gateway->pid(), SIGTERM), 0);
  EXPECT_EQ(gateway->Wait(std::chrono::seconds(20)), 0);
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
  // The same for a call the gateway makes to every server (it called itself thousands of times
  // over, until out of file descriptors: found by review).
  const HttpResult crossed = HttpPost(port, "/reset_prefix_cache", "");
  EXPECT_EQ(crossed.status, 502);
  EXPECT_NE(crossed.body.find("answered 508"), std::string::npos) << crossed.body;
  EXPECT_LT(crossed.body.size(), 2000u) << crossed.body;  // one hop, not thousands
}

TEST_F(GatewayTest, AnAdminTokenProtectsTheAdminApiButNotTheTraffic) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(1));
  const std::string config_path = ::testing::TempDir() + "/warden-token.yaml";
  {
    std::ofstream f(config_path);
    f << "admin_token: s3cret\nmodels:\n  - name: m\n    url: http://127.0.0.1:" << sim_ports_[0]
      << "\n";
  }
  std::vector<uint16_t> ports;
  gateway_ = StartWarden({"serve", "--config", config_path, "--listen", "127.0.0.1:0"}, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];
  const HttpResult refused = HttpGet(port_, "/warden/v1/models/m");
  EXPECT_EQ(refused.status, 401);
  EXPECT_EQ(refused.header("www-authenticate"), R"(Bearer realm="warden")");
  EXPECT_EQ(HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"affinity": false})").status, 401);
  EXPECT_NE(refused.body.find("admin token required"), std::string::npos) << refused.body;
  const HttpResult wrong =
      HttpCall(port_, "GET", "/warden/v1/models/m", "", {{"Authorization", "Bearer s3cre"}});
  EXPECT_EQ(wrong.status, 401);
  // A token was given: the answer says it is the wrong one, not that one is needed.
  EXPECT_NE(wrong.body.find("the admin token given is not this gateway's admin_token"),
            std::string::npos)
      << wrong.body;
  const HttpResult ok =
      HttpCall(port_, "GET", "/warden/v1/models/m", "", {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(ok.status, 200);
  // The scheme's case does not matter (RFC 9110 §11.1).
  EXPECT_EQ(HttpCall(port_, "GET", "/warden/v1/models/m", "", {{"Authorization", "bearer s3cret"}})
                .status,
            200);
  const HttpResult wrong_method =
      HttpCall(port_, "DELETE", "/warden/v1/models/m", "", {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_EQ(wrong_method.header("allow"), "GET, HEAD, PATCH");
  EXPECT_TRUE(json::parse(ok.body).at("affinity").as_bool());  // the refused PATCH changed nothing
  EXPECT_EQ(HttpPost(port_, "/v1/messages",
                     R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}]})")
                .status,
            200);
  // What changes every server (a cache reset, a sleep) is the admin's (found by review: a client
  // could put every server to sleep).
  const HttpResult reset = HttpPost(port_, "/reset_prefix_cache", "");
  EXPECT_EQ(reset.status, 401);
  EXPECT_NE(reset.body.find("needs the admin token"), std::string::npos) << reset.body;
  EXPECT_EQ(HttpPost(port_, "/sleep", "x").status, 401);  // from its head too
  EXPECT_EQ(HttpPost(port_, "/reset_prefix_cache", "", {{"Authorization", "Bearer s3cret"}}).status,
            200);
  // Refused from its head: a 30 MB body is neither invited (100 Continue) nor read.
  RawConnection big(port_);
  big.Send(
      "PATCH /warden/v1/models/m HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
      "Content-Length: 30000000\r\n\r\n");
  EXPECT_TRUE(big.ReadToClose().starts_with("HTTP/1.1 401")) << "not 100 Continue";
  // Nor one over the body limit (found by review: it got 413, told its size before its token).
  RawConnection over(port_);
  over.Send(
      "PATCH /warden/v1/models/m HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
      "Content-Length: 40000000\r\n\r\n");
  EXPECT_TRUE(over.ReadToClose().starts_with("HTTP/1.1 401"));
}

// Without an admin token, a web page in the user's browser must not change the gateway: a change
// sent from another origin (which a "simple" POST can be, with no CORS preflight) is refused; the
// panel's own, curl's and peers' are not. The panel cannot be framed by another site.
TEST_F(GatewayTest, ChangesFromPagesOfOtherOriginsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string host = "127.0.0.1";  // as the test client sends Host
  const auto affinity_off = [&](const Headers& headers) {
    return HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"affinity": false})", headers)
        .status;
  };
  EXPECT_EQ(affinity_off({{"Origin", "http://evil.example"}}), 403);
  EXPECT_EQ(affinity_off({{"Origin", "null"}}), 403);
  EXPECT_EQ(affinity_off({{"Sec-Fetch-Site", "same-site"}, {"Origin", "http://" + host}}), 403);
  EXPECT_EQ(affinity_off({{"Content-Type", "text/plain"}, {"Sec-Fetch-Site", "cross-site"}}), 403);
  EXPECT_TRUE(Admin(port_).at("affinity").as_bool());            // nothing changed
  EXPECT_EQ(affinity_off({{"Origin", "http://" + host}}), 200);  // the panel, from an older browser
  EXPECT_EQ(affinity_off({{"Sec-Fetch-Site", "same-origin"}}), 200);  // the panel
  EXPECT_EQ(affinity_off({{"Origin", "https://gw.example"}, {"X-Forwarded-Host", "gw.example"}}),
            200);                    // the panel behind a proxy that rewrites Host
  EXPECT_EQ(affinity_off({}), 200);  // curl
  EXPECT_EQ(HttpGet(port_, "/warden/v1/models/m").header("x-content-type-options"), "nosniff");
  for (const char* page : {"/panel", "/panel/models/m", "/panel/assets/panel.js"}) {
    const HttpResult r = HttpGet(port_, page);
    EXPECT_EQ(r.status, 200) << page;
    EXPECT_EQ(r.header("x-frame-options"), "DENY") << page;
    EXPECT_NE(r.header("content-security-policy").find("frame-ancestors 'none'"), std::string::npos)
        << page;
    EXPECT_NE(r.header("content-security-policy").find("default-src 'self'"), std::string::npos)
        << page;
  }
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

// An error body the replica encoded (the client's Accept-Encoding went to it) is passed on as it
// is: rewritten, it went out as plain JSON still said to be gzip (found by review).
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

// Claude Code sends a title or a quota probe under the session's id, on its small model and
// without the history: the gateway sends it home and keeps the conversation's context, whose
// next turn goes home and reads its history from the cache.
TEST_F(GatewayTest, ASideRequestUnderASessionsIdLeavesTheConversationAsItWas) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--access-log"}));
  const std::string history = Words("hist", 1500);
  const auto turn = [&](const std::string& model, const std::string& text) {
    return HttpPost(port_, "/v1/messages?beta=true",
                    R"({"model":")" + model +
                        R"(","max_tokens":8,"messages":[{"role":"user","content":")" + text +
                        R"("}]})",
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
  const HttpResult title = turn("claude-haiku-4-5", "Write a title for this conversation");
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

// A preflight reaches a replica unkeyed, so it goes on without a body and without the replicas'
// key (found by review: anyone's bytes went to the replica under the gateway's key, on any path).
TEST_F(GatewayTest, APreflightGoesOnWithoutABodyOrTheReplicasKey) {
  std::mutex mu;
  std::string seen;
  FakeReplica cors([&](const std::string& request) {
    std::lock_guard lock(mu);
    seen = request;
    FakeAnswer a;
    a.bytes = "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: *\r\nContent-Length: 2\r\n\r\nOK";
    return a;
  });
  ASSERT_NO_FATAL_FAILURE(StartGatewayBefore(
      cors, {"--api-keys-file", TempFile("keys", "sk-web\n"), "--replica-api-key-file",
             TempFile("replica-key", "sk-replica\n")}));
  const HttpResult preflight =
      HttpCall(port_, "OPTIONS", "/v1/chat/completions", R"({"model":"m","messages":[]})",
               {{"Origin", "http://app.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(preflight.status, 200) << preflight.body;
  std::lock_guard lock(mu);
  EXPECT_EQ(seen.rfind("OPTIONS /v1/chat/completions HTTP/1.1\r\n", 0), 0u) << seen;
  EXPECT_EQ(seen.find("sk-replica"), std::string::npos) << seen;
  EXPECT_NE(seen.find("Content-Length: 0\r\n"), std::string::npos) << seen;
  EXPECT_TRUE(seen.ends_with("\r\n\r\n")) << seen;
}

// A browser's CORS preflight carries no key (browsers never send credentials with one): a keyed
// gateway passes it on to a replica, as a keyed vLLM lets OPTIONS through, and the replica's CORS
// answer comes back; the request that follows needs its key as any other, and what the gateway
// answers itself says, as vLLM's answers do, that any page may read it.
TEST_F(GatewayTest, ABrowsersPreflightReachesAReplicaWithoutAKey) {
  std::vector<uint16_t> ports;
  ASSERT_NO_FATAL_FAILURE(StartSimWithKey("sk-replica", &ports));
  upstream_args_ = {"--url", "http://127.0.0.1:" + std::to_string(ports[0])};
  ASSERT_NO_FATAL_FAILURE(
      StartGateway({"--api-keys-file", TempFile("keys", "sk-web\n"), "--replica-api-key-file",
                    TempFile("replica-key", "sk-replica\n")}));
  const Headers from_page = {{"Origin", "http://app.example"}};
  Headers preflight_headers = from_page;
  preflight_headers.push_back({"Access-Control-Request-Method", "POST"});
  preflight_headers.push_back({"Access-Control-Request-Headers", "x-api-key, content-type"});

  const HttpResult preflight = HttpCall(port_, "OPTIONS", "/v1/messages", {}, preflight_headers);
  EXPECT_EQ(preflight.status, 200) << preflight.body;
  EXPECT_EQ(preflight.header("access-control-allow-origin"), "*");
  EXPECT_EQ(preflight.header("access-control-allow-headers"), "x-api-key, content-type");
  EXPECT_EQ(preflight.header("x-warden-replica"), "0");
  const json::object after_preflight = Admin(port_);  // no generation: no key source, no usage
  EXPECT_EQ(after_preflight.at("key_sources").at("none").as_int64(), 0);
  EXPECT_EQ(Total(after_preflight, "usage_unknown"), 0);

  const std::string messages = json::serialize(json::object{
      {"model", "m"},
      {"max_tokens", 8},
      {"messages", json::array{json::object{{"role", "user"}, {"content", "hello"}}}}});
  const HttpResult unkeyed = HttpPost(port_, "/v1/messages", messages, from_page);
  EXPECT_EQ(unkeyed.status, 401);
  // What the gateway answers itself on the API the page may read too (a browser client would
  // see a network failure, not the error), as it may vLLM's own answers.
  EXPECT_EQ(unkeyed.header("access-control-allow-origin"), "*");
  Headers keyed = from_page;
  keyed.push_back({"x-api-key", "sk-web"});
  const HttpResult served = HttpPost(port_, "/v1/messages", messages, keyed);
  EXPECT_EQ(served.status, 200) << served.body;
  EXPECT_EQ(served.header("access-control-allow-origin"), "*");
  const HttpResult unknown =
      HttpPost(port_, "/v1/messages", R"({"model":"nope","max_tokens":8,"messages":[]})", keyed);
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.header("access-control-allow-origin"), "*");
  for (const char* listing : {"/v1/models", "/v1/models/m"}) {
    const HttpResult models = HttpCall(port_, "GET", listing, {}, keyed);
    EXPECT_EQ(models.status, 200) << listing;
    EXPECT_EQ(models.header("access-control-allow-origin"), "*") << listing;
  }
  // Not without an Origin (no browser asked), nor on the gateway's own admin API.
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/models", {}, {{"x-api-key", "sk-web"}})
                .header("access-control-allow-origin"),
            "");
  EXPECT_EQ(HttpCall(port_, "GET", "/warden/v1/models", {}, from_page)
                .header("access-control-allow-origin"),
            "");
  // An OPTIONS that is no preflight still needs a key.
  EXPECT_EQ(HttpCall(port_, "OPTIONS", "/v1/messages", {}, from_page).status, 401);
}

// With api_keys, the model API answers only requests that carry one of them (either header
// Claude Code sends), in each API's error shape otherwise; the probes, health and metrics stay
// open. The replicas, like vLLM with --api-key, get their own key from the gateway: on requests,
// and on the health checks and scrapes (the context length is read from their guarded
// /v1/models).
TEST_F(GatewayTest, TheModelApiNeedsOneOfTheGatewaysKeysAndTheReplicasGetTheirOwn) {
  std::vector<uint16_t> ports;
  ASSERT_NO_FATAL_FAILURE(StartSimWithKey("sk-replica", &ports));
  const HttpResult direct = HttpPost(ports[0], "/v1/chat/completions", ScenarioRequest("direct"));
  ASSERT_EQ(direct.status, 401);
  EXPECT_EQ(direct.body, R"({"error":"Unauthorized"})");  // vLLM's
  upstream_args_ = {"--url", "http://127.0.0.1:" + std::to_string(ports[0])};
  ASSERT_NO_FATAL_FAILURE(StartGateway(
      {"--api-keys-file", TempFile("client-keys", "# the team\nalice sk-alice\nsk-bob\n"),
       "--replica-api-key-file", TempFile("replica-key", "sk-replica\n")}));
  const std::string messages = json::serialize(json::object{
      {"model", "claude-sonnet-4-5"},
      {"max_tokens", 8},
      {"messages", json::array{json::object{{"role", "user"}, {"content", "hello"}}}}});

  const HttpResult no_key = HttpPost(port_, "/v1/messages", messages);
  EXPECT_EQ(no_key.status, 401);
  EXPECT_EQ(no_key.header("www-authenticate"), R"(Bearer realm="warden")");
  const json::value anthropic = json::parse(no_key.body);
  EXPECT_EQ(anthropic.at("type"), "error");
  EXPECT_EQ(anthropic.at("error").at("type"), "authentication_error");
  EXPECT_NE(std::string(anthropic.at("error").at("message").as_string()).find("x-api-key"),
            std::string::npos);
  // A path the gateway routes as /v1/messages is refused in that API's shape too (found by
  // review: the shape came from the path as written).
  for (const std::string path : {"/v1/%6dessages", "/metrics/../v1/messages"}) {
    const HttpResult spelled = HttpPost(port_, path, messages);
    EXPECT_EQ(spelled.status, 401) << path;
    EXPECT_EQ(json::parse(spelled.body).at("error").at("type"), "authentication_error") << path;
  }
  const HttpResult wrong_key = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("wrong"),
                                        {{"Authorization", "Bearer sk-mallory"}});
  EXPECT_EQ(wrong_key.status, 401);
  const json::value openai = json::parse(wrong_key.body);
  EXPECT_EQ(openai.at("error").at("code"), "invalid_api_key");
  EXPECT_EQ(openai.at("error").at("message"), "invalid API key");
  EXPECT_EQ(HttpGet(port_, "/v1/models").status, 401);
  EXPECT_EQ(HttpCall(port_, "HEAD", "/").status, 200);
  EXPECT_EQ(HttpGet(port_, "/health").status, 200);
  // Only a GET or HEAD the gateway answers itself goes without a key: any other method on those
  // paths is refused or passed on to a replica (and a proxy there may make /panel/../v1/... of it).
  const std::vector<std::pair<std::string, std::string>> passed_on = {
      {"POST", "/health"},
      {"POST", "/"},
      {"POST", "/metrics"},
      {"POST", "/panel/x"},
      {"OPTIONS", "/v1/chat/completions"},
      {"GET", "/v1/responses/resp_someone"},
      {"HEAD", "/v1/models"}};
  for (const auto& [method, target] : passed_on)
    EXPECT_EQ(HttpCall(port_, method, target, "{}").status, 401) << method << " " << target;
  RawConnection dotted(port_);
  dotted.Send(ChatRequestBytes(ScenarioRequest("dotted"))
                  .replace(0, std::string("POST /v1/chat/completions").size(),
                           "POST /panel/../v1/chat/completions"));
  EXPECT_NE(dotted.ReadUntil("\r\n\r\n").find("HTTP/1.1 401"), std::string::npos);
  const HttpResult metrics = HttpGet(port_, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("warden_unauthorized_requests_total 13"), std::string::npos);
  EXPECT_EQ(Total(Admin(port_), "requests"), 0);  // none of them reached a replica

  // Anthropic's header or a Bearer token, either key: served, by a replica that wants its own.
  const HttpResult anthropic_ok =
      HttpPost(port_, "/v1/messages", messages,
               {{"x-api-key", "sk-alice"}, {"X-Claude-Code-Session-Id", "k1"}});
  EXPECT_EQ(anthropic_ok.status, 200) << anthropic_ok.body;
  EXPECT_EQ(anthropic_ok.header("x-warden-replica"), "0");
  const HttpResult bearer_ok = HttpPost(port_, "/v1/chat/completions", ScenarioRequest("bob"),
                                        {{"Authorization", "bearer sk-bob"}});
  EXPECT_EQ(bearer_ok.status, 200) << bearer_ok.body;
  EXPECT_EQ(Total(Admin(port_), "requests"), 2);
  EXPECT_TRUE(Admin(port_).at("replicas").at(0).at("healthy").as_bool());
  // Each key's requests and tokens, under its name (or its place in the list).
  EXPECT_EQ(SimMetric(port_, "warden_client_requests_total", "client", "alice"), 1);
  EXPECT_EQ(SimMetric(port_, "warden_client_requests_total", "client", "key-2"), 1);
  EXPECT_GT(SimMetric(port_, "warden_client_prompt_tokens_total", "client", "alice"), 0);
  EXPECT_GT(SimMetric(port_, "warden_client_output_tokens_total", "client", "alice"), 0);
  EXPECT_GT(SimMetric(port_, "warden_client_output_tokens_total", "client", "key-2"), 0);
  const json::value clients = json::parse(HttpGet(port_, "/warden/v1/clients").body);
  EXPECT_EQ(clients.at("unauthorized").as_int64(), 13);  // (two in the shape check)
  const json::value& alice = clients.at("clients").at(0);
  EXPECT_EQ(alice.at("name"), "alice");
  EXPECT_EQ(alice.at("requests").as_int64(), 1);
  EXPECT_EQ(
      alice.at("prompt_tokens").as_int64(),
      alice.at("cached_prompt_tokens").as_int64() + alice.at("computed_prompt_tokens").as_int64());
  // Its prompt tokens, split as the replica's usage said.
  const json::value reply = json::parse(anthropic_ok.body);
  const json::value& usage = reply.at("usage");
  EXPECT_EQ(alice.at("cached_prompt_tokens").as_int64(),
            usage.at("cache_read_input_tokens").as_int64());
  EXPECT_GT(alice.at("prompt_tokens").as_int64(), 0);
  EXPECT_GT(alice.at("output_tokens").as_int64(), 0);
  EXPECT_TRUE(Eventually([&] {
    const HttpResult models = HttpCall(port_, "GET", "/v1/models", {}, {{"x-api-key", "sk-bob"}});
    return models.status == 200 &&
           models.body.find(R"("max_model_len":32768)") != std::string::npos;
  }));
}

// A replica that serves no model by the configured name answers every request 404 (vLLM's
// default served name is the model's path), and one that wants a key the gateway does not send,
// 401: the log says either at once.
TEST_F(GatewayTest, TheLogSaysWhenAReplicaServesAnotherNameOrWantsAKey) {
  std::vector<uint16_t> named, keyed, ports;
  sims_.push_back(StartWarden(
      {"sim", "--port", "0", "--model", "Qwen/Qwen3-4B", "--time-scale", "100"}, &named));
  ASSERT_NE(sims_.back(), nullptr);
  sims_.push_back(StartWarden(
      {"sim", "--port", "0", "--model", "m", "--time-scale", "100", "--api-key", "sk-x"}, &keyed));
  ASSERT_NE(sims_.back(), nullptr);
  gateway_ =
      StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "qwen3-4b", "--url",
                   "http://127.0.0.1:" + std::to_string(named[0]), "--scrape-interval", "0.2"},
                  &ports);
  ASSERT_NE(gateway_, nullptr);
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(std::regex("serves 'Qwen/Qwen3-4B', not 'qwen3-4b'"), &match));
  auto keyless =
      StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url",
                   "http://127.0.0.1:" + std::to_string(keyed[0]), "--scrape-interval", "0.2"},
                  &ports);
  ASSERT_NE(keyless, nullptr);
  EXPECT_TRUE(keyless->WaitForLine(
      std::regex(R"(asks for an API key \(401 on /v1/models\): set the model's replica_api_key)"),
      &match));
}

// A session table too small for the conversations going on forgets active ones: it says so in
// the log, the admin API and /metrics, rather than only by a count stuck at its bound.
TEST_F(GatewayTest, ASessionTableTooSmallSaysSo) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100"));
  ASSERT_NO_FATAL_FAILURE(
      StartGateway({"--config", TempFile("small-table.yaml", "session: {max_entries: 3}\n")}));
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("x"),
                       {{"X-Claude-Code-Session-Id", "table-" + std::to_string(i)}})
                  .status,
              200);
  }
  const json::value sessions = Admin(port_).at("sessions");
  EXPECT_EQ(sessions.at("known").as_int64(), 3);
  EXPECT_EQ(sessions.at("evicted").as_int64(), 2);
  EXPECT_EQ(sessions.at("evicted_active").as_int64(), 2);
  EXPECT_EQ(SimMetric(port_, "warden_active_sessions_evicted_total"), 2);
  std::smatch match;
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(the session table is full \(3 conversations now\))"), &match));
}

// A key with max_in_flight: past that many of its requests in progress, the next is answered
// 429 with Retry-After (Claude Code and the SDKs retry it), and others' requests go on.
TEST_F(GatewayTest, AClientKeyPastItsRequestsInFlightGets429) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "5"));
  const std::string config =
      TempFile("limited.yaml",
               "api_keys: [{name: ci, key: sk-ci, max_in_flight: 1}, {name: dev, key: sk-dev}]\n");
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--config", config}));
  const std::string body =
      R"({"model":"m","max_tokens":300,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"long"}]})";
  RawConnection first(port_);
  first.Send(
      "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
      "application/json\r\nx-api-key: "
      "sk-ci\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_NE(first.ReadUntil("content_block_delta").find("content_block_delta"), std::string::npos);
  const std::string small =
      R"({"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]})";
  const HttpResult limited = HttpPost(port_, "/v1/messages", small, {{"x-api-key", "sk-ci"}});
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.header("retry-after"), "1");
  EXPECT_EQ(json::parse(limited.body).at("error").at("type"), "rate_limit_error");
  EXPECT_EQ(HttpPost(port_, "/v1/messages", small, {{"x-api-key", "sk-dev"}}).status, 200);
  const json::value during = json::parse(HttpGet(port_, "/warden/v1/clients").body);
  EXPECT_EQ(during.at("clients").at(0).at("in_flight").as_int64(), 1);
  EXPECT_EQ(during.at("clients").at(0).at("limited").as_int64(), 1);
  ASSERT_NE(first.ReadUntil("message_stop").find("message_stop"), std::string::npos);
  EXPECT_TRUE(Eventually([&] {
    return HttpPost(port_, "/v1/messages", small, {{"x-api-key", "sk-ci"}}).status == 200;
  }));
  EXPECT_EQ(SimMetric(port_, "warden_client_in_flight", "client", "ci"), 0);
  // (the retries above may have met the first request's last moments: 429 too)
  EXPECT_GE(SimMetric(port_, "warden_client_limited_total", "client", "ci"), 1);
}

// A key with tokens_per_minute: its requests go while its budget has tokens left; each answer's
// engine work (prompt tokens not read from the cache, and output tokens) is taken from it; once it
// is used up the next generation is answered 429 in its API's shape with the seconds until it has
// room again, while other keys' requests and the key's own token counts go on.
TEST_F(GatewayTest, AClientKeyPastItsTokenBudgetGets429UntilItRefills) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1));
  const std::string config = TempFile(
      "budget.yaml",
      "api_keys: [{name: ci, key: sk-ci, tokens_per_minute: 60}, {name: dev, key: sk-dev},\n"
      "           {name: oa, key: sk-oa, tokens_per_minute: 6000},\n"
      "           {name: quits, key: sk-quits, tokens_per_minute: 60}]\n");
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--config", config}));
  // Eighty words of prompt and ten tokens of output: more than the minute's 60 in one answer.
  std::string words;
  for (int i = 0; i < 80; ++i) words += "word ";
  const std::string body =
      R"({"model":"m","max_tokens":10,"ignore_eos":true,"messages":[{"role":"user","content":")" +
      words + R"("}]})";
  const HttpResult first = HttpPost(port_, "/v1/messages", body, {{"x-api-key", "sk-ci"}});
  ASSERT_EQ(first.status, 200) << first.body;
  const json::value usage = json::parse(first.body).at("usage");
  // (Anthropic's usage: the prompt is input_tokens, cache_creation_input_tokens and
  // cache_read_input_tokens; what was read from the cache is free.)
  const int64_t cost = usage.at("input_tokens").as_int64() +
                       usage.at("cache_creation_input_tokens").as_int64() +
                       usage.at("output_tokens").as_int64();
  ASSERT_GT(cost, 60) << first.body;  // (nothing cached yet: the whole prompt was computed)
  const HttpResult refused = HttpPost(port_, "/v1/messages", body, {{"x-api-key", "sk-ci"}});
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(json::parse(refused.body).at("error").at("type"), "rate_limit_error");
  EXPECT_NE(refused.body.find("budget of 60 tokens a minute"), std::string::npos) << refused.body;
  // Owed: cost - 60, paid back at a token a second (less the time the first answer took).
  const int retry_after = std::stoi(refused.header("retry-after"));
  EXPECT_GE(retry_after, cost - 60 - 5);
  EXPECT_LE(retry_after, cost - 60 + 1);
  // Chat completions are refused in their own shape too; count_tokens is no generation: it goes.
  const HttpResult chat = HttpPost(port_, "/v1/chat/completions", body, {{"x-api-key", "sk-ci"}});
  EXPECT_EQ(chat.status, 429);
  EXPECT_EQ(json::parse(chat.body).at("error").at("code"), "rate_limit_exceeded");
  EXPECT_EQ(HttpPost(port_, "/v1/messages/count_tokens", body, {{"x-api-key", "sk-ci"}}).status,
            200);
  EXPECT_EQ(HttpPost(port_, "/v1/messages", body, {{"x-api-key", "sk-dev"}}).status, 200);
  const json::value clients = json::parse(HttpGet(port_, "/warden/v1/clients").body);
  const json::value& ci = clients.at("clients").at(0);
  EXPECT_EQ(ci.at("tokens_per_minute").as_int64(), 60);
  EXPECT_EQ(ci.at("budget_limited").as_int64(), 2);
  EXPECT_LT(ci.at("budget_left").as_double(), 0);
  EXPECT_EQ(ci.at("requests").as_int64(), 4);  // every request it sent, refused or not
  EXPECT_TRUE(clients.at("clients").at(1).at("budget_left").is_null());  // dev has no budget
  EXPECT_EQ(SimMetric(port_, "warden_client_budget_limited_total", "client", "ci"), 2);
  EXPECT_EQ(SimMetric(port_, "warden_client_budget_limited_total", "client", "dev"), 0);
  EXPECT_LT(SimMetric(port_, "warden_client_budget_tokens", "client", "ci"), 0);

  // An OpenAI stream without include_usage says no usage: its token events and its prompt's
  // size are taken instead (an ordinary OpenAI SDK stream is not free).
  const std::string stream = R"({"model":"m","max_tokens":50,"ignore_eos":true,"stream":true,)"
                             R"("messages":[{"role":"user","content":")" +
                             words + R"("}]})";
  const HttpResult streamed =
      HttpPost(port_, "/v1/chat/completions", stream, {{"x-api-key", "sk-oa"}});
  ASSERT_EQ(streamed.status, 200);
  ASSERT_EQ(streamed.body.find("\"usage\""), std::string::npos);  // none in the stream
  const double left = json::parse(HttpGet(port_, "/warden/v1/clients").body)
                          .at("clients")
                          .at(2)
                          .at("budget_left")
                          .to_number<double>();
  EXPECT_LT(left, 6000 - 100);  // 50 output tokens and about 100 of prompt, less a second's refill

  // A stream its client leaves after the first token: its prompt and what it got are paid for.
  const std::string leaves = R"({"model":"m","max_tokens":300,"ignore_eos":true,"stream":true,)"
                             R"("messages":[{"role":"user","content":")" +
                             words + R"("}]})";
  HttpStream(port_, "/v1/messages", leaves, {{"x-api-key", "sk-quits"}},
             [](std::string_view data) { return data.find("content_block_delta") == data.npos; });
  EXPECT_TRUE(Eventually([&] {
    return json::parse(HttpGet(port_, "/warden/v1/clients").body)
               .at("clients")
               .at(3)
               .at("budget_left")
               .to_number<double>() < 0;  // 60 a minute, refilled a token a second
  }));

  // Refused from its head alone (no key): the answer says the request's id too.
  const HttpResult keyless = HttpPost(port_, "/v1/messages", body,
                                      {{"X-Request-Id", "no-key-1"}, {"Expect", "100-continue"}});
  EXPECT_EQ(keyless.status, 401);
  EXPECT_EQ(keyless.header("x-request-id"), "no-key-1");
}

// The gateway's own error answers give the client key's place back before they go out too: a
// client with one place, answered 503, sends its next request at once and is not told 429.
TEST_F(GatewayTest, AClientKeysPlaceIsFreeOnceItHasTheGatewaysErrorAnswer) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "5"));
  ASSERT_NO_FATAL_FAILURE(StartGateway(
      {"--config",
       TempFile("one-place.yaml", "api_keys: [{name: ci, key: sk-ci, max_in_flight: 1}]\n")}));
  EXPECT_EQ(sims_[0]->Stop(), 0);
  const std::string small =
      R"({"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]})";
  ASSERT_TRUE(Eventually([&] {
    return HttpPost(port_, "/v1/messages", small, {{"x-api-key", "sk-ci"}}).status == 503;
  }));
  for (int i = 0; i < 30; ++i)
    EXPECT_EQ(HttpPost(port_, "/v1/messages", small, {{"x-api-key", "sk-ci"}}).status, 503) << i;
  EXPECT_EQ(SimMetric(port_, "warden_client_limited_total", "client", "ci"), 0);
}

// Where the replicas have their own key, the client's credentials (for the gateway) go no
// further; where they have none, the client's headers pass as they came.
// A client without a key gets its 401 from the request's head: its body (here announced at
// 20 MB, and never sent) is not waited for, nor invited with a 100 Continue.
TEST_F(GatewayTest, AClientWithoutAKeyIsAnsweredBeforeItSendsItsBody) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "5"));
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--api-keys-file", TempFile("keys", "sk-ok\n")}));
  const auto head = [](std::string_view key_line) {
    return "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
           std::string(key_line) + "Expect: 100-continue\r\nContent-Length: 20000000\r\n\r\n";
  };
  RawConnection keyless(port_);
  keyless.Send(head(""));
  const std::string refused = keyless.ReadToClose();
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 401")) << refused;
  EXPECT_NE(refused.find("authentication_error"), std::string::npos);
  EXPECT_NE(refused.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(keyless.closed());

  RawConnection wrong(port_);
  wrong.Send(head("x-api-key: sk-wrong\r\n"));
  EXPECT_TRUE(wrong.ReadToClose().starts_with("HTTP/1.1 401"));

  RawConnection keyed(port_);
  keyed.Send(head("x-api-key: sk-ok\r\n"));
  EXPECT_TRUE(keyed.ReadUntil("\r\n\r\n").starts_with("HTTP/1.1 100 Continue"));
  EXPECT_FALSE(keyed.closed());
  const HttpResult metrics = HttpGet(port_, "/metrics");
  EXPECT_NE(metrics.body.find("warden_unauthorized_requests_total 2"), std::string::npos);
}

// A figure in KiB from /proc/`pid`/status, as "VmRSS:" (resident now) or "VmHWM:" (at the peak);
// -1 if it is not there.
long ProcStatusKib(pid_t pid, std::string_view field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with(field)) return std::stol(line.substr(field.size()));
  return -1L;
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

// SIGHUP reads the clients' keys again: a new key works and a withdrawn one stops, with no
// restart; a client whose name stays keeps its counters; a bad file, or none of the keys, leaves
// the keys as they were. The config file's own api_keys_file, which the flag replaces, is never
// read (here it does not exist), at start or on SIGHUP.
TEST_F(GatewayTest, SighupReadsTheClientKeysAgain) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100"));
  const std::string keys = TempFile("reloaded-keys", "alice sk-alice-1\nbob sk-bob\n");
  const std::string config = TempFile("config.yaml", "api_keys_file: /nonexistent/keys\n");
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--config", config, "--api-keys-file", keys}));
  const std::string small =
      R"({"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]})";
  const auto status_with = [&](const std::string& key) {
    return HttpPost(port_, "/v1/messages", small, {{"x-api-key", key}}).status;
  };
  EXPECT_EQ(status_with("sk-alice-1"), 200);
  EXPECT_EQ(status_with("sk-bob"), 200);
  EXPECT_EQ(status_with("sk-alice-2"), 401);
  const auto reload = [&](const std::string& text, const std::string& logged) {
    std::ofstream(keys, std::ios::trunc) << text;
    ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
    std::smatch match;
    ASSERT_TRUE(gateway_->WaitForLine(std::regex(logged), &match)) << logged;
  };

  // Logged once every shard has the new keys: the next request is checked against them.
  ASSERT_NO_FATAL_FAILURE(
      reload("alice sk-alice-2\ncarol sk-carol\n", R"(SIGHUP: 2 client key\(s\) read again)"));
  EXPECT_EQ(status_with("sk-alice-2"), 200);
  EXPECT_EQ(status_with("sk-alice-1"), 401);
  EXPECT_EQ(status_with("sk-bob"), 401);
  EXPECT_EQ(status_with("sk-carol"), 200);
  const json::value clients = json::parse(HttpGet(port_, "/warden/v1/clients").body);
  ASSERT_EQ(clients.at("clients").as_array().size(), 2u);
  EXPECT_EQ(clients.at("clients").at(0).at("name"), "alice");
  EXPECT_GE(clients.at("clients").at(0).at("requests").as_int64(), 2);  // one on each key
  EXPECT_EQ(clients.at("clients").at(1).at("name"), "carol");
  EXPECT_EQ(clients.at("clients").at(1).at("requests").as_int64(), 1);

  ASSERT_NO_FATAL_FAILURE(
      reload("a b c\n", "is not applied .*line 1 has 3 words.*client keys .* stay"));
  ASSERT_NO_FATAL_FAILURE(reload("# nobody\n", "is not applied .*no key.*client keys .* stay"));
  EXPECT_EQ(status_with("sk-carol"), 200);
  EXPECT_EQ(status_with("sk-bob"), 401);

  // An edit a reload does not apply is named in the log; the keys are read all the same.
  std::ofstream(config, std::ios::trunc) << "api_keys_file: /nonexistent/keys\nbody_limit_mb: 2\n";
  ASSERT_NO_FATAL_FAILURE(reload("bob sk-bob\n", "SIGHUP: body_limit_mb in .*: not applied"));
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(std::regex(R"(SIGHUP: 1 client key\(s\) read again)"), &match));
  EXPECT_EQ(status_with("sk-bob"), 200);

  // A file a start would refuse applies nothing, the keys included.
  std::ofstream(config, std::ios::trunc)
      << "api_keys_file: /nonexistent/keys\ndrain_timeout_s: -1\n";
  ASSERT_NO_FATAL_FAILURE(reload("carol sk-carol\n", "SIGHUP: .* is not applied.*drain_timeout_s"));
  EXPECT_EQ(status_with("sk-bob"), 200);
  EXPECT_EQ(status_with("sk-carol"), 401);
}

// SIGHUP applies a model's affinity, overflow limit and policy from the edited config file at
// once, as the admin API's PATCH does; other edits of the model are named and wait for a restart.
TEST_F(GatewayTest, SighupAppliesAModelsAffinityAndOverflowLimit) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100"));
  const std::string model = "models:\n  - name: m\n    url: http://127.0.0.1:9\n";
  const std::string config = TempFile("config.yaml", model);
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--config", config}));
  Conversation conversation("reloaded", 40);
  EXPECT_EQ(conversation.Next(port_).route, "new");
  const auto reload = [&](const std::string& settings, const std::string& logged) {
    std::ofstream(config, std::ios::trunc) << model << settings;
    ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
    std::smatch match;
    ASSERT_TRUE(gateway_->WaitForLine(std::regex(logged), &match)) << logged;
  };

  ASSERT_NO_FATAL_FAILURE(
      reload("    affinity: off\n    overflow_limit: 2\n",
             "SIGHUP: model m: affinity off, overflow limit 2, as .* now says"));
  json::object admin = Admin(port_);
  EXPECT_FALSE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 2);
  EXPECT_FALSE(admin.at("overflow_limit_auto").as_bool());
  EXPECT_EQ(conversation.Next(port_).route, "balanced");

  // Back to auto (a quarter of --max-num-seqs 32), another policy, admission and idle time;
  // tls_verify needs a restart.
  ASSERT_NO_FATAL_FAILURE(
      reload("    policy: round-robin\n    admission: fifo\n    session_idle_timeout_s: 60\n"
             "    tls_verify: false\n",
             "SIGHUP: model m: affinity on, overflow limit 8 \\(auto\\), policy round-robin, "
             "admission fifo, session idle timeout 60 s"));
  std::smatch match;
  ASSERT_TRUE(gateway_->WaitForLine(
      std::regex(R"(SIGHUP: models\[0\] \(m\): tls_verify in .*: not applied)"), &match));
  admin = Admin(port_);
  EXPECT_TRUE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 8);
  EXPECT_TRUE(admin.at("overflow_limit_auto").as_bool());
  EXPECT_EQ(admin.at("policy").as_string(), "round-robin");
  EXPECT_EQ(admin.at("admission").as_string(), "fifo");

  // A file a start would refuse changes nothing, and says why.
  ASSERT_NO_FATAL_FAILURE(reload("    affinity: off\n    policy: nonsense\n",
                                 "SIGHUP: .* is not applied .*unknown policy 'nonsense'"));
  EXPECT_TRUE(Admin(port_).at("affinity").as_bool());
  // The two reloads that changed something are noted for the panel's chart.
  std::vector<std::string> noted;
  const json::object last = Admin(port_);
  for (const json::value& c : last.at("changes").as_array()) {
    EXPECT_EQ(c.at("by").as_string(), "SIGHUP") << c;
    noted.emplace_back(c.at("what").as_string());
  }
  EXPECT_EQ(noted, (std::vector<std::string>{
                       "affinity off, overflow limit 2",
                       "affinity on, overflow limit 8 (auto), policy round-robin, admission fifo, "
                       "session idle timeout 60 s"}));
}

// SIGHUP applies a model's edited aliases (a name added is routed, one taken out is not, and
// /v1/models lists them as they are now) and turns the access log on.
TEST_F(GatewayTest, SighupAppliesAModelsAliasesAndTheAccessLog) {
  ASSERT_NO_FATAL_FAILURE(StartSims(1, "100"));
  const std::string model = "models:\n  - name: m\n    url: http://127.0.0.1:9\n";
  const std::string config = TempFile("aliases.yaml", model + "    aliases: [claude-*]\n");
  std::vector<std::string> args = {"serve", "--listen", "127.0.0.1:0", "--config", config};
  args.insert(args.end(), upstream_args_.begin(), upstream_args_.end());
  std::vector<uint16_t> ports;
  gateway_ = StartWarden(args, &ports);
  ASSERT_NE(gateway_, nullptr);
  port_ = ports[0];
  const auto status = [&](const std::string& name) {
    return HttpPost(port_, "/v1/chat/completions",
                    R"({"model":")" + name +
                        R"(","max_tokens":4,"messages":[{"role":"user","content":"hi"}]})")
        .status;
  };
  EXPECT_EQ(status("claude-sonnet-4-5"), 200);
  EXPECT_EQ(status("gpt-4o"), 404);

  std::ofstream(config, std::ios::trunc) << model << "    aliases: [gpt-4o]\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  std::smatch match;
  ASSERT_TRUE(
      gateway_->WaitForLine(std::regex("SIGHUP: model m: aliases gpt-4o, as .* now says"), &match));
  EXPECT_EQ(status("gpt-4o"), 200);
  EXPECT_EQ(status("claude-sonnet-4-5"), 404);
  EXPECT_NE(HttpGet(port_, "/v1/models").body.find(R"("id":"gpt-4o")"), std::string::npos);
  EXPECT_EQ(Admin(port_).at("aliases"), json::array{"gpt-4o"});

  // The access log, turned on by the file (said once every thread has it): the next request
  // has its line.
  std::ofstream(config, std::ios::trunc) << "access_log: true\n"
                                         << model << "    aliases: [gpt-4o]\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(std::regex("SIGHUP: the access log on"), &match));
  EXPECT_EQ(status("gpt-4o"), 200);
  EXPECT_TRUE(gateway_->WaitForLine(
      std::regex(R"(POST /v1/chat/completions 200 [0-9.]+ms id=\S+ model=m)"), &match));

  // max_num_seqs: the auto overflow limit follows it at once.
  EXPECT_EQ(Admin(port_).at("overflow_limit").as_int64(), 64);  // a quarter of the default 256
  std::ofstream(config, std::ios::trunc) << "access_log: true\n"
                                         << model << "    aliases: [gpt-4o]\n"
                                         << "    max_num_seqs: 32\n    scrape_interval_s: 0.5\n"
                                         << "    max_sessions: 50\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(
      std::regex(
          R"(SIGHUP: model m: max_num_seqs 32 \(overflow limit 8, auto\), scrape interval 0.5 s, at most 50 sessions, as)"),
      &match));
  const json::object admin = Admin(port_);
  EXPECT_EQ(admin.at("max_num_seqs").as_int64(), 32);
  EXPECT_EQ(admin.at("scrape_interval_s").as_double(), 0.5);
  EXPECT_EQ(admin.at("max_sessions").as_int64(), 50);
  EXPECT_EQ(admin.at("session_idle_timeout_s").as_double(), 600);
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 8);
  EXPECT_TRUE(admin.at("overflow_limit_auto").as_bool());
}

// What a PATCH set outlives a restart through the state file while the config says what it
// said then; a setting the config changes afterwards (at a restart or on SIGHUP) is the config's.
TEST_F(GatewayTest, APatchedSettingOutlivesARestartUntilTheConfigChangesIt) {
  ASSERT_NO_FATAL_FAILURE(StartSims(2, "100"));
  const std::string model = "models:\n  - name: m\n    url: http://127.0.0.1:9\n";
  const std::string config = TempFile("config.yaml", model);
  const std::string state = ::testing::TempDir() + "/warden-patched-state.json";
  std::filesystem::remove(state);
  const std::vector<std::string> flags = {"--config", config, "--state-file", state};
  ASSERT_NO_FATAL_FAILURE(StartGateway(flags));
  ASSERT_EQ(
      HttpCall(port_, "PATCH", "/warden/v1/models/m", R"({"affinity": false, "overflow_limit": 3})")
          .status,
      200);
  const json::object patched = {{"affinity", {{"value", "off"}, {"config", "on"}}},
                                {"overflow_limit", {{"value", "3"}, {"config", "auto"}}}};
  EXPECT_EQ(Admin(port_).at("patched"), patched);
  ASSERT_EQ(gateway_->Stop(), 0);  // saved as it stops

  ASSERT_NO_FATAL_FAILURE(StartGateway(flags));
  json::object admin = Admin(port_);
  EXPECT_FALSE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 3);
  EXPECT_EQ(admin.at("patched"), patched);
  // (Logged before the gateway listens: among the lines already read.)
  const auto logged = [&](const std::string& pattern) {
    return std::any_of(
        gateway_->lines().begin(), gateway_->lines().end(),
        [&](const std::string& l) { return std::regex_search(l, std::regex(pattern)); });
  };
  EXPECT_TRUE(logged("model m: affinity off as set through the admin API before the restart"));
  // The summary says what is in effect, not the config's values.
  EXPECT_TRUE(logged("model m: 2 replica\\(s\\) at .*, affinity off, overflow limit 3,"));
  EXPECT_EQ(Conversation("after-restart", 40).Next(port_).route, "balanced");
  ASSERT_EQ(gateway_->Stop(), 0);

  // The file now gives an overflow limit: it wins; the affinity PATCH still holds.
  std::ofstream(config, std::ios::trunc) << model << "    overflow_limit: 5\n";
  ASSERT_NO_FATAL_FAILURE(StartGateway(flags));
  admin = Admin(port_);
  EXPECT_FALSE(admin.at("affinity").as_bool());
  EXPECT_EQ(admin.at("overflow_limit").as_int64(), 5);
  EXPECT_EQ(admin.at("patched"),
            (json::object{{"affinity", {{"value", "off"}, {"config", "on"}}}}));
  EXPECT_TRUE(logged(
      "model m: overflow_limit 3, set through the admin API before the restart, is dropped: the "
      "config says 5 now"));
  std::smatch match;

  // A SIGHUP that finds the file changed the affinity applies the file's: nothing is patched.
  std::ofstream(config, std::ios::trunc) << model << "    overflow_limit: 5\n    affinity: on\n"
                                         << "    policy: round-robin\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(std::regex("SIGHUP: model m: policy round-robin"), &match));
  admin = Admin(port_);
  EXPECT_FALSE(admin.at("affinity").as_bool());  // the file's affinity did not change: on
  EXPECT_EQ(admin.at("patched").as_object().size(), 1u);
  std::ofstream(config, std::ios::trunc) << model << "    overflow_limit: 5\n    affinity: off\n"
                                         << "    policy: round-robin\n";
  ASSERT_EQ(::kill(gateway_->pid(), SIGHUP), 0);
  ASSERT_TRUE(gateway_->WaitForLine(std::regex("SIGHUP: model m: affinity off"), &match));
  EXPECT_EQ(Admin(port_).at("patched"), json::object{});
  std::filesystem::remove(state);
}

// `serve --check-replicas` asks each server once, as a start's first scrape does: a server as
// configured exits 0; engines other than data_parallel_size, a server serving another name, one
// that does not report cached prompt tokens or none answering exit 3, each named with the
// warning a start would log.
TEST_F(GatewayTest, CheckReplicasSaysWhetherEachServerIsAsConfigured) {
  ASSERT_NO_FATAL_FAILURE(StartDpSim(2));
  const std::string url = upstream_args_[1];
  const auto check = [&](std::vector<std::string> args, const std::string& expected) {
    args.insert(args.begin(), {WARDEN_BIN, "serve", "--check-replicas"});
    auto process = ChildProcess::Start(args);
    EXPECT_NE(process, nullptr);
    std::smatch line;
    EXPECT_TRUE(process->WaitForLine(std::regex(expected), &line)) << expected;
    return process->Wait(std::chrono::seconds(20));
  };
  EXPECT_EQ(check({"--model", "m", "--url", url, "--dp", "2"},
                  "model m: " + url +
                      " answers: serves m, 2 engines, [0-9]+ tokens of KV cache "
                      "each, SIMULATED"),
            0);
  EXPECT_EQ(check({"--model", "m", "--url", url, "--dp", "4"},
                  "reports 2 data-parallel engine\\(s\\) in /metrics, and the config has 4"),
            3);
  EXPECT_EQ(check({"--model", "qwen", "--url", url, "--dp", "2"}, "serves 'm', not 'qwen'"), 3);
  // A server that leaves the cached share out of its usage (vLLM without
  // --enable-prompt-tokens-details) is found by two one-token requests.
  std::vector<uint16_t> quiet_ports;
  const auto quiet = StartWarden({"sim", "--port", "0", "--model", "m", "--time-scale", "100",
                                  "--api-latency", "0", "--no-prompt-tokens-details"},
                                 &quiet_ports);
  ASSERT_NE(quiet, nullptr);
  EXPECT_EQ(check({"--model", "m", "--url", "http://127.0.0.1:" + std::to_string(quiet_ports[0])},
                  "does not say how many prompt tokens it read from its prefix cache .*start "
                  "vLLM with --enable-prompt-tokens-details"),
            3);
  const std::string nobody = "http://127.0.0.1:" + std::to_string(FreePort());
  EXPECT_EQ(check({"--model", "m", "--url", url, "--url", nobody},
                  "replicas NOT OK: 2 of 2 server\\(s\\) not as configured"),
            3);
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

TEST_F(GatewayTest, TheReplicasKeyGoesInPlaceOfTheClientsCredentials) {
  std::mutex mu;
  std::vector<std::string> heads;
  FakeReplica fake([&](const std::string& request) {
    std::lock_guard lock(mu);
    heads.push_back(request.substr(0, request.find("\r\n\r\n")));
    FakeAnswer a;
    a.bytes = JsonResponse(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}})");
    return a;
  });
  upstream_args_ = {"--url", fake.url()};
  const Headers credentials = {{"Authorization", "Bearer sk-alice"}, {"x-api-key", "sk-alice"}};
  const auto lower = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  };

  ASSERT_NO_FATAL_FAILURE(StartGateway(
      {"--threads", "1", "--replica-api-key-file", TempFile("fake-key", "sk-vllm\n")}));
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("own"), credentials).status,
            200);
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(heads.size(), 1u);
    const std::string head = lower(heads[0]);
    EXPECT_NE(head.find("authorization: bearer sk-vllm\r\n"), std::string::npos) << heads[0];
    EXPECT_EQ(head.find("sk-alice"), std::string::npos) << heads[0];
    EXPECT_EQ(head.find("x-api-key"), std::string::npos) << heads[0];
    EXPECT_EQ(head.find("authorization"), head.rfind("authorization"));  // one only
  }
  gateway_.reset();

  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  ASSERT_EQ(HttpPost(port_, "/v1/chat/completions", ScenarioRequest("theirs"), credentials).status,
            200);
  std::lock_guard lock(mu);
  ASSERT_EQ(heads.size(), 2u);
  const std::string head = lower(heads[1]);
  EXPECT_NE(head.find("authorization: bearer sk-alice\r\n"), std::string::npos) << heads[1];
  EXPECT_NE(head.find("x-api-key: sk-alice\r\n"), std::string::npos) << heads[1];
}

// `serve --check` reads the config as serve would, says what it would serve and exits 0, starting
// nothing; a wrong config, or a certificate it cannot read, exits 2 with the reason.
TEST(GatewayCheckTest, CheckSaysWhetherAConfigIsRightAndStartsNothing) {
  const uint16_t port = FreePort();
  const std::string good =
      TempFile("check-good.yaml", "listen: 127.0.0.1:" + std::to_string(port) +
                                      "\nmodels:\n  - name: m\n    url: http://127.0.0.1:9\n"
                                      "    data_parallel_size: 2\n");
  auto check = ChildProcess::Start({WARDEN_BIN, "serve", "--config", good, "--check"});
  ASSERT_NE(check, nullptr);
  std::smatch line;
  EXPECT_TRUE(check->WaitForLine(
      std::regex("model m: 2 replica\\(s\\) at http://127.0.0.1:9.*overflow limit "
                 "64 \\(auto: max_num_seqs 256 / 4\\)"),
      &line));
  // Where it would listen, and the auto overflow limit's source (found by review).
  EXPECT_TRUE(check->WaitForLine(std::regex("configuration OK: 1 model\\(s\\), 2 replica\\(s\\), "
                                            "to listen on 127.0.0.1:" +
                                            std::to_string(port)),
                                 &line));
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 0);
  EXPECT_FALSE(PortListening(port));
  // An empty config path (an unset variable in a unit file) is an error, not the demo.
  check = ChildProcess::Start(
      {WARDEN_BIN, "serve", "--config", "", "--listen", "127.0.0.1:" + std::to_string(port)});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);
  EXPECT_FALSE(PortListening(port));

  const std::string bad = TempFile("check-bad.yaml", "models:\n  - name: m\n    url: 5\n");
  check = ChildProcess::Start({WARDEN_BIN, "serve", "--config", bad, "--check"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);

  check = ChildProcess::Start({WARDEN_BIN, "serve", "--config", good, "--check", "--tls-cert-file",
                               ::testing::TempDir() + "/no-such-cert.pem", "--tls-key-file",
                               ::testing::TempDir() + "/no-such-key.pem"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);
  EXPECT_FALSE(PortListening(port));

  // A repeatable flag takes one value: CLI11 read "[]" as an empty list and took the --check after
  // it for the value, and the gateway started.
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  check = ChildProcess::Start({WARDEN_BIN, "serve", "--listen", listen, "--model", "m", "--url",
                               "http://127.0.0.1:9", "--alias", "[]", "--check"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 0);
  EXPECT_FALSE(PortListening(port));
  // Nor does a flag whose value is missing take the next flag for it.
  check = ChildProcess::Start({WARDEN_BIN, "serve", "--listen", listen, "--url",
                               "http://127.0.0.1:9", "--model", "m", "--alias", "--check"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);
  EXPECT_FALSE(PortListening(port));
  // A flag the parser refuses is a usage error too: 2, as the config's.
  check = ChildProcess::Start({WARDEN_BIN, "serve", "--listen", listen, "--model", "m", "--url",
                               "http://127.0.0.1:9", "--max-num-seqs", "abc", "--check"});
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->Wait(std::chrono::seconds(10)), 2);
  // A value out of range names the flag that gave it, not a config key nobody wrote.
  const std::string command = std::string(WARDEN_BIN) +
                              " serve --model m --url http://127.0.0.1:9 --scrape-interval 0 "
                              "--check 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string said;
  char chunk[512];
  while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) said.append(chunk, n);
  EXPECT_EQ(WEXITSTATUS(::pclose(pipe)), 2);
  EXPECT_NE(said.find("command line: --scrape-interval: 0 must be"), std::string::npos) << said;
  // The demo's too (checked before its replicas start).
  const std::string demo = std::string(WARDEN_BIN) + " serve --demo --drain-delay 7200 2>&1";
  pipe = ::popen(demo.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  said.clear();
  while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) said.append(chunk, n);
  EXPECT_EQ(WEXITSTATUS(::pclose(pipe)), 2);
  EXPECT_NE(said.find("command line: --drain-delay: must be"), std::string::npos) << said;
}

// A bad flag stops the demo before its simulated replicas start (they were started, and said so,
// before the listen address was checked).
TEST(GatewayCheckTest, TheDemosFlagsAreCheckedBeforeItsReplicasStart) {
  auto demo = ChildProcess::Start({WARDEN_BIN, "serve", "--listen", "127.0.0.1:99999"});
  ASSERT_NE(demo, nullptr);
  std::smatch line;
  EXPECT_FALSE(demo->WaitForLine(std::regex("DEMO"), &line, std::chrono::seconds(10)));
  EXPECT_EQ(demo->Wait(std::chrono::seconds(10)), 2);
}

}  // namespace
}  // namespace warden::testing
