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
  // The lines written so far (the log flushes when it closes).
  std::vector<TraceRequest> Read() const {
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    std::vector<TraceRequest> trace;
    std::string error;
    EXPECT_TRUE(ParseTrace(text.str(), &trace, &error)) << error;
    return trace;
  }
  // A whole request: it comes at `arrived`, its answer ends at `ended`.
  static void Request(TrafficLog& log, double arrived, double ended, std::string_view conversation,
                      const std::vector<uint64_t>& chunks, int input = 100) {
    TrafficLog::Turn turn = log.Begin(conversation, arrived);
    log.Record(turn, Entry(ended, chunks, input));
  }
  static TrafficLog::Entry Entry(double ended, const std::vector<uint64_t>& chunks,
                                 int input = 100) {
    TrafficLog::Entry e;
    e.ended_s = ended;
    e.model = "m";
    e.chunks = chunks;
    e.prompt_bytes = chunks.size() * 64;
    e.input_tokens = input;
    e.input_counted = true;
    e.output_tokens = 10;
    return e;
  }

  std::string path_;
};

// Ids are numbered from the log's opening time: 1,000,000 ms, times 1,000.
constexpr uint64_t kBase = 1'000'000'000;
std::vector<uint64_t> Ids(std::initializer_list<uint64_t> offsets) {
  std::vector<uint64_t> ids;
  for (uint64_t o : offsets) ids.push_back(kBase + o);
  return ids;
}

TEST_F(TrafficLogTest, ABlockIsKnownByItsLastChunkAndTheLastMayBeShort) {
  auto log = Open(32);  // two chunks of 16 tokens to a block
  Request(*log, 0, 1, "a", {11, 12, 13, 14, 15});
  Request(*log, 2, 3, "b", {11, 12, 13, 24});          // shares the first block only
  Request(*log, 4, 5, "a", {11, 12, 13, 14, 15, 16});  // the short block grew: another id
  Request(*log, 6, 7, "c", {});
  Request(*log, 8, 9, "c", {11, 12, 13, 14, 15, 16}, 40);  // no more ids than 40 tokens fill
  EXPECT_EQ(log->lines(), 0u);                             // kept, not yet written
  log->FlushIfDue(0.5);                                    // not a second since the log opened
  EXPECT_EQ(log->lines(), 0u);
  log->FlushIfDue(1.0);
  EXPECT_EQ(log->lines(), 5u);
  log.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 5u);
  EXPECT_EQ(trace[0].hash_ids, Ids({0, 1, 2}));
  EXPECT_EQ(trace[1].hash_ids, Ids({0, 3}));
  EXPECT_EQ(trace[2].hash_ids, Ids({0, 1, 4}));
  EXPECT_TRUE(trace[3].hash_ids.empty());
  EXPECT_EQ(trace[4].hash_ids, Ids({0, 1}));
}

TEST_F(TrafficLogTest, ABlockHoldsAsManyBytesAsItsModelsTokensTake) {
  auto log = Open(512);
  // Before a long enough answer, 4 bytes a token: 32 chunks of 64 bytes a block. A short prompt
  // teaches nothing.
  std::vector<uint64_t> chunks(100);
  for (size_t i = 0; i < chunks.size(); ++i) chunks[i] = 1000 + i;
  TrafficLog::Turn first = log->Begin("a", 0);
  TrafficLog::Entry e = Entry(1, chunks, 600);
  e.prompt_bytes = 6400;
  log->Record(first, e);
  // 2,000 tokens in 12,000 bytes: 6 bytes a token, 48 chunks a block from now on.
  std::vector<uint64_t> longer(188);
  for (size_t i = 0; i < longer.size(); ++i) longer[i] = 5000 + i;
  TrafficLog::Turn second = log->Begin("b", 2);
  e = Entry(3, longer, 2000);
  e.prompt_bytes = 12000;
  log->Record(second, e);
  TrafficLog::Turn third = log->Begin("c", 4);
  e = Entry(5, chunks, 10);  // (a tiny prompt: ids capped at one)
  log->Record(third, e);
  log.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[0].hash_ids.size(), 2u);  // 600 tokens: 2 blocks, of 32 chunks
  EXPECT_EQ(trace[1].hash_ids.size(), 4u);  // 188 chunks / 48 = 4 (the last short)
  EXPECT_EQ(trace[2].hash_ids.size(), 1u);
}

TEST_F(TrafficLogTest, TimesAreUnixMillisecondsAndSessionsASaltedHashOfTheKey) {
  auto log = Open(512);
  TrafficLog::Turn keyed = log->Begin("user-key", 1.5);
  TrafficLog::Entry e = Entry(2, {1}, 1234);
  e.output_tokens = 56;
  log->Record(keyed, e);
  Request(*log, 3, 4, "", {1});
  log.reset();
  auto again = Open(512);  // another log: another salt
  Request(*again, 5, 6, "user-key", {1});
  again.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_DOUBLE_EQ(trace[0].timestamp_ms, 1'001'500);
  EXPECT_EQ(trace[0].session_id.size(), 16u);
  EXPECT_EQ(trace[0].input_length, 1234);
  EXPECT_EQ(trace[0].output_length, 56);
  EXPECT_TRUE(trace[1].session_id.empty());  // no conversation
  EXPECT_NE(trace[2].session_id, trace[0].session_id);
}

