// Restarting the gateway without losing a request: under systemd, a listening socket passed by
// socket activation (connections wait in it, rather than being refused, while the gateway
// restarts) and the notifications of a Type=notify service; and SIGUSR2's hand-over to a new
// gateway on the same socket. Real processes on loopback; the test plays systemd.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "eventually.h"
#include "held_socket.h"
#include "http_client.h"

namespace warden::testing {
namespace {

namespace json = boost::json;

// The service manager's end of NOTIFY_SOCKET: a Unix datagram socket in a temporary folder.
class NotifySocket {
 public:
  NotifySocket() {
    path_ = (std::filesystem::temp_directory_path() /
             ("warden-notify-" + std::to_string(::getpid()) + ".sock"))
                .string();
    std::filesystem::remove(path_);
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }
  ~NotifySocket() {
    ::close(fd_);
    std::filesystem::remove(path_);
  }
  const std::string& path() const { return path_; }
  // The next message, or "" when none comes within `timeout`.
  std::string Next(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return "";
    char message[4096];
    const ssize_t n = ::recv(fd_, message, sizeof message, 0);
    return n > 0 ? std::string(message, static_cast<size_t>(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
};

class RestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<uint16_t> ports;
    sim_ = StartWarden(
        {"sim", "--port", "0", "--model", "m", "--time-scale", "100", "--api-latency", "0"},
        &ports);
    ASSERT_NE(sim_, nullptr);
    sim_url_ = "http://127.0.0.1:" + std::to_string(ports[0]);
  }

  // A gateway in front of the simulator, on the held socket, with two threads (each accepts on it).
  std::unique_ptr<ChildProcess> StartGatewayOn(const HeldSocket& socket, uint16_t* port,
                                               const std::vector<std::string>& env = {}) {
    std::vector<uint16_t> ports;
    auto gateway = StartWardenWithSockets(
        {"serve", "--model", "m", "--url", sim_url_, "--threads", "2"}, {socket.fd()}, env, &ports);
    if (gateway) *port = ports[0];
    return gateway;
  }

  static std::string ChatRequest(const std::string& session) {
    const std::string body = json::serialize(json::object{
        {"model", "m"},
        {"max_tokens", 8},
        {"messages", json::array{json::object{{"role", "user"}, {"content", "hello there"}}}}});
    return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-ID: " + session +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
  }

  std::unique_ptr<ChildProcess> sim_;
  std::string sim_url_;
};

// SIGUSR2's hand-over, in front of two simulated servers running in real time (so that a stream
// is still on its way when the hand-over comes).
class HandOverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<uint16_t> ports;
    sims_ = StartWarden(
        {"sim", "--port", "0", "--servers", "2", "--model", "m", "--api-latency", "0"}, &ports, 2);
    ASSERT_NE(sims_, nullptr);
    for (uint16_t p : ports) urls_.push_back("http://127.0.0.1:" + std::to_string(p));
    state_file_ = (std::filesystem::temp_directory_path() /
                   ("warden-hand-over-" + std::to_string(::getpid()) + ".json"))
                      .string();
    std::filesystem::remove(state_file_);
  }
  void TearDown() override {
    if (successor_ > 0) {
      ::kill(successor_, SIGTERM);
      // (not this process's child: gone once it cannot be signalled; its last save comes first)
      Eventually([&] { return ::kill(successor_, 0) != 0; }, 20);
    }
    std::filesystem::remove(state_file_);
    std::filesystem::remove(state_file_ + ".lock");    // the writers' lock (state_file.h)
    std::filesystem::remove(state_file_ + ".yaml");    // a test's config file
    std::filesystem::remove(state_file_ + ".warden");  // a test's binary
  }

