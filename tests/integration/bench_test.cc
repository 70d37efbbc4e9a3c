// `warden bench` through `warden serve` and `warden sim`: a short run of the seed's experiment.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "eventually.h"
#include "fake_replica.h"
#include "held_socket.h"
#include "http_client.h"
#include "report/stage_result.h"

namespace warden::testing {
namespace {

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `warden bench` with `args` (after "bench"), its output in a fresh folder `name` of the test
// temp dir; the stages of its results.csv (none if it failed: the failure is recorded).
// `env`: NAME=VALUE settings of its environment beside the test's.
std::vector<StageResult> RunBench(const std::string& name, std::vector<std::string> args,
                                  const std::vector<std::string>& env = {}) {
  const std::filesystem::path out = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(out);
  args.insert(args.begin(), {WARDEN_BIN, "bench"});
  if (!env.empty()) {
    args.insert(args.begin(), env.begin(), env.end());
    args.insert(args.begin(), "/usr/bin/env");
  }
  args.insert(args.end(), {"--out", out.string(), "--quiet"});
  auto bench = ChildProcess::Start(args);
  std::vector<StageResult> results;
  EXPECT_NE(bench, nullptr);
  if (!bench) return results;
  EXPECT_EQ(bench->Wait(std::chrono::seconds(60)), 0);
  std::string error;
  EXPECT_TRUE(ParseResultsCsv(ReadFile(out / "results.csv"), &results, &error)) << error;
  return results;
}

// A simulator with `ranks` data-parallel ranks (time scale 50) behind a gateway.
struct SimAndGateway {
  // `config`: the gateway's config file, if any (what only a file sets).
  explicit SimAndGateway(int ranks, const std::string& config = "") {
    std::vector<uint16_t> sim_ports, gateway_ports;
    sim = StartWarden(
        {"sim", "--port", "0", "--model", "m", "--dp", std::to_string(ranks), "--time-scale", "50"},
        &sim_ports);
    if (!sim) return;
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--model",
                                     "m",
                                     "--url",
                                     "http://127.0.0.1:" + std::to_string(sim_ports[0]),
                                     "--dp",
                                     std::to_string(ranks),
                                     "--max-num-seqs",
                                     "32",
                                     "--scrape-interval",
                                     "0.1"};
    if (!config.empty()) {
      // A file of its own: tests run side by side (ctest -j).
      const std::filesystem::path path =
          std::filesystem::path(::testing::TempDir()) /
          ("warden-bench-config-" + std::to_string(::getpid()) + "-" +
           std::to_string(std::hash<std::string>{}(config)) + ".yaml");
      std::ofstream(path) << config;
      args.insert(args.end(), {"--config", path.string()});
    }
    gateway = StartWarden(args, &gateway_ports);
    if (gateway) gateway_port = gateway_ports[0];
  }
  bool started() const { return sim && gateway; }
  std::unique_ptr<ChildProcess> sim, gateway;
  uint16_t gateway_port = 0;
};

TEST(BenchTest, ShortRunWritesTheSeedsFilesAndAffinityWinsAtLowLoad) {
  SimAndGateway replicas(4);
  ASSERT_TRUE(replicas.started());
  const uint16_t gateway_port = replicas.gateway_port;
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-test";
  std::filesystem::remove_all(out);

  // The gateway's affinity is off before the run, and set back so after it.
  ASSERT_EQ(HttpCall(gateway_port, "PATCH", "/warden/v1/models/m", R"({"affinity":false})").status,
            200);
  auto bench =
      ChildProcess::Start({WARDEN_BIN,        "bench",
                           "--target",        "http://127.0.0.1:" + std::to_string(gateway_port),
                           "--model",         "m",
                           "--stages",        "2,3",
                           "--stage-seconds", "90",
                           "--time-scale",    "50",
                           "--system-tokens", "1000",
                           "--first-tokens",  "2000",
                           "--first-jitter",  "100",
                           "--turn-tokens",   "200",
                           "--turn-jitter",   "20",
                           "--max-tokens",    "64",
                           "--out",           out.string(),
                           "--quiet"});
  ASSERT_NE(bench, nullptr);
  ASSERT_EQ(bench->Wait(std::chrono::seconds(90)), 0);

  for (const char* f : {"results.csv", "results.md", "results.json", "ttfb.png",
                        "replicas_busy.png", "prefix_hits.png"}) {
    ASSERT_TRUE(std::filesystem::exists(out / f)) << f;
    EXPECT_GT(std::filesystem::file_size(out / f), 100u) << f;
  }
  const std::string csv = ReadFile(out / "results.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), kResultsCsvHeader);  // the seed's columns
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(ParseResultsCsv(csv, &results, &error)) << error;
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].variant, "off");
  EXPECT_EQ(results[3].variant, "on");
  for (const StageResult& r : results) {
    EXPECT_GT(r.output_tokens_per_min, 0) << r.variant << r.sessions;
    EXPECT_GT(r.ttfb_p50_s, 0);
    EXPECT_GT(r.replicas_busy, 0);
    EXPECT_FALSE(std::isnan(r.prefix_hit_pct));
  }
  // Low load: affinity keeps every turn home and reads more of each prompt from cache. (Not 4
  // sessions on 4 ranks: in lockstep, vLLM's round-robin can send each turn back where it was.)
  for (int stage = 0; stage < 2; ++stage) {
    const StageResult& off = results[stage];
    const StageResult& on = results[stage + 2];
    ASSERT_EQ(off.sessions, on.sessions);
    EXPECT_GT(on.prefix_hit_pct, off.prefix_hit_pct) << on.sessions << " sessions";
    EXPECT_EQ(on.stayed_on_replica_pct, 100) << on.sessions << " sessions";
    EXPECT_TRUE(std::isnan(off.stayed_on_replica_pct));  // vLLM's balancer chose: unknown rank
  }
  const auto json = boost::json::parse(ReadFile(out / "results.json"));
  EXPECT_EQ(json.at("stages").as_array().size(), 4u);
  EXPECT_EQ(json.at("stages").at(0).at("errors").as_int64(), 0);
  EXPECT_NE(ReadFile(out / "results.md").find("off → on"), std::string::npos);
  const auto model = boost::json::parse(HttpGet(gateway_port, "/warden/v1/models/m").body);
  EXPECT_FALSE(model.at("affinity").as_bool());
}