TEST_F(TrafficLogTest, TheDelayIsDecidedAsARequestComes) {
  auto log = Open(512);
  Request(*log, 0, 10, "a", {1});
  TrafficLog::Turn b = log->Begin("a", 12.5);  // 2.5 s after the answer before it
  TrafficLog::Turn c = log->Begin("a", 13);    // while b runs: none
  log->Record(c, Entry(25, {1}));              // ends first
  log->Record(b, Entry(20, {1}));
  Request(*log, 30, 31, "a", {1});  // 5 s after the latest end (c's)
  Request(*log, 12, 13, "z", {1});  // another conversation's first
  log.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 5u);
  EXPECT_LT(trace[0].delay_ms, 0);
  EXPECT_LT(trace[1].delay_ms, 0);  // c
  EXPECT_DOUBLE_EQ(trace[2].delay_ms, 2500);
  EXPECT_DOUBLE_EQ(trace[3].delay_ms, 5000);
  EXPECT_LT(trace[4].delay_ms, 0);
  EXPECT_EQ(trace[0].session_id, trace[3].session_id);
  EXPECT_NE(trace[0].session_id, trace[4].session_id);
}

// A turn is over for its conversation once its answer is whole, before its line is kept: a
// client that sends its next turn the moment the answer is in finds the turn before it over, and
// gets a delay (found in a fresh-clone run: the next turn came first, and had none).
TEST_F(TrafficLogTest, ATurnIsOverOnceItsAnswerIsWholeBeforeItsLineIsKept) {
  auto log = Open(512);
  TrafficLog::Turn first = log->Begin("a", 0);
  first.Answered(10);
  TrafficLog::Turn next = log->Begin("a", 10.25);  // before the first's line is kept
  log->Record(first, Entry(10, {1}));
  TrafficLog::Turn during = log->Begin("a", 11);  // while `next` runs: none
  log->Record(next, Entry(12, {1}));
  log->Record(during, Entry(13, {1}));
  log.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_LT(trace[0].delay_ms, 0);
  EXPECT_DOUBLE_EQ(trace[1].delay_ms, 250);
  EXPECT_LT(trace[2].delay_ms, 0);
}

TEST_F(TrafficLogTest, ATurnNeverAnsweredLeavesNothingInFlight) {
  auto log = Open(512);
  Request(*log, 0, 10, "a", {1});
  { TrafficLog::Turn lost = log->Begin("a", 11); }  // its client left, say
  Request(*log, 14, 15, "a", {1});
  log.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_DOUBLE_EQ(trace[1].delay_ms, 4000);
}

TEST_F(TrafficLogTest, ASideRequestHasNoSessionAndDoesNotKeepItsConversationBusy) {
  auto log = Open(512);
  Request(*log, 0, 10, "a", {1});
  TrafficLog::Turn side = log->Begin("a", 11);
  side.MarkSide();                  // routed as a side request under a's key
  Request(*log, 12, 13, "a", {1});  // came while it ran: a delay all the same
  log->Record(side, Entry(15, {7}));
  Request(*log, 16, 17, "a", {1});
  log.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 4u);
  EXPECT_EQ(trace[0].session_id, trace[1].session_id);
  EXPECT_DOUBLE_EQ(trace[1].delay_ms, 2000);
  EXPECT_TRUE(trace[2].session_id.empty());  // the side request
  EXPECT_EQ(trace[3].session_id, trace[0].session_id);
  EXPECT_DOUBLE_EQ(trace[3].delay_ms, 3000);  // since its own answer at 13, not the side's at 15
}