  // First turns of conversations "a" and "b", which the gateway on `port` places on different
  // replicas.
  static void PlaceTwoConversations(uint16_t port, HttpResult* a, HttpResult* b) {
    *a = Turn(port, "a");
    *b = Turn(port, "b");
    ASSERT_EQ(a->status, 200);
    ASSERT_EQ(b->status, 200);
    ASSERT_NE(a->header("x-warden-replica"), b->header("x-warden-replica"));
  }
  // Both conversations' next turns go home on the gateway at `port`, as turns it knows.
  // Where StartFromCopy copies this build's warden.
  std::string CopyPath() const { return state_file_ + ".warden"; }
  // Starts `warden serve --listen 127.0.0.1:0 --model m` with `args` from a copy of this build's
  // warden at CopyPath() (which a test may then replace, as an upgrade or a rollback does);
  // its port in `port`. Null if it does not listen.
  std::unique_ptr<ChildProcess> StartFromCopy(const std::vector<std::string>& args,
                                              uint16_t* port) {
    std::filesystem::copy_file(WARDEN_BIN, CopyPath());
    std::filesystem::permissions(CopyPath(), std::filesystem::perms::owner_all);
    std::vector<std::string> argv = {CopyPath(),    "serve",   "--listen",
                                     "127.0.0.1:0", "--model", "m"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto gateway = ChildProcess::Start(argv);
    std::smatch m;
    if (!gateway || !gateway->WaitForLine(std::regex(R"(listening http://[0-9.]+:([0-9]+))"), &m))
      return nullptr;
    *port = static_cast<uint16_t>(std::stoi(m[1].str()));
    return gateway;
  }
  // Puts in `binary`'s place a script that runs `first` (a shell command), then this build's
  // warden.
  static void ReplaceWithScript(const std::string& binary, const std::string& first) {
    std::filesystem::remove(binary);
    {
      std::ofstream script(binary);
      script << "#!/bin/sh\n" << first << "\nexec " << WARDEN_BIN << " \"$@\"\n";
    }
    std::filesystem::permissions(binary, std::filesystem::perms::owner_all);
  }
  // ... one that runs it without `variable`, as a release that knows nothing of it would run.
  static void ReplaceWithOneIgnoring(const std::string& binary, const std::string& variable) {
    ReplaceWithScript(binary, "unset " + variable);
  }
  // The line a successor writes (to the output it shares with `old`) once `old` has ended; empty
  // if none comes.
  static std::string EndedLine(ChildProcess& old) {
    const std::regex ended(R"(the gateway handed over from has ended)");
    for (const std::string& line : old.lines())
      if (std::regex_search(line, ended)) return line;
    std::smatch m;
    return old.WaitForLine(ended, &m) ? old.lines().back() : std::string();
  }
  static void ExpectBothGoHome(uint16_t port, const HttpResult& a, const HttpResult& b) {
    for (const auto& [session, first] : {std::pair{"a", a}, std::pair{"b", b}}) {
      const HttpResult again = Turn(port, session);
      EXPECT_EQ(again.status, 200);
      EXPECT_EQ(again.header("x-warden-route"), "sticky") << session;
      EXPECT_EQ(again.header("x-warden-replica"), first.header("x-warden-replica")) << session;
    }
  }
  static HttpResult Turn(uint16_t port, const std::string& session, int max_tokens = 4) {
    return HttpPost(port, "/v1/chat/completions", ChatBody(max_tokens, false),
                    {{"X-Session-ID", session}});
  }
  static std::string ChatBody(int max_tokens, bool stream) {
    return json::serialize(json::object{
        {"model", "m"},
        {"max_tokens", max_tokens},
        {"stream", stream},
        {"messages", json::array{json::object{{"role", "user"}, {"content", "tell a story"}}}}});
  }
  // A streamed turn of conversation "a" (120 tokens: some seconds in real time) on a thread of its
  // own; returns once its first bytes have come. `result` is written when the stream ends.
  static std::thread StartStream(uint16_t port, HttpResult* result, int max_tokens = 120) {
    auto streaming = std::make_shared<std::promise<void>>();
    std::future<void> started = streaming->get_future();
    std::thread streamer([port, result, streaming, max_tokens] {
      bool first = true;
      *result = HttpStream(port, "/v1/chat/completions", ChatBody(max_tokens, true),
                           {{"X-Session-ID", "a"}}, [&](std::string_view) {
                             if (std::exchange(first, false)) streaming->set_value();
                             return true;
                           });
      if (first) streaming->set_value();  // no byte came: the test's checks say so
    });
    started.wait();
    return streamer;
  }
  // The pid in the line "warden handed over to pid N" the gateway prints; -1 if none comes.
  static pid_t HandedOverTo(ChildProcess& gateway) {
    std::smatch m;
    if (!gateway.WaitForLine(std::regex(R"(warden handed over to pid ([0-9]+))"), &m)) return -1;
    return static_cast<pid_t>(std::stol(m[1].str()));
  }

  std::unique_ptr<ChildProcess> sims_;
  std::vector<std::string> urls_;
  std::string state_file_;
  pid_t successor_ = -1;
};

TEST_F(RestartTest, AGatewayListensOnThePassedSocketAndServesWhatWaitedInIt) {
  HeldSocket socket;
  // Sent before any gateway runs: the kernel has accepted the connection into the socket's queue.
  RawConnection early(socket.port());
  early.Send(ChatRequest("early"));
  uint16_t port = 0;
  auto gateway = StartGatewayOn(socket, &port);
  ASSERT_NE(gateway, nullptr);
  EXPECT_EQ(port, socket.port());  // the socket's port, not the default listen's 8080
  const std::string answer = early.ReadToClose();
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("x-warden-route: new"), std::string::npos) << answer;
  EXPECT_NE(answer.find("\"choices\""), std::string::npos) << answer;
}

TEST_F(RestartTest, ARestartOnAHeldSocketRefusesNoConnection) {
  HeldSocket socket;
  uint16_t port = 0;
  auto first = StartGatewayOn(socket, &port);
  ASSERT_NE(first, nullptr);
  const std::string first_answer = [&] {
    RawConnection c(port);
    c.Send(ChatRequest("s1"));
    return c.ReadToClose();
  }();
  ASSERT_EQ(first_answer.rfind("HTTP/1.1 200", 0), 0u) << first_answer;
  EXPECT_EQ(first->Stop(), 0);
  // No gateway runs: the connection is made all the same (the socket is held) and waits.
  RawConnection between(port);
  between.Send(ChatRequest("s2"));
  uint16_t second_port = 0;
  auto second = StartGatewayOn(socket, &second_port);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second_port, port);
  const std::string answer = between.ReadToClose();
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("\"choices\""), std::string::npos) << answer;
  // And the successor goes on accepting on it.
  EXPECT_EQ(HttpGet(port, "/warden/v1/models").status, 200);
}

