#include "gateway/peer_sync.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gateway/model_state.h"

namespace warden {
namespace {

// A peer that answers is sent a message every interval, however long; one that does not is tried
// again with the interval doubled per failure, up to a second, or the interval if that is longer.
TEST(PeerSendWait, TheIntervalWhileAnsweredAndABoundedBackoffWhileNot) {
  EXPECT_EQ(PeerSendWait(0.2, 0), 0.2);
  EXPECT_EQ(PeerSendWait(60, 0), 60);  // was cut to the backoff's bound
  EXPECT_EQ(PeerSendWait(0.2, 1), 0.4);
  EXPECT_EQ(PeerSendWait(0.2, 2), 0.8);
  EXPECT_EQ(PeerSendWait(0.2, 3), kMaxPeerBackoffS);
  EXPECT_EQ(PeerSendWait(0.2, 1000), kMaxPeerBackoffS);
  EXPECT_EQ(PeerSendWait(60, 5), 60);
}

// The in-flight counts of a peer that sends less often than this gateway are kept for five of
// the peer's intervals, not five of this gateway's (which dropped them between its messages).
// One model on two replicas, and a peer sync whose clock the test moves; it forgets a peer after
// 1 s of its own (five of its 0.2 s intervals).
class PeerSyncTest : public ::testing::Test {
 protected:
  static GatewayConfig Config() {
    GatewayConfig config;
    config.peers = {"http://127.0.0.1:1"};
    config.peer_sync_interval_s = 0.2;
    return config;
  }
  static ModelConfig Model() {
    ModelConfig m;
    m.name = "m";
    m.urls = {"http://127.0.0.1:2", "http://127.0.0.1:3"};
    return m;
  }
  int PeerInFlight(int replica) {
    return model.WithRouter([&](ModelRouter& r) { return r.load(replica).peer_in_flight; });
  }

  boost::asio::io_context io;
  ModelState model{Model(), {io.get_executor()}};
  double now = 100;
  PeerSync sync{Config(), {&model}, io.get_executor(), [this] { return now; }};
};

TEST_F(PeerSyncTest, APeersCountsAreKeptForFiveOfItsOwnIntervals) {
  const auto message = [](const std::string& instance, const std::string& interval, int busy) {
    return R"({"instance":")" + instance + "\"" + interval +
           R"(,"models":[{"name":"m","replicas":2,"homes":[],"in_flight":[0,)" +
           std::to_string(busy) + "]}]}";
  };
  const auto peer_in_flight = [&] { return PeerInFlight(1); };
  int taken = 0;
  ASSERT_EQ(sync.Receive(message("slow", R"(,"sync_interval_s":5)", 3), &taken), "");
  ASSERT_EQ(sync.Receive(message("quick", "", 2), &taken), "");
  EXPECT_EQ(peer_in_flight(), 5);
  now += 2;  // past this gateway's 1 s, within the slow peer's 25 s
  ASSERT_EQ(sync.Receive(message("other", "", 0), &taken), "");
  EXPECT_EQ(peer_in_flight(), 3);  // the quick one, silent for 2 s, is forgotten
  now += 30;
  ASSERT_EQ(sync.Receive(message("other", "", 0), &taken), "");
  EXPECT_EQ(peer_in_flight(), 0);
}

// Made-up peers cannot blow up the counts: a sum of many is capped (not wrapped around to a
// negative), an interval past a minute is taken as a minute, the gateways kept are bounded (the
// one heard from longest ago goes), .
TEST_F(PeerSyncTest, MadeUpPeersCannotBlowUpTheCounts) {
  const auto message = [](const std::string& instance, int busy, const std::string& more = "") {
    return R"({"instance":")" + instance + R"(","sync_interval_s":3600)" +
           R"(,"models":[{"name":"m","replicas":2,"homes":[],"in_flight":[)" +
           std::to_string(busy) + ",0]}" + more + "]}";
  };
  const auto peer_in_flight = [&] { return PeerInFlight(0); };
  int taken = 0;
  for (int i = 0; i < 3000; ++i) {
    ASSERT_EQ(sync.Receive(message("made-up-" + std::to_string(i), 1000000), &taken), "");
    now += 0.001;
  }
  EXPECT_EQ(peer_in_flight(), 1000000);
  now += 5 * 60 + 1;  // past five minutes: a made-up hour is not trusted
  ASSERT_EQ(sync.Receive(message("late", 2), &taken), "");
  EXPECT_EQ(peer_in_flight(), 2);
  // Unknown models are named once in the answer, and at most 64.
  std::string unknown;
  for (int i = 0; i < 100; ++i)
    unknown += R"(,{"name":"x)" + std::to_string(i % 70) + R"("},{"name":"x0"})";
  std::vector<std::string> not_served;
  ASSERT_EQ(sync.Receive(message("late", 2, unknown), &taken, &not_served), "");
  EXPECT_EQ(not_served.size(), 64u);
}

// More gateways than the counts kept, all sending: each keeps its counts as long as it can, and
// one pushed out and heard again wakes no loop (found by review: each such message woke every
// peer's loop, a burst of messages for each). A new gateway, and one back after going quiet for
// its stale time, still wake them.
TEST_F(PeerSyncTest, GatewaysPastTheBoundDoNotWakeTheLoopsAtEachMessage) {
  const auto message = [](const std::string& instance, int busy) {
    return R"({"instance":")" + instance + R"(","models":[{"name":"m","replicas":2,"homes":[],)" +
           R"("in_flight":[)" + std::to_string(busy) + ",0]}]}";
  };
  const auto wakes = [&] {
    io.restart();
    return io.poll();
  };
  int taken = 0;
  constexpr int kGateways = 300;  // past the 256 kept
  for (int i = 0; i < kGateways; ++i)
    ASSERT_EQ(sync.Receive(message("g" + std::to_string(i), 1), &taken), "");
  EXPECT_EQ(wakes(), static_cast<size_t>(kGateways));  // each new one woke the loops once
  EXPECT_EQ(PeerInFlight(0), 256);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kGateways; ++i)
      ASSERT_EQ(sync.Receive(message("g" + std::to_string(i), 1), &taken), "");
  }
  EXPECT_EQ(wakes(), 0u);
  EXPECT_EQ(PeerInFlight(0), 256);
  ASSERT_EQ(sync.Receive(message("newcomer", 1), &taken), "");
  EXPECT_EQ(wakes(), 1u);
  now += 2;  // every one quiet past its stale time (1 s)
  ASSERT_EQ(sync.Receive(message("g0", 1), &taken), "");
  EXPECT_EQ(wakes(), 1u);
  EXPECT_EQ(PeerInFlight(0), 1);
}

