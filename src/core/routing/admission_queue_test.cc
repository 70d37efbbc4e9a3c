#include "core/routing/admission_queue.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

AdmissionQueue::Request Req(uint64_t id, int footprint, double last_active = -1) {
  return {id, footprint, last_active};
}

TEST(AdmissionQueue, OffAdmitsEverything) {
  AdmissionQueue q(1, AdmissionOptions{});
  q.SetCapacity(0, 100);
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_TRUE(q.Offer(0, Req(id, 80)));
  EXPECT_EQ(q.held(0), 0);
}

TEST(AdmissionQueue, HoldsWhatDoesNotFitAndAdmitsAnyRequestOnAnIdleReplica) {
  AdmissionOptions o;
  ParseAdmission("fifo", &o);
  AdmissionQueue q(2, o);
  q.SetCapacity(0, 100);
  q.SetCapacity(1, 100);
  EXPECT_TRUE(q.Offer(0, Req(1, 150)));  // idle: admitted although larger than the cache
  EXPECT_FALSE(q.Offer(0, Req(2, 10)));
  EXPECT_TRUE(q.Offer(1, Req(3, 60)));
  EXPECT_TRUE(q.Offer(1, Req(4, 40)));  // 60 + 40 = 100 fits exactly
  EXPECT_FALSE(q.Offer(1, Req(5, 1)));
  std::vector<uint64_t> released;
  q.Done(0, 150, &released);
  EXPECT_EQ(released, std::vector<uint64_t>{2});
  EXPECT_EQ(q.admitted(0), 1);
}

TEST(AdmissionQueue, FifoLetsHeldRequestsInInArrivalOrderAndNoOneJumpsTheQueue) {
  AdmissionOptions o;
  ParseAdmission("fifo", &o);
  AdmissionQueue q(1, o);
  q.SetCapacity(0, 100);
  EXPECT_TRUE(q.Offer(0, Req(1, 90)));
  EXPECT_FALSE(q.Offer(0, Req(2, 50)));
  EXPECT_FALSE(q.Offer(0, Req(3, 5)));  // it would fit, but request 2 waits before it
  std::vector<uint64_t> released;
  q.Done(0, 90, &released);
  EXPECT_EQ(released, (std::vector<uint64_t>{2, 3}));
}

TEST(AdmissionQueue, RecentLetsTheMostRecentlyActiveConversationInFirst) {
  AdmissionOptions o;
  ParseAdmission("recent:4", &o);
  AdmissionQueue q(1, o);
  q.SetCapacity(0, 100);
  EXPECT_TRUE(q.Offer(0, Req(1, 100)));
  EXPECT_FALSE(q.Offer(0, Req(2, 100, -1)));   // a new conversation
  EXPECT_FALSE(q.Offer(0, Req(3, 100, 5.0)));  // active here at t = 5
  EXPECT_FALSE(q.Offer(0, Req(4, 100, 9.0)));  // active here at t = 9: likeliest still cached
  std::vector<uint64_t> released;
  q.Done(0, 100, &released);
  EXPECT_EQ(released, std::vector<uint64_t>{4});
  released.clear();
  q.Done(0, 100, &released);
  EXPECT_EQ(released, std::vector<uint64_t>{3});
}

TEST(AdmissionQueue, NoRequestIsPassedOverMoreThanTheBound) {
  AdmissionOptions o;
  ParseAdmission("recent:2", &o);
  AdmissionQueue q(1, o);
  q.SetCapacity(0, 100);
  EXPECT_TRUE(q.Offer(0, Req(1, 100)));
  EXPECT_FALSE(q.Offer(0, Req(2, 100, -1)));
  std::vector<uint64_t> released;
  uint64_t id = 10;
  for (int round = 0; round < 3; ++round) {  // a fresher conversation keeps arriving
    EXPECT_FALSE(q.Offer(0, Req(id, 100, 100.0 + round)));
    ++id;
    released.clear();
    q.Done(0, 100, &released);
    ASSERT_EQ(released.size(), 1u);
  }
  EXPECT_EQ(released, std::vector<uint64_t>{2});  // passed over twice, then let in
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