TEST_F(RestartTest, TheServiceManagerHearsReadyReloadingAndStopping) {
  HeldSocket socket;
  NotifySocket notify;
  uint16_t port = 0;
  auto gateway = StartGatewayOn(socket, &port, {"NOTIFY_SOCKET=" + notify.path()});
  ASSERT_NE(gateway, nullptr);
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(notify.Next(), "READY=1\nSTATUS=serving on " + base);
  ::kill(gateway->pid(), SIGHUP);
  EXPECT_EQ(notify.Next(), "RELOADING=1\nSTATUS=reading the config again");
  EXPECT_EQ(notify.Next(), "READY=1\nSTATUS=serving on " + base);
  ::kill(gateway->pid(), SIGTERM);
  EXPECT_EQ(notify.Next(), "STOPPING=1\nSTATUS=draining the requests on their way");
  EXPECT_EQ(gateway->Wait(std::chrono::seconds(20)), 0);
}

TEST_F(RestartTest, AWatchdogIsFedWhileEveryThreadRuns) {
  HeldSocket socket;
  NotifySocket notify;
  uint16_t port = 0;
  // WatchdogSec=0.2: a ping every 0.1 s.
  auto gateway = StartGatewayOn(
      socket, &port, {"NOTIFY_SOCKET=" + notify.path(), "WATCHDOG_USEC=200000", "WATCHDOG_PID=$$"});
  ASSERT_NE(gateway, nullptr);
  EXPECT_EQ(notify.Next().rfind("READY=1", 0), 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(notify.Next(std::chrono::seconds(2)), "WATCHDOG=1");
  EXPECT_EQ(HttpGet(port, "/warden/v1/models").status, 200);
  EXPECT_EQ(notify.Next(std::chrono::seconds(2)), "WATCHDOG=1");
}

TEST_F(RestartTest, EverySocketPassedIsListenedOn) {
  HeldSocket one, two;  // a socket unit with two ListenStream= (two addresses, say)
  std::vector<uint16_t> ports;
  auto gateway = StartWardenWithSockets({"serve", "--model", "m", "--url", sim_url_},
                                        {one.fd(), two.fd()}, {}, &ports);
  ASSERT_NE(gateway, nullptr);
  EXPECT_EQ(ports[0], one.port());
  EXPECT_EQ(HttpGet(one.port(), "/warden/v1/models").status, 200);
  EXPECT_EQ(HttpGet(two.port(), "/warden/v1/models").status, 200);
}

TEST_F(RestartTest, ASocketTheGatewayCannotListenOnIsRefusedAtStart) {
  HeldSocket tcp;
  const int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  auto udp_passed = StartWardenWithSockets({"serve", "--model", "m", "--url", sim_url_},
                                           {tcp.fd(), udp}, {}, nullptr);
  ASSERT_NE(udp_passed, nullptr);
  EXPECT_EQ(udp_passed->Wait(std::chrono::seconds(20)), 2);
  ::close(udp);
}

TEST_F(HandOverTest, AStreamOnItsWayEndsWholeWhileTheNewGatewayServesTheNextTurnsAtHome) {
  std::vector<uint16_t> ports;
  // A stop's drain would cut the stream after a second; a hand-over's waits for it.
  auto old_gateway =
      StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url", urls_[0], "--url",
                   urls_[1], "--state-file", state_file_, "--threads", "2", "--drain-timeout", "1"},
                  &ports);
  ASSERT_NE(old_gateway, nullptr);
  const uint16_t port = ports[0];
  HttpResult a, b;
  ASSERT_NO_FATAL_FAILURE(PlaceTwoConversations(port, &a, &b));

  HttpResult stream;
  std::thread streamer = StartStream(port, &stream);
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);

  // The new gateway has the conversations the old one placed.
  const HttpResult b2 = Turn(port, "b");
  EXPECT_EQ(b2.status, 200);
  EXPECT_EQ(b2.header("x-warden-route"), "sticky");
  EXPECT_EQ(b2.header("x-warden-replica"), b.header("x-warden-replica"));
  streamer.join();
  EXPECT_EQ(stream.status, 200);
  EXPECT_NE(stream.body.find("data: [DONE]"), std::string::npos) << stream.body;
  EXPECT_EQ(stream.body.find("\"error\""), std::string::npos) << stream.body;
  // The old gateway leaves once its stream is done; the new one goes on.
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
  // It knows when the state file was saved, as the old one did (found by review: 0 until its own
  // first save, 30 s on).
  const std::string metrics = HttpGet(port, "/metrics").body;
  std::smatch saved;
  ASSERT_TRUE(std::regex_search(
      metrics, saved, std::regex(R"(\nwarden_state_file_saved_timestamp_seconds (\S+))")));
  EXPECT_GT(std::stod(saved[1].str()), 1e9) << saved[0];
  const HttpResult a2 = Turn(port, "a");
  EXPECT_EQ(a2.status, 200);
  EXPECT_EQ(a2.header("x-warden-route"), "sticky");
  EXPECT_EQ(a2.header("x-warden-replica"), a.header("x-warden-replica"));
  ::kill(successor_, SIGTERM);
  EXPECT_TRUE(Eventually([&] { return !PortListening(port); }));
  successor_ = -1;
}

