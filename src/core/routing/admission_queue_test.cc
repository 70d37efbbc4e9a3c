#include "core/routing/admission_queue.h"

#include <gtest/gtest.h>

#include <limits>
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

// A queue in `mode` whose 60-token turn of conversation 7 ended whole at `now`: its room is kept
// for the conversation's next turn.
AdmissionQueue WithAReservation(const char* mode, double now) {
  AdmissionQueue q = Queue(mode);
  AdmissionQueue::Request first = Req(1, 60);
  first.conversation = 7;
  EXPECT_TRUE(q.Offer(0, first));
  std::vector<uint64_t> released;
  q.Done(1, -1, -1, &released, now, /*completed=*/true);
  EXPECT_EQ(q.reserved(0), 1);
  return q;
}

AdmissionOptions Mode(const char* text) {
  AdmissionOptions o;
  EXPECT_EQ(ParseAdmission(text, &o), "");
  return o;
}

// An operator switches the mode at run time: off lets every held request in, in arrival order,
// and gives up reservations; the claims admitted before stay counted.
TEST(AdmissionQueue, AModeSwitchedOffLetsEveryHeldRequestIn) {
  AdmissionQueue q = WithAReservation("reserve:3", 0);
  EXPECT_FALSE(q.Offer(0, Req(2, 60)));
  EXPECT_FALSE(q.Offer(0, Req(3, 60)));
  std::vector<uint64_t> released;
  q.SetOptions(Mode("off"), 0, &released);
  EXPECT_EQ(released, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(q.reserved(0), 0);
  EXPECT_EQ(q.held(0), 0);
  EXPECT_DOUBLE_EQ(q.claimed_tokens(0), 120);
  EXPECT_TRUE(q.Offer(0, Req(4, 60)));  // off: admitted at once, and counted
  EXPECT_EQ(q.admitted(0), 3);
}

// A shorter time for reservations holds for those already made: they end by then.
TEST(AdmissionQueue, AShorterReservationTimeHoldsForTheReservationsMade) {
  AdmissionQueue q = WithAReservation("reserve:3:600", 10);
  EXPECT_DOUBLE_EQ(q.next_expiry(), 610);
  EXPECT_FALSE(q.Offer(0, Req(2, 60)));
  std::vector<uint64_t> released;
  q.SetOptions(Mode("reserve:3:1"), 20, &released);
  EXPECT_DOUBLE_EQ(q.next_expiry(), 21);
  q.Expire(21, &released);
  EXPECT_EQ(released, std::vector<uint64_t>{2});
}

// Switched on, or to another mode, the held requests follow the new mode's order.
TEST(AdmissionQueue, AModeSwitchedToAnotherTakesItsOrderAtOnce) {
  AdmissionQueue q = Queue("fifo");
  ASSERT_TRUE(q.Offer(0, Req(1, 60)));
  EXPECT_FALSE(q.Offer(0, Req(2, 50, /*last_active=*/1)));
  EXPECT_FALSE(q.Offer(0, Req(3, 30, /*last_active=*/9)));
  std::vector<uint64_t> released;
  q.SetOptions(Mode("recent:4"), 0, &released);
  EXPECT_EQ(released, (std::vector<uint64_t>{3}));  // fifo kept it behind 2, which does not fit
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

// A replica restarted with a larger KV cache (or a scrape that reads it for the first time after
// a smaller guess) has room now: what waits there must not wait for the next request to end.
TEST(AdmissionQueue, ALargerCacheLetsTheHeldRequestsInAtOnce) {
  AdmissionQueue q = Queue("fifo", 1, 100);
  EXPECT_TRUE(q.Offer(0, Req(1, 80)));
  EXPECT_FALSE(q.Offer(0, Req(2, 50)));
  EXPECT_FALSE(q.Offer(0, Req(3, 60)));
  std::vector<uint64_t> released;
  q.SetCapacity(0, 90, &released);  // smaller: nothing moves
  EXPECT_TRUE(released.empty());
  q.SetCapacity(0, 130, &released);  // 80 + 50 fit, not + 60
  EXPECT_EQ(released, std::vector<uint64_t>{2});
  q.SetCapacity(0, 0, &released);  // unknown again: no limit
  EXPECT_EQ(released, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(q.held(0), 0);
}

// A request ending on one replica may teach admission that claims are smaller than it thought
// (shorter replies): requests held on the other replicas are checked against that at once.
TEST(AdmissionQueue, SmallerEstimatesLetInWhatWaitsOnEveryReplica) {
  AdmissionOptions o;
  ParseAdmission("fifo", &o);
  AdmissionQueue q(2, /*block_tokens=*/1, /*reply_tokens=*/50, o);
  q.SetCapacity(0, 200);
  q.SetCapacity(1, 200);
  EXPECT_TRUE(q.Offer(1, Req(1, 100)));  // claims 150
  EXPECT_FALSE(q.Offer(1, Req(2, 10)));  // would claim 60: 210 > 200
  EXPECT_TRUE(q.Offer(0, Req(3, 10)));
  std::vector<uint64_t> released;
  q.Done(3, /*prompt_tokens=*/-1, /*output_tokens=*/0, &released);  // replies: 50 -> 45
  EXPECT_EQ(released, std::vector<uint64_t>{2});  // 100 + 45 + 10 + 45 = 200 fits on replica 1
  EXPECT_EQ(q.admitted(1), 2);
}

// A request of conversation `conversation` (its prompt: `blocks` blocks of its own).
AdmissionQueue::Request Turn(uint64_t id, int blocks, uint64_t conversation) {
  AdmissionQueue::Request r = Req(id, blocks);
  r.conversation = conversation;
  return r;
}

// The next turn of the same conversation: its previous prompt plus `extra` blocks.
AdmissionQueue::Request NextTurn(uint64_t id, const AdmissionQueue::Request& previous, int extra) {
  AdmissionQueue::Request r = Req(id, extra);
  r.blocks.insert(r.blocks.begin(), previous.blocks.begin(), previous.blocks.end());
  r.conversation = previous.conversation;
  return r;
}

std::vector<uint64_t> Finish(AdmissionQueue& q, uint64_t id, double now) {
  std::vector<uint64_t> released;
  q.Done(id, /*prompt_tokens=*/0, /*output_tokens=*/0, &released, now, /*completed=*/true);
  return released;
}

// reserve:N keeps an ended turn's room for the conversation's next turn, so a held request does
// not take it (and evict the history) in the moment the client needs to send that turn.
TEST(AdmissionQueue, AReservationKeepsTheRoomForTheConversationsNextTurn) {
  AdmissionQueue q = Queue("reserve:3:1.5");
  const AdmissionQueue::Request a = Turn(1, 60, /*conversation=*/77);
  EXPECT_TRUE(q.Offer(0, a, 0.0));
  EXPECT_FALSE(q.Offer(0, Req(2, 50), 0.1));  // another conversation: does not fit beside a
  EXPECT_TRUE(Finish(q, 1, 1.0).empty());     // a's 60 stay reserved: request 2 still held
  EXPECT_EQ(q.reserved(0), 1);
  EXPECT_EQ(q.claimed_tokens(0), 60);
  EXPECT_EQ(q.next_expiry(), 2.5);
  std::vector<uint64_t> released;
  EXPECT_TRUE(q.Offer(0, NextTurn(3, a, 5), 1.2, &released));  // takes its reservation: in at once
  EXPECT_TRUE(released.empty());
  EXPECT_EQ(q.reserved(0), 0);
  EXPECT_EQ(q.claimed_tokens(0), 65);
  EXPECT_EQ(q.held(0), 1);
}

TEST(AdmissionQueue, AnExpiredReservationLetsTheHeldRequestsIn) {
  AdmissionQueue q = Queue("reserve:3:1.5");
  const AdmissionQueue::Request a = Turn(1, 60, /*conversation=*/77);
  EXPECT_TRUE(q.Offer(0, a, 0.0));
  EXPECT_FALSE(q.Offer(0, Req(2, 50), 0.1));
  EXPECT_TRUE(Finish(q, 1, 1.0).empty());
  std::vector<uint64_t> released;
  q.Expire(2.4, &released);  // not yet
  EXPECT_TRUE(released.empty());
  q.Expire(2.5, &released);
  EXPECT_EQ(released, std::vector<uint64_t>{2});
  EXPECT_EQ(q.reserved(0), 0);
  EXPECT_EQ(q.next_expiry(), std::numeric_limits<double>::infinity());
  // The conversation comes back late: an ordinary request again, held behind nobody here.
  EXPECT_FALSE(q.Offer(0, NextTurn(3, a, 5), 3.0));
}

// A request held as long as its client waits for an answer's head goes in whatever the room: the
// client would otherwise give up and send it again, to the back of the queue. The oldest first,
// whatever the order; what it claims counts, so the others wait for room as before.
TEST(AdmissionQueue, ARequestHeldTheLongestHoldGoesInWhateverTheRoom) {
  AdmissionQueue q = Queue("recent:4");
  q.SetMaxHold(120);
  EXPECT_TRUE(q.Offer(0, Req(1, 80), 0.0));
  EXPECT_FALSE(q.Offer(0, Req(2, 50, /*last_active=*/-1), 10.0));
  EXPECT_FALSE(q.Offer(0, Req(3, 50, /*last_active=*/5), 20.0));  // first when room frees
  EXPECT_EQ(q.next_expiry(), 130);
  std::vector<uint64_t> released;
  q.Expire(129.9, &released);
  EXPECT_TRUE(released.empty());
  q.Expire(130, &released);
  EXPECT_EQ(released, std::vector<uint64_t>{2});
  EXPECT_EQ(q.held_too_long(0), 1);
  EXPECT_EQ(q.claimed_tokens(0), 130);  // over the room of 100
  EXPECT_EQ(q.next_expiry(), 140);
  // A change of mode gives up reservations; it lets no held request in early.
  released.clear();
  q.SetOptions(Mode("fifo"), 131, &released);
  EXPECT_TRUE(released.empty());
  EXPECT_EQ(DoneReleases(q, 1), std::vector<uint64_t>{3});  // 50 + 50 fit
  EXPECT_EQ(q.next_expiry(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(q.held_too_long(0), 1);  // (3 was let in for room)
}

// A request routed again after a hold elsewhere (that replica drained, or lost) counts its hold
// from its arrival, and takes its place among the held by it.
TEST(AdmissionQueue, ARequestRoutedAgainCountsItsHoldFromItsArrival) {
  AdmissionQueue q = Queue("fifo");
  q.SetMaxHold(120);
  EXPECT_TRUE(q.Offer(0, Req(1, 80), 0.0));
  EXPECT_FALSE(q.Offer(0, Req(2, 50), 50.0));
  AdmissionQueue::Request again = Req(3, 50);
  again.arrived = 10;  // held 90 s on another replica first
  EXPECT_FALSE(q.Offer(0, again, 100.0));
  EXPECT_EQ(q.next_expiry(), 130);
  std::vector<uint64_t> released;
  q.Expire(130, &released);
  EXPECT_EQ(released, std::vector<uint64_t>{3});
  EXPECT_EQ(q.next_expiry(), 170);
}

TEST(AdmissionQueue, WithoutALongestHoldARequestWaitsForRoom) {
  AdmissionQueue q = Queue("fifo");
  EXPECT_TRUE(q.Offer(0, Req(1, 80), 0.0));
  EXPECT_FALSE(q.Offer(0, Req(2, 50), 10.0));
  EXPECT_EQ(q.next_expiry(), std::numeric_limits<double>::infinity());
  std::vector<uint64_t> released;
  q.Expire(1e9, &released);
  EXPECT_TRUE(released.empty());
}

// A replica out of service (lost, or back with an empty cache) keeps no reservation: what it
// kept room for is gone, and a request held there goes in at once; other replicas keep theirs.
TEST(AdmissionQueue, AReplicaOutOfServiceGivesUpItsReservations) {
  AdmissionQueue q = Queue("reserve:3:60", /*replicas=*/2);
  EXPECT_TRUE(q.Offer(0, Turn(1, 60, /*conversation=*/77), 0.0));
  EXPECT_TRUE(q.Offer(1, Turn(2, 60, /*conversation=*/88), 0.0));
  EXPECT_TRUE(Finish(q, 1, 1.0).empty());
  EXPECT_TRUE(Finish(q, 2, 1.0).empty());
  EXPECT_FALSE(q.Offer(0, Req(3, 50), 1.1));  // behind 77's reservation
  std::vector<uint64_t> released;
  q.GiveUpReservations(0, &released);
  EXPECT_EQ(released, std::vector<uint64_t>{3});
  EXPECT_EQ(q.reserved(0), 0);
  EXPECT_EQ(q.reserved(1), 1);
  released.clear();
  q.GiveUpReservations(0, &released);  // nothing more to give
  EXPECT_TRUE(released.empty());
}

// A draining gateway takes no next turn: its reservations go to the held requests, and turns
// that end from then on reserve nothing.
TEST(AdmissionQueue, StopReservingGivesTheRoomToTheHeldRequests) {
  AdmissionQueue q = Queue("reserve:3:60");
  const AdmissionQueue::Request a = Turn(1, 60, /*conversation=*/77);
  EXPECT_TRUE(q.Offer(0, a, 0.0));
  EXPECT_FALSE(q.Offer(0, Turn(2, 50, /*conversation=*/88), 0.1));
  EXPECT_TRUE(Finish(q, 1, 1.0).empty());  // a reserves its room for 60 s
  std::vector<uint64_t> released;
  q.StopReserving(&released);
  EXPECT_EQ(released, std::vector<uint64_t>{2});
  EXPECT_EQ(q.reserved(0), 0);
  EXPECT_TRUE(Finish(q, 2, 2.0).empty());  // a completed turn, and yet nothing reserved
  EXPECT_EQ(q.reserved(0), 0);
  EXPECT_EQ(q.claimed_tokens(0), 0);
}

// After N turns in a row the conversation's room goes to the queue: the held requests are not
// passed over for a whole session.
TEST(AdmissionQueue, OnlyNTurnsInARowKeepTheirRoom) {
  AdmissionQueue q = Queue("reserve:2");
  AdmissionQueue::Request turn = Turn(1, 60, /*conversation=*/77);
  EXPECT_TRUE(q.Offer(0, turn, 0));
  EXPECT_FALSE(q.Offer(0, Req(100, 50), 0.1));
  EXPECT_TRUE(Finish(q, 1, 1).empty());  // turn 1 ends: reserved
  turn = NextTurn(2, turn, 1);
  EXPECT_TRUE(q.Offer(0, turn, 1.1));
  EXPECT_EQ(Finish(q, 2, 2), std::vector<uint64_t>{100});  // turn 2 ends: the room goes on
  EXPECT_EQ(q.reserved(0), 0);
}

// A failed turn (usage unknown) or a request without a conversation reserves nothing.
TEST(AdmissionQueue, FailedTurnsAndKeylessRequestsReserveNothing) {
  AdmissionQueue q = Queue("reserve:3");
  const AdmissionQueue::Request a = Turn(1, 60, /*conversation=*/77);
  EXPECT_TRUE(q.Offer(0, a, 0));
  EXPECT_FALSE(q.Offer(0, Req(2, 50), 0.1));
  EXPECT_EQ(DoneReleases(q, 1), std::vector<uint64_t>{2});  // usage -1: failed
  EXPECT_EQ(q.reserved(0), 0);
  EXPECT_TRUE(Finish(q, 2, 1).empty());  // conversation 0: nothing to reserve for
  EXPECT_EQ(q.reserved(0), 0);
}

// A next turn smaller than the reserved one (a compacted history): what the reservation kept
// beyond it goes to the held requests at once.
TEST(AdmissionQueue, ASmallerNextTurnLetsTheHeldRequestsIntoTheRest) {
  AdmissionQueue q = Queue("reserve:3");
  EXPECT_TRUE(q.Offer(0, Turn(1, 90, /*conversation=*/77), 0));
  std::vector<uint64_t> released;
  EXPECT_FALSE(q.Offer(0, Req(2, 50), 0.1, &released));
  EXPECT_TRUE(Finish(q, 1, 1).empty());                                       // reserved: 90
  EXPECT_TRUE(q.Offer(0, Turn(3, 30, /*conversation=*/77), 1.1, &released));  // compacted: 30
  EXPECT_EQ(released, std::vector<uint64_t>{2});                              // 30 + 50 fit in 100
  EXPECT_EQ(q.claimed_tokens(0), 80);
}

// The conversation was sent elsewhere (overflow, re-home): its reservation is given up at once.
TEST(AdmissionQueue, AReservationOnAnotherReplicaIsGivenUp) {
  AdmissionQueue q = Queue("reserve:3", /*replicas=*/2);
  const AdmissionQueue::Request a = Turn(1, 60, /*conversation=*/77);
  EXPECT_TRUE(q.Offer(0, a, 0));
  EXPECT_FALSE(q.Offer(0, Req(2, 50), 0.1));
  EXPECT_TRUE(Finish(q, 1, 1).empty());
  std::vector<uint64_t> released;
  EXPECT_TRUE(q.Offer(1, NextTurn(3, a, 5), 1.2, &released));
  EXPECT_EQ(released, std::vector<uint64_t>{2});
  EXPECT_EQ(q.reserved(0), 0);
}

// An overflowed turn (reserves = false) gives up its conversation's room at home too, and keeps
// none where it went: the next turn goes home.
TEST(AdmissionQueue, AnOverflowedTurnGivesUpItsRoomAtHomeAndKeepsNone) {
  AdmissionQueue q = Queue("reserve:3", /*replicas=*/2);
  const AdmissionQueue::Request a = Turn(1, 60, /*conversation=*/77);
  EXPECT_TRUE(q.Offer(0, a, 0));
  EXPECT_FALSE(q.Offer(0, Req(2, 50), 0.1));
  EXPECT_TRUE(Finish(q, 1, 1).empty());
  AdmissionQueue::Request overflowed = NextTurn(3, a, 5);
  overflowed.reserves = false;
  std::vector<uint64_t> released;
  EXPECT_TRUE(q.Offer(1, overflowed, 1.2, &released));
  EXPECT_EQ(released, std::vector<uint64_t>{2});
  EXPECT_EQ(q.reserved(0), 0);
  EXPECT_EQ(q.admitted_on(3), 1);
  EXPECT_TRUE(Finish(q, 3, 2).empty());
  EXPECT_EQ(q.reserved(1), 0);
  EXPECT_EQ(q.admitted_on(3), -1);
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
  EXPECT_EQ(ParseAdmission("reserve:3", &o), "");
  EXPECT_TRUE(o.enabled);
  EXPECT_FALSE(o.most_recent_first);
  EXPECT_EQ(o.reserve_turns, 3);
  EXPECT_EQ(o.reserve_s, 1.0);
  EXPECT_EQ(ParseAdmission("reserve:2:2.5", &o), "");
  EXPECT_EQ(o.reserve_turns, 2);
  EXPECT_EQ(o.reserve_s, 2.5);
  for (const char* bad : {"reserve:0", "reserve:1", "reserve:", "reserve:2:", "reserve:2:0",
                          "reserve:2:-1", "reserve:2:x", "reserve:2:1:1", "reserve:2:1e9"})
    EXPECT_NE(ParseAdmission(bad, &o), "") << bad;
}

TEST(AdmissionQueue, AModeWrittenTwoWaysHasOneSpelling) {
  EXPECT_EQ(CanonicalAdmission("recent:04"), "recent:4");
  EXPECT_EQ(CanonicalAdmission("reserve:3:1"), "reserve:3");
  EXPECT_EQ(CanonicalAdmission("reserve:3:1.0"), "reserve:3");
  EXPECT_EQ(CanonicalAdmission("reserve:03:0.50"), "reserve:3:0.5");
  EXPECT_EQ(CanonicalAdmission("fifo"), "fifo");
  EXPECT_EQ(CanonicalAdmission("off"), "off");
  EXPECT_EQ(CanonicalAdmission("lifo"), "lifo");  // not valid: left as written, for its error
}

}  // namespace
}  // namespace warden