// Streams that carry an error event inside their 200, or that break off before their end event,
// are failed turns, not answers; a run whose every turn failed exits with 1.
TEST(BenchTest, StreamsThatFailInsideTheirAnswerAreErrors) {
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
  const auto chunk = [](const std::string& data) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return size + data + "\r\n";
  };
  const std::string start =
      chunk(
          "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
          "{\"input_tokens\":5,\"output_tokens\":0}}}\n\n") +
      chunk(
          "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
          "\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n");
  int n = 0;
  FakeReplica failing([&](const std::string&) {
    FakeAnswer a;
    if (n++ % 2 == 0) {  // an engine error inside the stream
      a.bytes = head + start +
                chunk(
                    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
                    "\"overloaded_error\",\"message\":\"busy\"}}\n\n") +
                "0\r\n\r\n";
    } else {  // a stream that ends without message_stop
      a.bytes = head + start + "0\r\n\r\n";
    }
    return a;
  });
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-errors";
  std::filesystem::remove_all(out);
  auto bench = ChildProcess::Start({WARDEN_BIN, "bench", "--target", failing.url(), "--model", "m",
                                    "--stages", "2", "--stage-seconds", "2", "--variants", "x",
                                    "--out", out.string(), "--quiet"});
  ASSERT_NE(bench, nullptr);
  EXPECT_EQ(bench->Wait(std::chrono::seconds(30)), 1);
  const auto json = boost::json::parse(ReadFile(out / "results.json"));
  const auto& stage = json.at("stages").at(0);
  EXPECT_EQ(stage.at("turns").as_int64(), 0);
  EXPECT_GE(stage.at("errors").as_int64(), 2);
}

// A target that takes connections and never answers gives no token in any stage: the run fails,
// so that a script does not take its empty table for a result (found by review: it exited 0).
TEST(BenchTest, ARunInWhichNoTurnEndedFails) {
  HeldSocket silent;
  const std::string url = "http://127.0.0.1:" + std::to_string(silent.port());
  const std::string dir = ::testing::TempDir() + "/warden-bench-silent";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string said = dir + "/stderr";
  auto bench =
      ChildProcess::Start({"/bin/sh", "-c",
                           std::string(WARDEN_BIN) + " bench --target " + url + " --metrics-url " +
                               url + " --model m --stages 1 --stage-seconds 1 --variants x --out " +
                               dir + "/out --quiet 2> " + said});
  ASSERT_NE(bench, nullptr);
  EXPECT_EQ(bench->Wait(std::chrono::seconds(60)), 1);
  const std::string text = ReadFile(said);
  EXPECT_NE(text.find("no token came in any stage"), std::string::npos) << text;
}

