#include "core/routing/admission_queue.h"

#include <gtest/gtest.h>

#include <numeric>

namespace warden {

namespace {

// A request whose prompt is `blocks` blocks of its own (none shared), each of one token here.
AdmissionQueue::Request Req(uint64_t id, int blocks, double last_active = -1) {
  AdmissionQueue::Request r;
  r.id = id;
  r.blocks.resize(blocks);
  std::iota(r.blocks.begin(), r.blocks.end(), id * 1000000);
  r.last_active = last_active;
  return r;
}

AdmissionQueue Queue(const char* mode, int replicas = 1, int capacity = 100) {
  AdmissionOptions o;
  EXPECT_EQ(ParseAdmission(mode, &o), "");
  AdmissionQueue q(replicas, /*block_tokens=*/1, /*reply_tokens=*/0, o);
  for (int i = 0; i < replicas; ++i) q.SetCapacity(i, capacity);
  return q;
}

std::vector<uint64_t> DoneReleases(AdmissionQueue& q, uint64_t id) {
  std::vector<uint64_t> released;
  q.Done(id, -1, -1, &released);
  return released;
}

TEST(AdmissionQueue, OffAdmitsEverything) {
  AdmissionQueue q = Queue("off");
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_TRUE(q.Offer(0, Req(id, 80)));
  EXPECT_EQ(q.held(0), 0);
  EXPECT_EQ(q.admitted(0), 5);
}

TEST(AdmissionQueue, HoldsWhatDoesNotFitAndAdmitsAnyRequestOnAnIdleReplica) {
  AdmissionQueue q = Queue("fifo", 2);
  EXPECT_TRUE(q.Offer(0, Req(1, 150)));  // idle: admitted although larger than the cache
  EXPECT_FALSE(q.Offer(0, Req(2, 10)));
  EXPECT_TRUE(q.Offer(1, Req(3, 60)));
  EXPECT_TRUE(q.Offer(1, Req(4, 40)));  // 60 + 40 = 100 fits exactly
  EXPECT_FALSE(q.Offer(1, Req(5, 1)));
  EXPECT_EQ(DoneReleases(q, 1), std::vector<uint64_t>{2});
  EXPECT_EQ(q.admitted(0), 1);
  EXPECT_EQ(q.claimed_tokens(0), 10);
}

TEST(AdmissionQueue, RequestsInFlightShareTheirCommonPrefix) {
  AdmissionQueue q = Queue("fifo");
  AdmissionQueue::Request a = Req(1, 80), b = Req(2, 80);
  std::copy(a.blocks.begin(), a.blocks.begin() + 70, b.blocks.begin());  // same first 70 blocks
  EXPECT_TRUE(q.Offer(0, a));
  EXPECT_TRUE(q.Offer(0, b));  // claims 10: fits beside a's 80
  EXPECT_EQ(q.claimed_tokens(0), 90);
  EXPECT_TRUE(DoneReleases(q, 1).empty());
  EXPECT_EQ(q.claimed_tokens(0), 80);  // b alone now holds the shared 70 blocks
}

TEST(AdmissionQueue, FifoLetsHeldRequestsInInArrivalOrderAndNoOneJumpsTheQueue) {
  AdmissionQueue q = Queue("fifo");
  EXPECT_TRUE(q.Offer(0, Req(1, 90)));
  EXPECT_FALSE(q.Offer(0, Req(2, 50)));
  EXPECT_FALSE(q.Offer(0, Req(3, 5)));  // it would fit, but request 2 waits before it
  EXPECT_EQ(DoneReleases(q, 1), (std::vector<uint64_t>{2, 3}));
}

TEST(AdmissionQueue, RecentLetsTheMostRecentlyActiveConversationInFirst) {
  AdmissionQueue q = Queue("recent:4");
  EXPECT_TRUE(q.Offer(0, Req(1, 100)));
  EXPECT_FALSE(q.Offer(0, Req(2, 100, -1)));   // a new conversation
  EXPECT_FALSE(q.Offer(0, Req(3, 100, 5.0)));  // active here at t = 5
  EXPECT_FALSE(q.Offer(0, Req(4, 100, 9.0)));  // active here at t = 9: likeliest still cached
  EXPECT_EQ(DoneReleases(q, 1), std::vector<uint64_t>{4});
  EXPECT_EQ(DoneReleases(q, 4), std::vector<uint64_t>{3});
  EXPECT_EQ(DoneReleases(q, 3), std::vector<uint64_t>{2});
}

TEST(AdmissionQueue, NoRequestIsPassedOverMoreThanTheBound) {
  AdmissionQueue q = Queue("recent:2");
  EXPECT_TRUE(q.Offer(0, Req(1, 100)));
  EXPECT_FALSE(q.Offer(0, Req(2, 100, -1)));
  uint64_t running = 1;
  std::vector<uint64_t> released;
  for (int round = 0; round < 3; ++round) {  // a fresher conversation keeps arriving
    EXPECT_FALSE(q.Offer(0, Req(10 + round, 100, 100.0 + round)));
    released = DoneReleases(q, running);
    ASSERT_EQ(released.size(), 1u);
    running = released[0];
  }
  EXPECT_EQ(released, std::vector<uint64_t>{2});  // passed over twice, then let in
}

// The gateway cuts prompts into byte chunks and guesses the reply: the usage the engine reports
// corrects both, so claims come out in tokens.
TEST(AdmissionQueue, LearnsTokensPerBlockAndReplyLengthFromUsage) {
  AdmissionOptions o;
  ParseAdmission("fifo", &o);
  AdmissionQueue q(1, /*block_tokens=*/16, /*reply_tokens=*/512, o);
  for (uint64_t id = 1; id <= 100; ++id) {
    ASSERT_TRUE(q.Offer(0, Req(id, 40)));
    std::vector<uint64_t> released;
    q.Done(id, /*prompt_tokens=*/405, /*output_tokens=*/100, &released);  // 10 tokens per block
  }
  EXPECT_NEAR(q.tokens_per_block(), 10, 0.1);
  EXPECT_NEAR(q.reply_tokens(), 100, 1);
  ASSERT_TRUE(q.Offer(0, Req(1000, 40)));
  EXPECT_NEAR(q.claimed_tokens(0), 40 * 10 + 100, 5);
}

TEST(AdmissionQueue, ACancelledRequestIsNeverReleased) {
  AdmissionQueue q = Queue("fifo");
  EXPECT_TRUE(q.Offer(0, Req(1, 100)));
  EXPECT_FALSE(q.Offer(0, Req(2, 100)));
  std::vector<uint64_t> released;
  EXPECT_TRUE(q.Cancel(2, &released));
  EXPECT_FALSE(q.Cancel(2, &released));
  EXPECT_TRUE(released.empty());
  EXPECT_TRUE(DoneReleases(q, 1).empty());
  EXPECT_EQ(q.admitted(0), 0);
  EXPECT_EQ(q.claimed_tokens(0), 0);
}

// A large held request that leaves must not keep a smaller one behind it waiting for a Done.
TEST(AdmissionQueue, ARequestLeavingTheQueueLetsInTheOnesBehindIt) {
  AdmissionQueue q = Queue("fifo");
  EXPECT_TRUE(q.Offer(0, Req(1, 70)));
  EXPECT_FALSE(q.Offer(0, Req(2, 90)));
  EXPECT_FALSE(q.Offer(0, Req(3, 20)));  // fits, but waits behind request 2
  std::vector<uint64_t> released;
  EXPECT_TRUE(q.Cancel(2, &released));
  EXPECT_EQ(released, std::vector<uint64_t>{3});
  EXPECT_EQ(q.admitted(0), 2);
}

TEST(AdmissionQueue, ParseRejectsWhatItDoesNotKnow) {
  AdmissionOptions o;
  EXPECT_EQ(ParseAdmission("off", &o), "");
  EXPECT_FALSE(o.enabled);
  EXPECT_EQ(ParseAdmission("recent:3", &o), "");
  EXPECT_TRUE(o.enabled);
  EXPECT_EQ(o.max_bypass, 3);
  EXPECT_NE(ParseAdmission("recent:", &o), "");
  EXPECT_NE(ParseAdmission("recent:-1", &o), "");
  EXPECT_NE(ParseAdmission("lifo", &o), "");
}

}  // namespace
}  // namespace warden