// Without a state file the conversations go to the new gateway all the same, in a file of their
// own that it removes once read (found by review: their homes were lost, and every conversation
// was placed afresh, away from its cache).
TEST_F(HandOverTest, WithoutAStateFileTheNewGatewayStillKnowsTheConversations) {
  // Where the file goes (systemd's RuntimeDirectory= says it so): a folder of this test's own.
  std::string runtime = (std::filesystem::temp_directory_path() / "warden-runtime-XXXXXX").string();
  ASSERT_NE(::mkdtemp(runtime.data()), nullptr);
  ::setenv("RUNTIME_DIRECTORY", runtime.c_str(), 1);
  struct Restore {  // for the later tests of this process, however this one ends
    std::string folder;
    ~Restore() {
      ::unsetenv("RUNTIME_DIRECTORY");
      std::error_code ec;
      std::filesystem::remove_all(folder, ec);
    }
  } restore{runtime};
  std::vector<uint16_t> ports;
  auto old_gateway = StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url",
                                  urls_[0], "--url", urls_[1], "--drain-timeout", "1"},
                                 &ports);
  ASSERT_NE(old_gateway, nullptr);
  const uint16_t port = ports[0];
  HttpResult a, b;
  ASSERT_NO_FATAL_FAILURE(PlaceTwoConversations(port, &a, &b));
  ::kill(old_gateway->pid(), SIGUSR2);
  // Both write to the old one's output now, each line saying whose it is.
  std::smatch old_line, new_line;  // (each refers into the line read last)
  EXPECT_TRUE(old_gateway->WaitForLine(std::regex(R"(\[pid (\d+)\] \[info\] SIGUSR2: starting)"),
                                       &old_line));
  const std::string old_pid = old_line[1].str();
  EXPECT_TRUE(old_gateway->WaitForLine(
      std::regex(R"(\[pid (\d+)\] \[info\] hand-over: model m: 2 conversation\(s\) keep their)"),
      &new_line));
  const std::string new_pid = new_line[1].str();
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  EXPECT_EQ(old_pid, std::to_string(old_gateway->pid()));
  EXPECT_EQ(new_pid, std::to_string(successor_));
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
  // Alone on the output again once the old one has ended, the new one's lines lose the pid.
  const std::string ended_line = EndedLine(*old_gateway);
  ASSERT_FALSE(ended_line.empty());
  EXPECT_EQ(ended_line.find("[pid "), std::string::npos) << ended_line;
  ExpectBothGoHome(port, a, b);  // only the new gateway answers now
  const json::value models = json::parse(HttpGet(port, "/warden/v1/models/m").body);
  EXPECT_EQ(models.at("sessions").at("known").as_int64(), 2);
  // The file and its folder are gone: read once, by the new gateway.
  EXPECT_TRUE(std::filesystem::is_empty(runtime));
  ::kill(successor_, SIGTERM);
  EXPECT_TRUE(Eventually([&] { return !PortListening(port); }));
  successor_ = -1;
}