// Variants named "OFF" or "On" switch affinity as "off" and "on" do (found by review: "OFF,ON"
// left it as it was, and compared a run with itself).
TEST(BenchTest, VariantsOffAndOnAreReadInAnyCase) {
  SimAndGateway replicas(2);
  ASSERT_TRUE(replicas.started());
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-case";
  std::filesystem::remove_all(out);
  auto bench = ChildProcess::Start(
      {WARDEN_BIN, "bench", "--target", "http://127.0.0.1:" + std::to_string(replicas.gateway_port),
       "--model", "m", "--stages", "1", "--stage-seconds", "30", "--max-tokens", "16",
       "--time-scale", "50", "--variants", "OFF,On", "--out", out.string(), "--quiet"});
  ASSERT_NE(bench, nullptr);
  ASSERT_EQ(bench->Wait(std::chrono::seconds(60)), 0);
  const std::string csv = ReadFile((out / "results.csv").string());
  EXPECT_NE(csv.find(",off,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",on,"), std::string::npos) << csv;
  const std::string model = HttpGet(replicas.gateway_port, "/warden/v1/models/m").body;
  EXPECT_NE(model.find(R"("what":"affinity off")"), std::string::npos) << model;
}

// The agent's tools run between a reply and the next request (--tool-seconds): a session sends
// its turns that much further apart through real sockets too.
TEST(BenchTest, ToolPausesSpaceTheTurnsOut) {
  SimAndGateway replicas(1);
  ASSERT_TRUE(replicas.started());
  const auto run = [&](const std::string& name, const std::string& tool_seconds) {
    return RunBench(name,
                    {"--target",        "http://127.0.0.1:" + std::to_string(replicas.gateway_port),
                     "--model",         "m",
                     "--stages",        "1",
                     "--stage-seconds", "60",
                     "--time-scale",    "50",
                     "--variants",      "x",
                     "--system-tokens", "50",
                     "--first-tokens",  "100",
                     "--first-jitter",  "10",
                     "--turn-tokens",   "20",
                     "--turn-jitter",   "2",
                     "--turns",         "100",
                     "--max-tokens",    "16",
                     "--tool-seconds",  tool_seconds});
  };
  const std::vector<StageResult> at_once = run("warden-bench-tools-none", "0");
  const std::vector<StageResult> paused = run("warden-bench-tools-10", "10");
  ASSERT_EQ(at_once.size(), 1u);
  ASSERT_EQ(paused.size(), 1u);
  // Without pauses a turn of at most 16 tokens takes well under a simulated second; with them
  // each waits 10 s on average, so about six fit in the minute.
  EXPECT_GT(paused[0].output_tokens_per_min, 0);
  EXPECT_GT(at_once[0].output_tokens_per_min, 4 * paused[0].output_tokens_per_min);
  // The results say the workload they ran.
  const std::string json = ReadFile(
      (std::filesystem::path(::testing::TempDir()) / "warden-bench-tools-10" / "results.json")
          .string());
  EXPECT_NE(json.find("--turns 100 --max-tokens 16 --tool-seconds 10"), std::string::npos) << json;
}

// A run ends when its last stage does, whatever pauses its sessions are in: a pause of about an
// hour (72 s of real time) is cut, not slept out.
TEST(BenchTest, ARunEndsThroughItsSessionsToolPauses) {
  SimAndGateway replicas(1);
  ASSERT_TRUE(replicas.started());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<StageResult> results =
      RunBench("warden-bench-tools-hour",
               {"--target",        "http://127.0.0.1:" + std::to_string(replicas.gateway_port),
                "--model",         "m",
                "--stages",        "2",
                "--stage-seconds", "30",
                "--time-scale",    "50",
                "--variants",      "x",
                "--system-tokens", "50",
                "--first-tokens",  "100",
                "--first-jitter",  "10",
                "--turn-tokens",   "20",
                "--turn-jitter",   "2",
                "--max-tokens",    "16",
                "--tool-seconds",  "3600"});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// A simulator's time scale other than --time-scale is said: every figure would be off by their
// ratio (a simulator at x50 measured at x1 looks fifty times as fast).
TEST(BenchTest, ATimeScaleOtherThanTheSimulatorsIsSaid) {
  std::vector<uint16_t> ports;
  auto sim = StartWarden({"sim", "--port", "0", "--model", "m", "--time-scale", "50"}, &ports);
  ASSERT_NE(sim, nullptr);
  const std::string dir = ::testing::TempDir() + "/warden-bench-scale";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string said = dir + "/stderr";
  auto bench = ChildProcess::Start(
      {"/bin/sh", "-c",
       std::string(WARDEN_BIN) + " bench --target http://127.0.0.1:" + std::to_string(ports[0]) +
           " --model m --stages 1 --stage-seconds 1 --variants x --time-scale 5 --out " + dir +
           "/out --quiet 2> " + said});
  ASSERT_NE(bench, nullptr);
  bench->Wait(std::chrono::seconds(30));
  const std::string text = ReadFile(said);
  EXPECT_NE(text.find("simulated at time x50"), std::string::npos) << text;
  EXPECT_NE(text.find("pass --time-scale 50"), std::string::npos) << text;
}

// A stage whose every turn failed (here a key the target refuses) ends the run: the stages and
// variants after it would fail the same way, each for its whole length.
TEST(BenchTest, ARunStopsAfterAStageWhoseEveryTurnFailed) {
  FakeReplica refusing([](const std::string& request) {
    if (!request.starts_with("POST"))  // no gateway's admin API here
      return FakeAnswer{"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"};
    const std::string body = R"({"error":"Unauthorized"})";
    return FakeAnswer{
        "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body};
  });
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-refused";
  std::filesystem::remove_all(out);
  auto bench = ChildProcess::Start({WARDEN_BIN, "bench", "--target", refusing.url(), "--model", "m",
                                    "--stages", "2,2,2", "--stage-seconds", "2", "--variants",
                                    "x,y", "--out", out.string(), "--quiet"});
  ASSERT_NE(bench, nullptr);
  EXPECT_EQ(bench->Wait(std::chrono::seconds(30)), 1);
  const auto json = boost::json::parse(ReadFile(out / "results.json"));
  ASSERT_EQ(json.at("stages").as_array().size(), 1u);
  EXPECT_EQ(json.at("stages").at(0).at("turns").as_int64(), 0);
  EXPECT_GE(json.at("stages").at(0).at("errors").as_int64(), 1);
}

// A turn that fails is sent again: the session goes on, so that every variant keeps running the
// same sessions (giving it up would move every later session to another index).
TEST(BenchTest, AFailedTurnIsSentAgainInItsSession) {
  const auto chunk = [](const std::string& data) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return size + data + "\r\n";
  };
  const std::string stream =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
      chunk(
          "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
          "{\"input_tokens\":5,\"output_tokens\":0}}}\n\n") +
      chunk(
          "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
          "\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n") +
      chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") + "0\r\n\r\n";
  const std::string refusal =
      "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}";
  std::mutex mu;
  std::vector<std::string> turns;  // every POST, as the fake received it
  FakeReplica flaky([&](const std::string& request) {
    FakeAnswer a;
    if (!request.starts_with("POST ")) {
      a.bytes = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
      return a;
    }
    std::lock_guard lock(mu);
    turns.push_back(request);
    a.bytes = turns.size() == 2 ? refusal : stream;
    return a;
  });
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-resent";
  std::filesystem::remove_all(out);
  auto bench =
      ChildProcess::Start({WARDEN_BIN, "bench", "--target", flaky.url(), "--model", "m", "--stages",
                           "1", "--stage-seconds", "1", "--variants", "x", "--system-tokens", "50",
                           "--first-tokens", "1000", "--out", out.string(), "--quiet"});
  ASSERT_NE(bench, nullptr);
  EXPECT_EQ(bench->Wait(std::chrono::seconds(30)), 0);
  std::lock_guard lock(mu);
  ASSERT_GE(turns.size(), 4u);
  EXPECT_EQ(turns[2], turns[1]);  // the refused turn, again
  EXPECT_NE(turns[3], turns[2]);  // and then the session's next turn
  const auto json = boost::json::parse(ReadFile(out / "results.json"));
  EXPECT_EQ(json.at("stages").at(0).at("errors").as_int64(), 1);
}

// Replicas busy is sampled every second from a second in: a sample at the very start, when no
// request has reached a replica yet, would count every run's first stage as partly idle.
TEST(BenchTest, AReplicaBusyFromTheStartCountsAsBusyThroughout) {
  SimAndGateway replicas(1);
  ASSERT_TRUE(replicas.started());
  // Two sessions on one replica: one of them is always running (4 samples in the stage).
  const std::vector<StageResult> results =
      RunBench("warden-bench-busy",
               {"--target", "http://127.0.0.1:" + std::to_string(replicas.gateway_port), "--model",
                "m", "--stages", "2", "--stage-seconds", "4", "--time-scale", "50", "--variants",
                "on", "--system-tokens", "500", "--first-tokens", "1000", "--max-tokens", "256"});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_DOUBLE_EQ(results[0].replicas_busy, 1.0);
}

// A replica restarted during a stage starts its prefix-cache counters again: the stage's hit rate
// leaves it out (here the only one: no figure) rather than subtract counters of two processes.
TEST(BenchTest, AReplicaRestartedInAStageIsLeftOutOfItsHitRate) {
  const uint16_t port = FreePort();
  const std::vector<std::string> sim_args = {
      "sim",          "--port", std::to_string(port), "--model", "m",
      "--time-scale", "50",     "--api-latency",      "0"};
  std::vector<uint16_t> ports;
  auto sim = StartWarden(sim_args, &ports);
  ASSERT_NE(sim, nullptr);
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-restarted";
  std::filesystem::remove_all(out);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  std::vector<std::string> args = {WARDEN_BIN, "bench", "--target", url, "--metrics-url", url};
  args.insert(args.end(), {"--model", "m", "--stages", "2", "--stage-seconds", "400"});
  args.insert(args.end(), {"--time-scale", "50", "--variants", "x", "--system-tokens", "200"});
  args.insert(args.end(), {"--first-tokens", "1000", "--out", out.string(), "--quiet"});
  auto bench = ChildProcess::Start(args);
  ASSERT_NE(bench, nullptr);
  const auto queries = [&] {
    const std::string text = HttpGet(port, "/metrics").body;
    const size_t at = text.find("\nvllm:prefix_cache_queries_total{");
    return at == std::string::npos ? 0.0 : std::stod(text.substr(text.find("} ", at) + 2));
  };
  ASSERT_TRUE(Eventually([&] { return queries() > 20000; }, 20));  // well into the stage
  sim->Kill();
  sim = StartWarden(sim_args, &ports);  // the same port, counters from zero
  ASSERT_NE(sim, nullptr);
  EXPECT_EQ(bench->Wait(std::chrono::seconds(30)), 0);
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(ParseResultsCsv(ReadFile(out / "results.csv"), &results, &error)) << error;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(std::isnan(results[0].prefix_hit_pct)) << results[0].prefix_hit_pct;
  EXPECT_GT(results[0].output_tokens_per_min, 0);
}

// The results are written after every stage: a run stopped early keeps the stages it finished,
// and the gateway's affinity is set back as it was.
TEST(BenchTest, ARunStoppedEarlyKeepsTheStagesItFinished) {
  SimAndGateway replicas(2);
  ASSERT_TRUE(replicas.started());
  const uint16_t gateway_port = replicas.gateway_port;
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-stopped";
  std::filesystem::remove_all(out);
  auto bench =
      ChildProcess::Start({WARDEN_BIN,        "bench",
                           "--target",        "http://127.0.0.1:" + std::to_string(gateway_port),
                           "--model",         "m",
                           "--stages",        "1,2",
                           "--stage-seconds", "100",
                           "--time-scale",    "20",  // 5 s a stage: the signal lands in the second
                           "--variants",      "off",
                           "--system-tokens", "500",
                           "--first-tokens",  "1000",
                           "--max-tokens",    "32",
                           "--out",           out.string(),
                           "--quiet"});
  ASSERT_NE(bench, nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(out / "results.json") &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for the first stage
  }
  ASSERT_EQ(::kill(bench->pid(), SIGTERM), 0);  // during the second stage
  EXPECT_EQ(bench->Wait(std::chrono::seconds(10)), 1);
  const HttpResult model = HttpCall(gateway_port, "GET", "/warden/v1/models/m");
  ASSERT_EQ(model.status, 200);
  EXPECT_TRUE(boost::json::parse(model.body).at("affinity").as_bool());  // on, as before the run
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(ParseResultsCsv(ReadFile(out / "results.csv"), &results, &error)) << error;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].sessions, 1);
  EXPECT_GT(results[0].output_tokens_per_min, 0);
  EXPECT_NE(ReadFile(out / "results.json").find("in progress: 1 of 2 stages"), std::string::npos);
}

// A signal while the bench switches the gateway's affinity (before any stage ran) stops the run in
// order: no stage is started, the affinity is set back, and the bench says so. (It once spun
// starting sessions that ended at once, until memory ran out.)
TEST(BenchTest, ASignalBeforeTheFirstStageStopsTheRunInOrder) {
  std::promise<void> patch_seen, signalled;
  std::shared_future<void> go_on = signalled.get_future().share();
  std::atomic<int> patches{0};
  std::atomic<bool> affinity{true};
  FakeReplica gateway([&](const std::string& request) {
    FakeAnswer a;
    std::string body = R"({"affinity":true,"replicas":[]})";
    if (request.rfind("PATCH ", 0) == 0) {
      affinity = request.find(R"("affinity":true)") != std::string::npos;
      if (patches++ == 0) {  // the variant's switch: held until the bench has had its signal
        patch_seen.set_value();
        go_on.wait();
      }
      body = R"({"ok":true})";
    }
    a.bytes = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n" + body;
    return a;
  });
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-early-signal";
  std::filesystem::remove_all(out);
  auto bench = ChildProcess::Start({WARDEN_BIN, "bench", "--target", gateway.url(), "--model", "m",
                                    "--stages", "1", "--stage-seconds", "600", "--variants", "off",
                                    "--out", out.string(), "--quiet"});
  ASSERT_NE(bench, nullptr);
  ASSERT_EQ(patch_seen.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_EQ(::kill(bench->pid(), SIGINT), 0);
  signalled.set_value();
  EXPECT_EQ(bench->Wait(std::chrono::seconds(20)), 1);  // not a 600 s stage, nor a crash
  EXPECT_EQ(patches.load(), 2);                         // switched off, then back on
  EXPECT_TRUE(affinity.load());
  EXPECT_FALSE(std::filesystem::exists(out / "results.csv"));
}

// A gateway with an admin token: the bench switches affinity and finds the replicas with it, and
// says what is missing without it.
TEST(BenchTest, TheBenchUsesTheGatewaysAdminToken) {
  SimAndGateway replicas(2, "admin_token: s3cret\n");
  ASSERT_TRUE(replicas.started());
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-token";
  std::filesystem::remove_all(out);
  std::vector<std::string> args = {
      WARDEN_BIN,        "bench",
      "--target",        "http://127.0.0.1:" + std::to_string(replicas.gateway_port),
      "--model",         "m",
      "--stages",        "1",
      "--stage-seconds", "20",
      "--time-scale",    "50",
      "--variants",      "off,on",
      "--system-tokens", "500",
      "--first-tokens",  "1000",
      "--max-tokens",    "32",
      "--out",           out.string(),
      "--quiet"};
  auto without = ChildProcess::Start(args);
  ASSERT_NE(without, nullptr);
  EXPECT_NE(without->Wait(std::chrono::seconds(30)), 0);
  args.push_back("--admin-token");
  args.push_back("s3cret");
  auto with = ChildProcess::Start(args);
  ASSERT_NE(with, nullptr);
  ASSERT_EQ(with->Wait(std::chrono::seconds(60)), 0);
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(ParseResultsCsv(ReadFile(out / "results.csv"), &results, &error)) << error;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_GT(results[1].prefix_hit_pct, 0);  // the replicas' metrics were found
}

// A model the gateway does not serve: the bench says which it serves, at once.
TEST(BenchTest, AModelTheGatewayDoesNotServeIsSaidSo) {
  SimAndGateway replicas(1, "");
  ASSERT_TRUE(replicas.started());
  // (Its errors go to stderr, read here through a shell.)
  auto bench = ChildProcess::Start(
      {"/bin/sh", "-c",
       std::string(WARDEN_BIN) +
           " bench --target http://127.0.0.1:" + std::to_string(replicas.gateway_port) +
           " --model qwen3-4b-dp4 --stages 1 --stage-seconds 5 --variants on --quiet --out " +
           (std::filesystem::path(::testing::TempDir()) / "warden-bench-model").string() +
           " 2>&1"});
  ASSERT_NE(bench, nullptr);
  std::smatch match;
  EXPECT_TRUE(bench->WaitForLine(
      std::regex(R"(serves no model 'qwen3-4b-dp4' \(it serves m\): give --model)"), &match));
  EXPECT_NE(bench->Wait(std::chrono::seconds(20)), 0);
}

// A target where nothing listens is said so, not taken for an endpoint without an admin API.
TEST(BenchTest, ATargetWhereNothingListensIsSaidSo) {
  const uint16_t port = FreePort();  // nothing listens there
  auto bench = ChildProcess::Start(
      {"/bin/sh", "-c",
       std::string(WARDEN_BIN) + " bench --target http://127.0.0.1:" + std::to_string(port) +
           " --model m --stages 1 --stage-seconds 5 --quiet --out " +
           (std::filesystem::path(::testing::TempDir()) / "warden-bench-nothing").string() +
           " 2>&1"});
  ASSERT_NE(bench, nullptr);
  std::smatch match;
  EXPECT_TRUE(bench->WaitForLine(
      std::regex("nothing answers at http://127.0.0.1:" + std::to_string(port) + ": "), &match));
  EXPECT_NE(bench->Wait(std::chrono::seconds(20)), 0);
}

// A list mistyped with an empty item is refused, by the bench and by the lab, rather than run as
// another list (CLI11's own splitting drops the empty item: "4,,8" ran stages 4 and 8).
TEST(BenchTest, AListWithAnEmptyItemIsRefused) {
  for (const std::string args : {" bench --target http://127.0.0.1:1 --model m --stages 4,,8",
                                 " lab --policy vllm-dp,,warden", " lab --stages 4,"}) {
    auto run = ChildProcess::Start({"/bin/sh", "-c", std::string(WARDEN_BIN) + args + " 2>&1"});
    ASSERT_NE(run, nullptr);
    std::smatch match;
    EXPECT_TRUE(run->WaitForLine(std::regex(R"(^--(stages|policy): an empty item in ')"), &match))
        << args;
    EXPECT_NE(run->Wait(std::chrono::seconds(20)), 0) << args;
  }
}

// A gateway whose model API needs a key: the bench sends the one it is given with every turn, and
// fails without it.
TEST(BenchTest, TheBenchSendsItsApiKey) {
  SimAndGateway replicas(2, "api_keys: [sk-bench]\n");
  ASSERT_TRUE(replicas.started());
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / "warden-bench-key";
  std::filesystem::remove_all(out);
  std::vector<std::string> args = {
      WARDEN_BIN,        "bench",
      "--target",        "http://127.0.0.1:" + std::to_string(replicas.gateway_port),
      "--model",         "m",
      "--stages",        "1",
      "--stage-seconds", "20",
      "--time-scale",    "50",
      "--variants",      "on",
      "--system-tokens", "500",
      "--first-tokens",  "1000",
      "--max-tokens",    "32",
      "--out",           out.string(),
      "--quiet"};
  auto without = ChildProcess::Start(args);
  ASSERT_NE(without, nullptr);
  EXPECT_NE(without->Wait(std::chrono::seconds(30)), 0);  // every turn refused
  args.insert(args.end(), {"--api-key", "sk-bench"});
  auto with = ChildProcess::Start(args);
  ASSERT_NE(with, nullptr);
  ASSERT_EQ(with->Wait(std::chrono::seconds(60)), 0);
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(ParseResultsCsv(ReadFile(out / "results.csv"), &results, &error)) << error;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_GT(results[0].output_tokens_per_min, 0);
}

// Two gateways in front of the same replicas, each the other's peer, and the bench sending a
// session's turns to them in turn: each conversation still stays on one replica.
TEST(BenchTest, TurnsAlternatingBetweenPeeredGatewaysStayHome) {
  std::vector<uint16_t> sim_ports, ports;
  auto sim = StartWarden({"sim", "--port", "0", "--model", "m", "--dp", "4", "--time-scale", "50"},
                         &sim_ports);
  ASSERT_NE(sim, nullptr);
  const uint16_t a = FreePort(), b = FreePort();
  auto gateway = [&](uint16_t port, uint16_t peer) {
    return StartWarden({"serve", "--listen", "127.0.0.1:" + std::to_string(port), "--model", "m",
                        "--url", "http://127.0.0.1:" + std::to_string(sim_ports[0]), "--dp", "4",
                        "--max-num-seqs", "32", "--scrape-interval", "0.1", "--peer",
                        "http://127.0.0.1:" + std::to_string(peer), "--peer-sync-interval", "0.01"},
                       &ports);
  };
  auto gateway_a = gateway(a, b);
  auto gateway_b = gateway(b, a);
  ASSERT_NE(gateway_a, nullptr);
  ASSERT_NE(gateway_b, nullptr);
  const std::vector<StageResult> results = RunBench(
      "warden-bench-peers-test", {"--target",        "http://127.0.0.1:" + std::to_string(a),
                                  "--also-target",   "http://127.0.0.1:" + std::to_string(b),
                                  "--model",         "m",
                                  "--stages",        "4",
                                  "--stage-seconds", "60",
                                  "--time-scale",    "50",
                                  "--variants",      "on",
                                  "--system-tokens", "1000",
                                  "--first-tokens",  "2000",
                                  "--turn-tokens",   "200",
                                  "--max-tokens",    "64"});
  ASSERT_EQ(results.size(), 1u);
  // A turn that follows its conversation's first by less than one sync may be placed afresh:
  // rare at this pace, so nearly all stay.
  EXPECT_GE(results[0].stayed_on_replica_pct, 90);
  for (uint16_t port : {a, b}) {
    const HttpResult r = HttpGet(port, "/warden/v1/models/m");
    ASSERT_EQ(r.status, 200);
    EXPECT_GT(boost::json::parse(r.body).at("totals").at("requests").as_int64(), 10) << port;
  }
}

// A gateway serving https: the bench's turns and its admin calls (the affinity switch) go over
// TLS, checked against the authorities OpenSSL is pointed at (SSL_CERT_FILE: the test's
// self-signed certificate).
TEST(BenchTest, TheBenchDrivesAGatewayOverTls) {
  std::vector<uint16_t> sim_ports, ports;
  auto sim = StartWarden({"sim", "--port", "0", "--model", "m", "--dp", "2", "--time-scale", "50"},
                         &sim_ports);
  ASSERT_NE(sim, nullptr);
  const std::string tls = std::string(WARDEN_FIXTURES_DIR) + "/tls/";
  auto gateway = StartWarden(
      {"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url",
       "http://127.0.0.1:" + std::to_string(sim_ports[0]), "--dp", "2", "--max-num-seqs", "32",
       "--tls-cert-file", tls + "localhost-cert.pem", "--tls-key-file", tls + "localhost-key.pem"},
      &ports);
  ASSERT_NE(gateway, nullptr);
  const std::vector<StageResult> results =
      RunBench("warden-bench-tls-test",
               {"--target", "https://localhost:" + std::to_string(ports[0]), "--model", "m",
                "--stages", "2", "--stage-seconds", "30", "--time-scale", "50", "--system-tokens",
                "1000", "--first-tokens", "2000", "--turn-tokens", "200", "--max-tokens", "64"},
               {"SSL_CERT_FILE=" + tls + "localhost-cert.pem"});
  ASSERT_EQ(results.size(), 2u);  // off, then on: the affinity switched over https
  EXPECT_EQ(results[1].variant, "on");
  EXPECT_GT(results[1].output_tokens_per_min, 0);
  EXPECT_GE(results[1].stayed_on_replica_pct, 90);
  const HttpResult model =
      HttpsCall(ports[0], tls + "localhost-cert.pem", "GET", "/warden/v1/models/m");
  ASSERT_EQ(model.status, 200) << model.error;
  EXPECT_TRUE(boost::json::parse(model.body).at("affinity").as_bool());  // set back as it was
  EXPECT_GT(boost::json::parse(model.body).at("totals").at("requests").as_int64(), 5);
}

}  // namespace
}  // namespace warden::testing