// Slices cut for a peer's body limit grow back, doubling at most once per kMaxHomesGrowBackS,
// up to kMaxHomesPerMessage (found by review: one 413 halved them for the process's life).
TEST(MaxHomesAfterTaken, GrowsBackSlowlyToTheFullSlice) {
  EXPECT_EQ(MaxHomesAfterTaken(1250, 100, 100 + kMaxHomesGrowBackS - 1), 1250u);
  EXPECT_EQ(MaxHomesAfterTaken(1250, 100, 100 + kMaxHomesGrowBackS), 2500u);
  EXPECT_EQ(MaxHomesAfterTaken(4000, 0, 1e6), kMaxHomesPerMessage);
  EXPECT_EQ(MaxHomesAfterTaken(kMaxHomesPerMessage, 0, 1e6), kMaxHomesPerMessage);
}

// A peer whose messages are refused is said once a minute, however many messages other peers
// have taken meanwhile (found by review: a healthy peer's reset the limit, a line a second).
TEST_F(PeerSyncTest, ARefusedPeerIsSaidOnceAMinuteWhileOthersAreTaken) {
  const auto message = [](const std::string& instance, int replicas) {
    return R"({"instance":")" + instance + R"(","models":[{"name":"m","replicas":)" +
           std::to_string(replicas) + R"(,"homes":[],"in_flight":[0,0]}]})";
  };
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  const std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  int taken = 0;
  for (int i = 0; i < 10; ++i) {
    EXPECT_NE(sync.Receive(message("misconfigured", 3), &taken), "");
    EXPECT_EQ(sync.Receive(message("healthy", 2), &taken), "");
    now += 1;
  }
  now += 60;
  EXPECT_NE(sync.Receive(message("misconfigured", 3), &taken), "");
  EXPECT_EQ(sync.Receive(message("misconfigured", 2), &taken), "");  // put right
  EXPECT_NE(sync.Receive(message("misconfigured", 3), &taken), "");  // and wrong again: said
  spdlog::set_default_logger(before);
  const std::vector<std::string> lines = sink->last_formatted();
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const std::string& l) {
                            return l.find("a peer's message refused: instance misconfigured: ") !=
                                   std::string::npos;
                          }),
            3);
}

// A conversation's latest turn's model and body size go to the peers with its home (a peer of an
// earlier version sends none, and a malformed list is refused): a side request at the peer is told
// apart as here (ModelRouter::IsSideRequest).
TEST_F(PeerSyncTest, TheLatestTurnsModelAndSizeGoWithTheHome) {
  RouteRequest turn;
  turn.sticky = true;
  turn.asked_model = 11;
  turn.body_bytes = 90'000;
  model.WithRouter([&](ModelRouter& r) { r.Route("s", turn, now); });
  const std::string message = sync.AllHomesMessage();
  boost::asio::io_context other_io;
  ModelState other{Model(), {other_io.get_executor()}};
  PeerSync other_sync{Config(), {&other}, other_io.get_executor(), [this] { return now; }};
  int taken = 0;
  ASSERT_EQ(other_sync.Receive(message, &taken), "");
  EXPECT_EQ(taken, 1);
  other.WithRouter([](ModelRouter& r) {
    const SessionTable::Entry* e = r.sessions().Find("s");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->thread_model, 11u);
    EXPECT_EQ(e->thread_body_bytes, 90'000u);
  });
  std::string bad = message;
  const size_t threads = bad.find(R"("threads":[[11,90000]])");
  ASSERT_NE(threads, std::string::npos) << message;
  bad.replace(threads, 22, R"("threads":[[11,-1]])");
  EXPECT_NE(other_sync.Receive(bad, &taken).find("threads: expected"), std::string::npos);
}

// A peer's LoRA adapter change stamped more than a day ahead of this clock is not believed (found
// by review: one at the end of time won over every later change of that name, and its stamp's
// successor overflowed); one within the day is taken.
TEST_F(PeerSyncTest, AnAdapterChangeFarInTheFutureIsNotBelieved) {
  const auto message = [](const std::string& name, int64_t at_us) {
    return R"({"instance":"p","models":[{"name":"m","replicas":2,"homes":[],"in_flight":[0,0],)"
           R"("lora_adapters":[{"name":")" +
           name + R"(","at_us":)" + std::to_string(at_us) + R"(,"request":"{}"}]}]})";
  };
  int taken = 0;
  ASSERT_EQ(sync.Receive(message("late", std::numeric_limits<int64_t>::max()), &taken), "");
  ASSERT_EQ(sync.Receive(message("soon", UnixMicros() + 3'600'000'000), &taken), "");
  std::vector<std::string> names;
  for (const LoadedAdapters::Record& r : model.loaded_adapters().Records()) names.push_back(r.name);
  EXPECT_EQ(names, std::vector<std::string>{"soon"});
}

}  // namespace
}  // namespace warden