// A new config without the state file the old gateway saved to: the conversations still go to
// the new gateway, in the hand-over's own file (found by review: every one was placed afresh).
TEST_F(HandOverTest, ANewConfigWithoutTheStateFileStillKeepsTheConversations) {
  const std::string config = state_file_ + ".yaml";
  const auto write_config = [&](bool with_state_file) {
    std::ofstream file(config);
    file << "listen: 127.0.0.1:0\ndrain_timeout_s: 1\n"
         << (with_state_file ? "session:\n  state_file: " + state_file_ + "\n" : "") << "models:\n"
         << "  - name: m\n    urls: [" << urls_[0] << ", " << urls_[1] << "]\n";
  };
  write_config(true);
  std::vector<uint16_t> ports;
  auto old_gateway = StartWarden({"serve", "--config", config}, &ports);
  ASSERT_NE(old_gateway, nullptr);
  const uint16_t port = ports[0];
  HttpResult a, b;
  ASSERT_NO_FATAL_FAILURE(PlaceTwoConversations(port, &a, &b));
  write_config(false);
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
  ExpectBothGoHome(port, a, b);
  const json::value models = json::parse(HttpGet(port, "/warden/v1/models/m").body);
  EXPECT_EQ(models.at("sessions").at("known").as_int64(), 2);
}

// A successor older than the hand-over's file of conversations (a rollback) reads only the state
// file, which the old gateway saves first for it (found by review: it started from the last
// periodic save, and every conversation placed since was placed afresh).
TEST_F(HandOverTest, AnOlderSuccessorStartsFromTheStateFileSavedAtTheHandOver) {
  uint16_t port = 0;
  auto old_gateway =
      StartFromCopy({"--url", urls_[0], "--url", urls_[1], "--state-file", state_file_,
                     "--state-save-interval", "3600", "--drain-timeout", "1"},
                    &port);
  ASSERT_NE(old_gateway, nullptr);
  HttpResult a, b;
  ASSERT_NO_FATAL_FAILURE(PlaceTwoConversations(port, &a, &b));
  ReplaceWithOneIgnoring(CopyPath(), "WARDEN_HAND_OVER_STATE");  // the hand-over's file
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
  ExpectBothGoHome(port, a, b);
}

// A new gateway started by one older than the pipe of requests in flight (an upgrade from such a
// release) still drops the pid from its lines once that one has ended, watching its process
// instead (found by review: it kept the pid for life).
TEST_F(HandOverTest, ASuccessorOfAnOlderGatewayLosesThePidWhenItEnds) {
  uint16_t port = 0;
  auto old_gateway = StartFromCopy({"--url", urls_[0], "--drain-timeout", "1"}, &port);
  ASSERT_NE(old_gateway, nullptr);
  ReplaceWithOneIgnoring(CopyPath(), "WARDEN_PREDECESSOR_FD");  // as if given no such pipe
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
  const std::string ended_line = EndedLine(*old_gateway);
  ASSERT_FALSE(ended_line.empty());
  EXPECT_EQ(ended_line.find("[pid "), std::string::npos) << ended_line;
}

// A change through the admin API while a hand-over is under way is refused (503, to be sent again),
// not answered 200 and lost: the new gateway starts from what was written at SIGUSR2 (found by
// review: a drained replica went back into service). Sent again, it reaches the new gateway.
TEST_F(HandOverTest, AChangeDuringAHandOverIsRefusedNotLost) {
  uint16_t port = 0;
  auto old_gateway =
      StartFromCopy({"--url", urls_[0], "--url", urls_[1], "--drain-timeout", "1"}, &port);
  ASSERT_NE(old_gateway, nullptr);
  ReplaceWithScript(CopyPath(), "sleep 2");  // a new gateway slow to start
  ::kill(old_gateway->pid(), SIGUSR2);
  std::smatch m;
  ASSERT_TRUE(old_gateway->WaitForLine(std::regex("SIGUSR2: starting a new gateway"), &m));
  const std::string drain = R"({"replicas": [{"index": 0, "draining": true}]})";
  const HttpResult refused = HttpCall(port, "PATCH", "/warden/v1/models/m", drain);
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.header("retry-after"), "1");
  EXPECT_NE(refused.body.find("hand-over"), std::string::npos) << refused.body;
  const HttpResult adapter =
      HttpPost(port, "/v1/load_lora_adapter", R"({"lora_name": "a", "lora_path": "/adapters/a"})");
  EXPECT_EQ(adapter.status, 503);  // an adapter's load or unload too
  EXPECT_NE(adapter.body.find("hand-over"), std::string::npos) << adapter.body;
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
  const HttpResult taken = HttpCall(port, "PATCH", "/warden/v1/models/m", drain);
  EXPECT_EQ(taken.status, 200) << taken.body;
  const json::value model = json::parse(HttpGet(port, "/warden/v1/models/m").body);
  EXPECT_TRUE(model.at("replicas").at(0).at("draining").as_bool()) << model;
}