TEST_F(TrafficLogTest, AnotherOpeningOfTheSameFileGivesOtherIds) {
  auto log = Open(512);
  Request(*log, 0, 1, "a", {1, 2});
  log.reset();
  std::string error;
  auto later = TrafficLog::Open(path_, 512, 2'000'000, &error);  // 1,000 s later
  ASSERT_NE(later, nullptr) << error;
  Request(*later, 0, 1, "b", {3, 4});
  later.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace[0].hash_ids, Ids({0}));
  EXPECT_EQ(trace[1].hash_ids, (std::vector<uint64_t>{2'000'000'000}));
}

TEST_F(TrafficLogTest, ABlocksBytesAreNotLearntFromAGuessOrAStoredResponsesTurn) {
  auto log = Open(512);
  std::vector<uint64_t> chunks(100);
  for (size_t i = 0; i < chunks.size(); ++i) chunks[i] = 1000 + i;
  TrafficLog::Turn guessed = log->Begin("a", 0);
  TrafficLog::Entry e = Entry(1, chunks, 6400);  // 1 byte a token, but a guess
  e.input_counted = false;
  log->Record(guessed, e);
  TrafficLog::Turn stored = log->Begin("a", 2);
  e = Entry(3, chunks, 6400);
  e.continues_stored = true;
  log->Record(stored, e);
  Request(*log, 4, 5, "b", chunks, 1600);  // 4 bytes a token: still 32 chunks a block
  log.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[2].hash_ids.size(), 4u);  // 100 chunks / 32
}

TEST_F(TrafficLogTest, ATurnOnAStoredResponseGoesOnFromItsConversationsIds) {
  auto log = Open(32);
  Request(*log, 0, 1, "a", {11, 12, 13, 14});
  TrafficLog::Turn next = log->Begin("a", 2);
  TrafficLog::Entry e = Entry(3, {91, 92});  // only the new input (previous_response_id)
  e.continues_stored = true;
  log->Record(next, e);
  Request(*log, 4, 5, "b", {91, 92});  // the same new text elsewhere: another prefix
  TrafficLog::Turn short_one = log->Begin("a", 6);
  e = Entry(7, {93, 94, 95, 96}, 40);  // 40 tokens fill 2 blocks: no more ids than that
  e.continues_stored = true;
  log->Record(short_one, e);
  log.reset();
  const auto trace = Read();
  ASSERT_EQ(trace.size(), 4u);
  EXPECT_EQ(trace[0].hash_ids, Ids({0, 1}));
  EXPECT_EQ(trace[1].hash_ids, Ids({0, 1, 2}));
  EXPECT_EQ(trace[2].hash_ids, Ids({3}));
  EXPECT_EQ(trace[3].hash_ids, Ids({0, 1}));
}

TEST_F(TrafficLogTest, AfterARotationItGoesOnInTheNewFile) {
  auto log = Open(512);
  Request(*log, 0, 1, "a", {1});
  const std::string rotated = path_ + ".1";
  ASSERT_EQ(std::rename(path_.c_str(), rotated.c_str()), 0);
  std::string error;
  ASSERT_TRUE(log->Reopen(path_, &error)) << error;  // the line kept went to the old file
  Request(*log, 2, 3, "a", {1});
  EXPECT_FALSE(log->Reopen("/nonexistent-dir/t.jsonl", &error));  // keeps the file it has
  Request(*log, 4, 5, "a", {1});
  log.reset();
  std::ifstream old_file(rotated);
  const std::string old_text((std::istreambuf_iterator<char>(old_file)),
                             std::istreambuf_iterator<char>());
  std::remove(rotated.c_str());
  EXPECT_EQ(std::count(old_text.begin(), old_text.end(), '\n'), 1);
  EXPECT_EQ(Read().size(), 2u);
}

// A full disk: the lines that did not go are counted as lost, and the log knows it is failing
// until a batch goes whole again.
TEST_F(TrafficLogTest, LinesAFullDiskRefusesAreCountedLost) {
  std::string error;
  auto log = TrafficLog::Open("/dev/full", 16, 0, &error);
  ASSERT_NE(log, nullptr) << error;
  Request(*log, 0, 1, "a", {1, 2});
  Request(*log, 1, 2, "b", {3});
  log->FlushIfDue(-1);
  EXPECT_EQ(log->failed_writes(), 2u);
  EXPECT_EQ(log->lines(), 0u);
  EXPECT_TRUE(log->failing());
  ASSERT_TRUE(log->Reopen(path_, &error)) << error;
  Request(*log, 2, 3, "c", {4});
  log->FlushIfDue(-1);
  EXPECT_FALSE(log->failing());
  EXPECT_EQ(log->lines(), 1u);
  EXPECT_EQ(Read().size(), 1u);
}

TEST_F(TrafficLogTest, BadSettingsAndUnwritablePathsAreRefused) {
  std::string error;
  EXPECT_EQ(TrafficLog::Open(path_, 100, 0, &error), nullptr);
  EXPECT_NE(error.find("multiple of 16"), std::string::npos) << error;
  EXPECT_EQ(TrafficLog::Open("/nonexistent-dir/trace.jsonl", 512, 0, &error), nullptr);
  EXPECT_NE(error.find("cannot open /nonexistent-dir/trace.jsonl"), std::string::npos) << error;
  // Checked without being made.
  EXPECT_FALSE(TrafficLog::CouldOpen("/nonexistent-dir/trace.jsonl", &error));
  EXPECT_TRUE(TrafficLog::CouldOpen(path_, &error)) << error;
  std::ifstream made(path_);
  EXPECT_FALSE(made.good());
  // A folder where the file should be (found by review: --check said it was fine, serve refused).
  const std::string folder = path_.substr(0, path_.rfind('/'));
  EXPECT_FALSE(TrafficLog::CouldOpen(folder, &error));
  EXPECT_NE(error.find("Is a directory"), std::string::npos) << error;
}

}  // namespace
}  // namespace warden
