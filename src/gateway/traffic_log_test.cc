#include "gateway/traffic_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "core/workload/trace.h"

namespace warden {
namespace {

class TrafficLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/warden-traffic-log-test-" + std::to_string(::getpid());
    std::remove(path_.c_str());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::unique_ptr<TrafficLog> Open(int block_tokens) {
    std::string error;
    auto log = TrafficLog::Open(path_, block_tokens, 1'000'000, &error);
    EXPECT_NE(log, nullptr) << error;
    return log;
  }
  std::vector<TraceRequest> Read() const {
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    std::vector<TraceRequest> trace;
    std::string error;
    EXPECT_TRUE(ParseTrace(text.str(), &trace, &error)) << error;
    return trace;
  }

  std::string path_;
};

TrafficLog::Entry At(double arrived, double ended, std::string_view conversation,
                     const std::vector<uint64_t>& chunks, int input = 100, int output = 10) {
  TrafficLog::Entry e;
  e.arrived_s = arrived;
  e.ended_s = ended;
  e.conversation = conversation;
  e.chunks = chunks;
  e.input_tokens = input;
  e.output_tokens = output;
  return e;
}

TEST_F(TrafficLogTest, ABlockIsKnownByItsLastChunkAndTheLastMayBeShort) {
  auto log = Open(32);  // two chunks of 16 tokens to a block
  log->Record(At(0, 1, "a", {11, 12, 13, 14, 15}));
  log->Record(At(2, 3, "b", {11, 12, 13, 24}));          // shares the first block only
  log->Record(At(4, 5, "a", {11, 12, 13, 14, 15, 16}));  // the short block grew: another id
  log->Record(At(6, 7, "c", {}));
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 4u);
  EXPECT_EQ(trace[0].hash_ids, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(trace[1].hash_ids, (std::vector<uint64_t>{0, 3}));
  EXPECT_EQ(trace[2].hash_ids, (std::vector<uint64_t>{0, 1, 4}));
  EXPECT_TRUE(trace[3].hash_ids.empty());
  EXPECT_EQ(log->lines(), 4u);
  EXPECT_EQ(log->failed_writes(), 0u);
}

TEST_F(TrafficLogTest, TimesAreUnixMillisecondsAndSessionsAHashOfTheKey) {
  auto log = Open(512);
  log->Record(At(1.5, 2, "user-key", {1}, 1234, 56));
  log->Record(At(3, 4, "", {1}));
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_DOUBLE_EQ(trace[0].timestamp_ms, 1'001'500);
  EXPECT_EQ(trace[0].session_id.size(), 16u);
  EXPECT_EQ(trace[0].session_id.find("user"), std::string::npos);  // not the key itself
  EXPECT_EQ(trace[0].input_length, 1234);
  EXPECT_EQ(trace[0].output_length, 56);
  EXPECT_TRUE(trace[1].session_id.empty());  // no conversation
}

TEST_F(TrafficLogTest, TheDelayIsFromTheConversationsLastAnswerWhenItHadEnded) {
  auto log = Open(512);
  log->Record(At(0, 10, "a", {1}));
  log->Record(At(12.5, 20, "a", {1}));  // 2.5 s after the answer before it
  log->Record(At(25, 40, "a", {1}));    // recorded first: it ended first
  log->Record(At(21, 50, "a", {1}));    // came while the one before it ran: no delay
  log->Record(At(12, 13, "b", {1}));    // another conversation's first
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 5u);
  EXPECT_LT(trace[0].delay_ms, 0);
  EXPECT_DOUBLE_EQ(trace[1].delay_ms, 2500);
  EXPECT_DOUBLE_EQ(trace[2].delay_ms, 5000);
  EXPECT_LT(trace[3].delay_ms, 0);
  EXPECT_LT(trace[4].delay_ms, 0);
  EXPECT_EQ(trace[0].session_id, trace[3].session_id);
  EXPECT_NE(trace[0].session_id, trace[4].session_id);
}

TEST_F(TrafficLogTest, BadSettingsAndUnwritablePathsAreRefused) {
  std::string error;
  EXPECT_EQ(TrafficLog::Open(path_, 100, 0, &error), nullptr);
  EXPECT_NE(error.find("multiple of 16"), std::string::npos) << error;
  EXPECT_EQ(TrafficLog::Open("/nonexistent-dir/trace.jsonl", 512, 0, &error), nullptr);
  EXPECT_NE(error.find("cannot open /nonexistent-dir/trace.jsonl"), std::string::npos) << error;
}

}  // namespace
}  // namespace warden