// A stray WARDEN_HAND_OVER_STATE (the variable is the hand-over's own) names nothing this gateway
// reads or removes (found by review: it removed the file named, and its folder).
TEST_F(HandOverTest, AStrayHandOverVariableRemovesNothing) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("warden-stray-" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  const std::filesystem::path precious = folder / "conversations.json";
  { std::ofstream(precious) << "precious"; }
  ::setenv("WARDEN_HAND_OVER_STATE", precious.c_str(), 1);
  std::vector<uint16_t> ports;
  auto gateway = StartWarden(
      {"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url", urls_[0], "--url", urls_[1]},
      &ports);
  ::unsetenv("WARDEN_HAND_OVER_STATE");
  ASSERT_NE(gateway, nullptr);
  EXPECT_EQ(Turn(ports[0], "a").status, 200);
  EXPECT_TRUE(std::filesystem::exists(precious));
  std::filesystem::remove_all(folder);
}

// A hand-over folder left by a gateway killed during its hand-over (kill -9 before its new gateway
// read the conversations in it) is removed when a gateway next starts. One younger than a new
// gateway's start (a hand-over under way), and anything not made as such a folder, stay.
TEST_F(HandOverTest, AHandOverFolderLeftByAKilledGatewayIsRemovedAtTheNextStart) {
  namespace fs = std::filesystem;
  const fs::path base =
      fs::temp_directory_path() / ("warden-runtime-" + std::to_string(::getpid()));
  fs::create_directories(base);
  const auto make = [&](const std::string& name, const std::string& file, bool old) {
    const fs::path folder = base / name;
    fs::create_directory(folder);
    fs::permissions(folder, fs::perms::owner_all, fs::perm_options::replace);
    std::ofstream(folder / file) << "{}";
    if (old) fs::last_write_time(folder, fs::file_time_type::clock::now() - std::chrono::hours(1));
    return folder;
  };
  const fs::path left = make("warden-hand-over-Ab3xYz", "conversations.json", true);
  const fs::path under_way = make("warden-hand-over-Qq7wEr", "conversations.json", false);
  const fs::path not_ours = make("warden-hand-over-notes", "conversations.json", true);
  const fs::path other_files = make("warden-hand-over-Zz9kLm", "notes.txt", true);
  ::setenv("RUNTIME_DIRECTORY", base.c_str(), 1);
  std::vector<uint16_t> ports;
  auto gateway =
      StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url", urls_[0]}, &ports);
  ::unsetenv("RUNTIME_DIRECTORY");
  ASSERT_NE(gateway, nullptr);
  EXPECT_FALSE(fs::exists(left));
  EXPECT_TRUE(fs::exists(under_way / "conversations.json"));
  EXPECT_TRUE(fs::exists(not_ours / "conversations.json"));
  EXPECT_TRUE(fs::exists(other_files / "notes.txt"));
  fs::remove_all(base);
}

// A reload or a hand-over signal that reaches the new gateway before it holds them (systemd's
// reload signals every process of the unit) is ignored, not the end of it (found by review: its
// default action killed the new gateway in that moment, and the hand-over failed).
TEST_F(HandOverTest, ASignalToTheNewGatewayBeforeItHoldsThemDoesNotEndIt) {
  uint16_t port = 0;
  auto old_gateway = StartFromCopy({"--url", urls_[0], "--drain-timeout", "1"}, &port);
  ASSERT_NE(old_gateway, nullptr);
  ReplaceWithScript(CopyPath(), "kill -HUP $$; kill -USR2 $$");  // in the new process, first
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
  EXPECT_EQ(Turn(port, "a").status, 200);
}

// The new gateway counts the requests the old one still relays as a peer's (found by review: it
// took their replica for idle, packing it past the overflow limit), until they end.
TEST_F(HandOverTest, TheNewGatewayCountsTheOldOnesRequestsInFlight) {
  std::vector<uint16_t> ports;
  auto old_gateway = StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url",
                                  urls_[0], "--url", urls_[1], "--drain-timeout", "1"},
                                 &ports);
  ASSERT_NE(old_gateway, nullptr);
  const uint16_t port = ports[0];
  HttpResult stream;
  // The simulator's whole reply (300 tokens): about 8 s in real time.
  std::thread streamer = StartStream(port, &stream, 4000);
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  const auto peer_in_flight = [&] {
    const json::value models = json::parse(HttpGet(port, "/warden/v1/models/m").body);
    std::vector<int64_t> counts;
    for (const json::value& r : models.at("replicas").as_array())
      counts.push_back(r.at("peer_in_flight").as_int64());
    return counts;
  };
  EXPECT_TRUE(Eventually([&] {
    const std::vector<int64_t> c = peer_in_flight();
    return c[0] + c[1] == 1;
  }));
  streamer.join();
  EXPECT_EQ(stream.status, 200);
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
  EXPECT_TRUE(Eventually([&] { return peer_in_flight() == std::vector<int64_t>{0, 0}; }));
}

