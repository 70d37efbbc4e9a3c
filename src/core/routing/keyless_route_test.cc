#include "core/routing/keyless_route.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

// A request keyed by its opening and two replies: "o:r1:r2", shorter "o:r1", then "o".
SessionKey TwoReplies() {
  SessionKey key;
  key.key = "o:r1:r2";
  key.source = KeySource::kOpening;
  key.opening_key = "o";
  key.shorter_keys = {"o:r1", "o"};
  return key;
}

TEST(RouteKeyless, AnUnknownConversationOpensUnderItsWholeKey) {
  SessionTable sessions(100, 60, 2);
  const KeylessRoute route = RouteKeyless(sessions, TwoReplies());
  EXPECT_EQ(route.key, "o:r1:r2");
  EXPECT_TRUE(route.opens);
  SessionKey full = TwoReplies();
  full.replies_full = true;  // its key grows no further: nothing to name it by
  EXPECT_FALSE(RouteKeyless(sessions, full).opens);
}

TEST(RouteKeyless, AKnownWholeKeyIsItsConversation) {
  SessionTable sessions(100, 60, 2);
  bool created;
  sessions.Touch("o:r1:r2", 1, 0, &created);
  sessions.Touch("o:r1", 0, 0, &created);
  const KeylessRoute route = RouteKeyless(sessions, TwoReplies());
  EXPECT_EQ(route.key, "o:r1:r2");
  EXPECT_FALSE(route.opens);
}

TEST(RouteKeyless, ElseTheLongestKnownShorterKey) {
  SessionTable sessions(100, 60, 2);
  bool created;
  sessions.Touch("o", 0, 0, &created);
  EXPECT_EQ(RouteKeyless(sessions, TwoReplies()).key, "o");
  sessions.Touch("o:r1", 1, 0, &created);
  const KeylessRoute route = RouteKeyless(sessions, TwoReplies());
  EXPECT_EQ(route.key, "o:r1");
  EXPECT_FALSE(route.opens);
  // Handed over or not: the conversation changed a reply, or the gateway missed one.
  sessions.Retire("o:r1");
  EXPECT_EQ(RouteKeyless(sessions, TwoReplies()).key, "o:r1");
  EXPECT_FALSE(RouteKeyless(sessions, TwoReplies()).opens);
}

// Conversations that open with the same canned exchange: once the first went on under a longer
// key, the next with the same whole key is another conversation.
TEST(RouteKeyless, AWholeKeyHandedOverOpensAnotherConversation) {
  SessionTable sessions(100, 60, 2);
  bool created;
  sessions.Touch("o:r1:r2", 1, 0, &created);
  sessions.Retire("o:r1:r2");
  EXPECT_TRUE(sessions.Find("o:r1:r2")->handed_over);
  const KeylessRoute route = RouteKeyless(sessions, TwoReplies());
  EXPECT_EQ(route.key, "o:r1:r2");
  EXPECT_TRUE(route.opens);
}

// Two sessions that open alike at once: while the first one's opening request runs, the second is
// another conversation (a client waits for its reply before its next turn).
TEST(RouteKeyless, AWholeKeyWhoseOpeningStillRunsOpensAnotherConversation) {
  SessionTable sessions(100, 60, 2);
  bool created;
  SessionTable::Entry* entry = sessions.Touch("o:r1:r2", 1, 0, &created);
  entry->opening_in_flight = true;
  EXPECT_TRUE(RouteKeyless(sessions, TwoReplies()).opens);
  entry->opening_in_flight = false;
  EXPECT_FALSE(RouteKeyless(sessions, TwoReplies()).opens);
}

// What stands for the conversation on a hashing policy's ring and in admission's reservations:
// the key it opened under, on every turn.
TEST(RouteKeyless, AConversationStandsForTheKeyItOpenedUnder) {
  SessionKey key;
  key.source = KeySource::kOpening;
  key.opening_key = "opening:0123456789abcdef";
  const std::string canned = ContinuedOpeningKey(key.opening_key, 7);
  key.key = canned;
  key.shorter_keys = {key.opening_key};
  SessionTable sessions(100, 60, 2);
  EXPECT_EQ(RouteKeyless(sessions, key).stands_for, canned);  // it opens under its whole key
  bool created;
  sessions.Touch(canned, 0, 0, &created);
  sessions.Retire(canned);
  const std::string named = ContinuedOpeningKey(canned, 99);  // its first reply named it
  sessions.Touch(named, 0, 0, &created);
  SessionKey later = key;
  later.key = ContinuedOpeningKey(named, 5);
  later.shorter_keys = {named, canned, key.opening_key};
  const KeylessRoute route = RouteKeyless(sessions, later);
  EXPECT_EQ(route.key, named);
  EXPECT_EQ(route.stands_for, canned);
}

}  // namespace
}  // namespace warden
