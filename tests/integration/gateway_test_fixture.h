// The fixture and helpers of `warden serve`'s integration tests (gateway_*_test.cc): real
// `warden sim` processes (or fake replicas) and the gateway, started on loopback and stopped.
#pragma once

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
inline std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path =
      ::testing::TempDir() + "/warden-" + name + "-" + std::to_string(::getpid());
  std::ofstream(path) << text;
  return path;
}

inline json::object Admin(uint16_t port, const std::string& model = "m") {
  const HttpResult r = HttpGet(port, "/warden/v1/models/" + model);
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body).as_object();
}

inline int64_t Total(const json::object& model, const char* field) {
  int64_t sum = 0;
  for (const auto& r : model.at("replicas").as_array()) sum += r.at(field).as_int64();
  return sum;
}

// The bytes of a POST /v1/messages request with `body`, keyed by `session` if not empty.
inline std::string MessagesRequestBytes(const std::string& body, const std::string& session = "") {
  std::string head =
      "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  if (!session.empty()) head += "X-Claude-Code-Session-Id: " + session + "\r\n";
  return head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A connection the server has accepted (a request answered on it), so that it is not in the
// listen backlog when the test goes on.
inline std::unique_ptr<RawConnection> AcceptedConnection(uint16_t port) {
  auto c = std::make_unique<RawConnection>(port);
  c->Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_NE(c->ReadUntil("\r\n\r\n").find("HTTP/1.1 200"), std::string::npos);
  return c;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Whether the file at `path` names the conversation `key` (as a JSON string).
inline bool FileHasKey(const std::string& path, const std::string& key) {
  return ReadFile(path).find("\"" + key + "\"") != std::string::npos;
}

// How many "200 OK" responses `received` holds.
inline int OkResponses(std::string_view received) {
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
  void StartSimAgain(size_t i, const std::vector<std::string>& extra,
                     const std::string& model = "m") {
    std::vector<uint16_t> ports;
    std::vector<std::string> args = {"sim",     "--port",        std::to_string(sim_ports_[i]),
                                     "--model", model,           "--time-scale",
                                     "100",     "--api-latency", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    sims_[i] = StartWarden(args, &ports);
    ASSERT_NE(sims_[i], nullptr);
  }
  // A restart of simulator `i`, which serves LoRA adapters loaded at run time, seen by the gateway.
  // Loads LoRA adapter 'sql' (from /adapters/sql) through the gateway, on every server.
  void LoadSqlAdapter() {
    ASSERT_EQ(HttpPost(port_, "/v1/load_lora_adapter",
                       R"({"lora_name":"sql","lora_path":"/adapters/sql"})")
                  .status,
              200);
  }
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

inline std::string ChatBody(const std::string& id, int words, int max_tokens) {
  return json::serialize(json::object{
      {"model", "m"},
      {"max_tokens", max_tokens},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words(id, words)}}}}});
}

// A 150-word chat request (60-token reply) of conversation `session`.
inline HttpResult KeyedChatTurn(uint16_t port, const std::string& session,
                                const std::string& words) {
  return HttpPost(port, "/v1/chat/completions", ChatBody(words, 150, 60),
                  {{"X-Session-ID", session}});
}

// The sum of the samples of metric `name` (those whose `label` is `value`, if given) in the
// Prometheus text at `port`'s /metrics (a simulator's or the gateway's); -1 if it is unreadable.
inline double SimMetric(uint16_t port, const std::string& name, const std::string& label = "",
                        const std::string& value = "") {
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

// A chat request naming `scenario` in its only message, for a fake replica to tell apart.
inline std::string ScenarioRequest(const std::string& scenario) {
  return R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":")" + scenario +
         R"("}]})";
}

// The bytes of a POST /v1/chat/completions request with `body`.
inline std::string ChatRequestBytes(const std::string& body) {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
         "application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

inline std::string JsonResponse(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A replica that answers every request with a small JSON body.
inline FakeAnswer AnswerOkJson(const std::string&) {
  FakeAnswer a;
  a.bytes = JsonResponse(R"({"ok":true})");
  return a;
}

// A figure in KiB from /proc/`pid`/status, as "VmRSS:" (resident now) or "VmHWM:" (at the peak);
// -1 if it is not there.
inline long ProcStatusKib(pid_t pid, std::string_view field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with(field)) return std::stol(line.substr(field.size()));
  return -1L;
}

}  // namespace warden::testing