// A new gateway that crashes after the hand-over leaves nobody accepting connections: the old one
// cuts its long drain to a stop's (so that systemd, which sees the crash once it is gone, restarts
// the service) instead of holding a stream for minutes.
TEST_F(HandOverTest, ANewGatewayThatCrashesCutsTheOldOnesDrainToAStops) {
  std::vector<uint16_t> ports;
  auto old_gateway = StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url",
                                  urls_[0], "--drain-timeout", "1"},
                                 &ports);
  ASSERT_NE(old_gateway, nullptr);
  HttpResult stream;
  // The simulator's whole reply (300 tokens): about 8 s in real time, past the wait below.
  std::thread streamer = StartStream(ports[0], &stream, 4000);
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  ::kill(successor_, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  std::smatch m;
  EXPECT_TRUE(
      old_gateway->WaitForLine(std::regex("the new gateway \\(pid " + std::to_string(successor_) +
                                          "\\) was killed by signal 9 during this one's drain"),
                               &m));
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(5)), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(5));
  streamer.join();
  EXPECT_EQ(stream.body.find("data: [DONE]"), std::string::npos);  // cut at the drain's end
  successor_ = -1;
}

// A client that keeps its connection alive sends its next request as soon as a stream ends; the
// stream's head promised keep-alive before the hand-over came, so the old gateway waits a moment
// for that request and answers it (with Connection: close) instead of closing under it.
TEST_F(HandOverTest, TheNextRequestOnAConnectionWhoseStreamSpannedTheHandOverIsAnswered) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  std::vector<uint16_t> ports;
  auto old_gateway = StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url",
                                  urls_[0], "--drain-timeout", "1"},
                                 &ports);
  ASSERT_NE(old_gateway, nullptr);
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), ports[0]});
  const auto request = [](int max_tokens, bool stream) {
    http::request<http::string_body> r{http::verb::post, "/v1/chat/completions", 11};
    r.set(http::field::host, "127.0.0.1");
    r.set(http::field::content_type, "application/json");
    r.set("X-Session-ID", "a");
    r.body() = ChatBody(max_tokens, stream);
    r.prepare_payload();
    return r;
  };
  auto streamed = request(120, true);
  http::write(socket, streamed);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> first;
  http::read_header(socket, buffer, first);
  ASSERT_EQ(first.get().result_int(), 200);
  EXPECT_TRUE(first.get().keep_alive());
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  http::read(socket, buffer, first);
  EXPECT_NE(first.get().body().find("data: [DONE]"), std::string::npos);
  auto next = request(4, false);
  http::write(socket, next);
  http::response<http::string_body> answer;
  boost::system::error_code ec;
  http::read(socket, buffer, answer, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(answer.result_int(), 200) << answer.body();
  EXPECT_FALSE(answer.keep_alive());  // the old gateway says it closes
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(10)), 0);
  ::kill(successor_, SIGTERM);
  successor_ = -1;
}

TEST_F(HandOverTest, ANewGatewayThatCannotStartLeavesTheOldOneServing) {
  const std::string config = state_file_ + ".yaml";
  {
    std::ofstream file(config);
    file << "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    urls: [" << urls_[0] << "]\n";
  }
  std::vector<uint16_t> ports;
  auto gateway = StartWarden({"serve", "--config", config}, &ports);
  ASSERT_NE(gateway, nullptr);
  {
    std::ofstream file(config);
    file << "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    urls: [not a url]\n";
  }
  ::kill(gateway->pid(), SIGUSR2);
  std::smatch m;
  ASSERT_TRUE(gateway->WaitForLine(std::regex(R"(warden hand-over failed: (.*))"), &m));
  EXPECT_NE(m[1].str().find("exited with status 2"), std::string::npos) << m[1].str();
  const HttpResult after = Turn(ports[0], "c");
  EXPECT_EQ(after.status, 200);
  EXPECT_EQ(after.header("connection"), "");  // not draining: no Connection: close
  EXPECT_EQ(gateway->Stop(), 0);
}

// The binary moved away (an upgrade gone wrong): the hand-over fails at once, saying why, and the
// old gateway goes on serving.
TEST_F(HandOverTest, ABinaryThatIsGoneFailsTheHandOverWithItsReason) {
  const std::string copy = state_file_ + ".warden";
  std::filesystem::copy_file(WARDEN_BIN, copy);
  std::filesystem::permissions(copy, std::filesystem::perms::owner_all);
  auto gateway = ChildProcess::Start(
      {copy, "serve", "--listen", "127.0.0.1:0", "--model", "m", "--url", urls_[0]});
  ASSERT_NE(gateway, nullptr);
  std::smatch m;
  ASSERT_TRUE(gateway->WaitForLine(std::regex(R"(listening http://[0-9.]+:([0-9]+))"), &m));
  const auto port = static_cast<uint16_t>(std::stoi(m[1].str()));
  std::filesystem::remove(copy);
  ::kill(gateway->pid(), SIGUSR2);
  ASSERT_TRUE(gateway->WaitForLine(std::regex(R"(warden hand-over failed: (.*))"), &m));
  EXPECT_EQ(m[1].str(), "cannot run " + copy + ": No such file or directory");
  EXPECT_EQ(Turn(port, "c").status, 200);
  EXPECT_EQ(gateway->Stop(), 0);
}

TEST_F(HandOverTest, AStopAfterAHandOverStillLetsTheOldGatewaysStreamsFinish) {
  std::vector<uint16_t> ports;
  auto old_gateway = StartWarden({"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url",
                                  urls_[0], "--url", urls_[1], "--state-file", state_file_},
                                 &ports);
  ASSERT_NE(old_gateway, nullptr);
  const uint16_t port = ports[0];
  HttpResult stream;
  std::thread streamer = StartStream(port, &stream);
  ::kill(old_gateway->pid(), SIGUSR2);
  successor_ = HandedOverTo(*old_gateway);
  ASSERT_GT(successor_, 0);
  // systemctl stop sends SIGTERM to every process of the unit: a stop's drain (30 s), not a cut.
  ::kill(old_gateway->pid(), SIGTERM);
  streamer.join();
  EXPECT_NE(stream.body.find("data: [DONE]"), std::string::npos) << stream.body;
  EXPECT_EQ(old_gateway->Wait(std::chrono::seconds(20)), 0);
}

TEST_F(HandOverTest, AStopDuringAHandOverStopsTheNewGatewayToo) {
  // A peer that takes connections and never answers: a gateway's start waits 2 s for its homes.
  HeldSocket silent_peer;
  const std::string config = state_file_ + ".yaml";
  {
    std::ofstream file(config);
    file << "listen: 127.0.0.1:0\npeers: [http://127.0.0.1:" << silent_peer.port()
         << "]\nmodels:\n  - name: m\n    urls: [" << urls_[0] << "]\n";
  }
  std::vector<uint16_t> ports;
  auto gateway = StartWarden({"serve", "--config", config}, &ports);
  ASSERT_NE(gateway, nullptr);
  ::kill(gateway->pid(), SIGUSR2);
  std::smatch m;
  // Its start has begun (it prints this before it pulls the peers' homes).
  ASSERT_TRUE(gateway->WaitForLine(std::regex(R"(SIGUSR2: starting a new gateway)"), &m));
  ::kill(gateway->pid(), SIGTERM);
  EXPECT_EQ(gateway->Wait(std::chrono::seconds(20)), 0);
  // Nobody serves the port afterwards: the new gateway was stopped before it was ready.
  EXPECT_TRUE(Eventually([&] { return !PortListening(ports[0]); }, 10));
  EXPECT_FALSE(Eventually([&] { return PortListening(ports[0]); }, 3));
}

// SIGTERM right behind SIGUSR2 reaches the new gateway between its fork and its exec, while it
// still has the old one's signal handlers: it must end it there, not come back to the old gateway
// as a second signal of its own while the new one goes on to serve.
TEST_F(HandOverTest, AStopRightBehindTheHandOverLeavesNoGatewayBehind) {
  for (int i = 0; i < 3; ++i) {
    std::vector<uint16_t> ports;
    auto gateway = StartWarden(
        {"serve", "--listen", "127.0.0.1:0", "--model", "m", "--url", urls_[0]}, &ports);
    ASSERT_NE(gateway, nullptr);
    ::kill(gateway->pid(), SIGUSR2);
    ::kill(gateway->pid(), SIGTERM);
    EXPECT_EQ(gateway->Wait(std::chrono::seconds(20)), 0);
    EXPECT_FALSE(Eventually([&] { return PortListening(ports[0]); }, 1)) << "round " << i;
  }
}

}  // namespace
}  // namespace warden::testing
