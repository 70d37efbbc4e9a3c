#include "core/routing/session_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace warden {
namespace {

TEST(SessionTable, SavedConversationsComeBackWithTheirHomesActivityAndOrder) {
  SessionTable before(10, 60, 3);
  bool created;
  before.Touch("idle", 0, 0, &created);
  before.Touch("older", 1, 50, &created);
  before.SetContext(before.Touch("recent", 2, 90, &created), 12000);
  before.ExpireIdle(100);
  const std::vector<SessionTable::SavedConversation> saved = before.Save(100);
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_EQ(saved[0].key, "recent");
  EXPECT_DOUBLE_EQ(saved[0].idle_s, 10);
  EXPECT_EQ(saved[2].key, "idle");

  // A restarted gateway, whose clock starts again at 0, and whose table holds 2 replicas only.
  SessionTable after(10, 60, 2);
  std::vector<SessionTable::SavedConversation> moved = saved;
  moved[0].home = 1;  // what the gateway maps it to (replica 2 kept its place as replica 1)
  EXPECT_EQ(after.Restore(moved, 0), 3u);
  EXPECT_EQ(after.Find("recent")->home, 1);
  EXPECT_EQ(after.Find("recent")->context_tokens, 12000);
  EXPECT_TRUE(after.Find("recent")->active);
  EXPECT_FALSE(after.Find("idle")->active);  // idle 100 s > 60 s: back with its home, idle
  EXPECT_EQ(after.Find("idle")->home, 0);
  EXPECT_EQ(after.active_on(1), 2);  // older and recent
  EXPECT_EQ(after.active_context_on(1), 12000);
  EXPECT_EQ(after.active_on(0), 0);
  // It idles out on time: "older" was last seen 50 s before the save.
  after.ExpireIdle(11);
  EXPECT_FALSE(after.Find("older")->active);
  EXPECT_TRUE(after.Find("recent")->active);
  EXPECT_EQ(after.Save(11)[0].key, "recent");
}

TEST(SessionTable, RestoreSkipsKnownKeysAndHomesOutOfRangeAndKeepsTheBound) {
  const std::vector<SessionTable::SavedConversation> saved = {
      {"known", 1, 1, 5, 0, false},
      {"gone", 7, 7, 6, 0, false},
      {"newer", 1, 1, 7, 0, false},
      {"oldest", 1, 1, 8, 0, false},
  };
  SessionTable t(10, 60, 2);
  bool created;
  t.Touch("known", 0, 0, &created);
  EXPECT_EQ(t.Restore(saved, 10), 2u);
  EXPECT_EQ(t.Find("known")->home, 0);  // ours stays
  EXPECT_EQ(t.Find("gone"), nullptr);   // no replica 7 any more

  SessionTable small(2, 60, 2);
  EXPECT_EQ(small.Restore(saved, 10), 2u);  // "oldest" came in and went first: not kept
  EXPECT_EQ(small.size(), 2u);
  EXPECT_EQ(small.Find("oldest"), nullptr);
  EXPECT_NE(small.Find("known"), nullptr);
  EXPECT_NE(small.Find("newer"), nullptr);
}

// A keyless conversation's first-turn entry, handed over to the key of its later turns: no longer
// active, still homed (a later turn may come by it yet), and saved as idle.
TEST(SessionTable, ARetiredConversationKeepsItsHomeButIsNotActive) {
  SessionTable t(10, 600, 2);
  bool created = false;
  t.Touch("opening", 1, 0, &created);
  t.Touch("other", 0, 1, &created);
  ASSERT_EQ(t.active_on(1), 1);
  t.Retire("opening");
  t.Retire("unknown");  // nothing
  t.Retire("opening");  // once is enough
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.conversations(), 1u);  // "opening" lives on under another key
  EXPECT_EQ(t.active_on(1), 0);
  EXPECT_EQ(t.active(), 1u);
  ASSERT_NE(t.Find("opening"), nullptr);
  EXPECT_EQ(t.Find("opening")->home, 1);
  const std::vector<SessionTable::SavedConversation> saved = t.Save(2);
  SessionTable restored(10, 600, 2);
  EXPECT_EQ(restored.Restore(saved, 5), 2u);
  EXPECT_FALSE(restored.Find("opening")->active);
  EXPECT_TRUE(restored.Find("other")->active);
  EXPECT_EQ(restored.active_on(1), 0);
  t.Touch("opening", 0, 3, &created);  // a turn by it after all: active again, on its home
  EXPECT_FALSE(created);
  EXPECT_EQ(t.active_on(1), 1);

  SessionTable small(2, 600, 2);
  small.Touch("a", 0, 0, &created);
  small.Retire("a");
  small.Touch("b", 0, 1, &created);
  small.Touch("c", 0, 2, &created);  // evicts "a", the idle one
  EXPECT_EQ(small.Find("a"), nullptr);
  EXPECT_EQ(small.conversations(), 2u);
}

TEST(SessionTable, NewConversationIsActiveOnItsHome) {
  SessionTable t(10, 60, 3);
  bool created;
  SessionTable::Entry* e = t.Touch("a", 2, 0, &created);
  EXPECT_TRUE(created);
  EXPECT_EQ(e->home, 2);
  EXPECT_EQ(t.active_on(2), 1);
  t.Touch("a", 0, 5, &created);
  EXPECT_FALSE(created);
  EXPECT_EQ(t.Find("a")->home, 2);
}

TEST(SessionTable, IdleConversationsStopCountingButKeepTheirHome) {
  SessionTable t(10, 60, 2);
  bool created;
  t.Touch("a", 1, 0, &created);
  t.Touch("b", 1, 30, &created);
  t.ExpireIdle(61);
  EXPECT_EQ(t.active_on(1), 1);  // a idled out, b has not
  EXPECT_FALSE(t.Find("a")->active);
  EXPECT_EQ(t.Find("a")->home, 1);
  t.Touch("a", 0, 62, &created);
  EXPECT_FALSE(created);
  EXPECT_EQ(t.active_on(1), 2);
}

// The working set of the conversations going on now: those seen in a recent window, not every one
// still within the idle timeout (a finished session lingers there for ten minutes).
TEST(SessionTable, RecentContextCountsOnlyTheConversationsSeenInTheWindow) {
  SessionTable t(10, 600, 2);
  bool created;
  t.SetContext(t.Touch("old", 0, 0, &created), 5000);
  t.SetContext(t.Touch("a", 0, 100, &created), 1000);
  t.SetContext(t.Touch("b", 1, 110, &created), 2000);
  SessionTable::Entry* opening = t.Touch("opening", 1, 115, &created);
  t.SetContext(opening, 300);
  t.SetOpenedOnly(opening, true);  // a one-shot request, perhaps: no context counted
  std::vector<int64_t> context(2, 0);
  EXPECT_EQ(t.RecentContext(60, context), 3u);
  EXPECT_EQ(context, (std::vector<int64_t>{1000, 2000}));
  EXPECT_EQ(t.active_context_on(0), 6000);  // the idle timeout's count keeps "old"
  // A turn still running however long it waits (queued, held) keeps its conversation going on.
  t.Find("old")->turn_in_flight = true;
  context.assign(2, 0);
  EXPECT_EQ(t.RecentContext(60, context), 4u);
  EXPECT_EQ(context, (std::vector<int64_t>{6000, 2000}));
  t.Find("old")->turn_in_flight = false;
  t.Touch("old", 1, 120, &created);  // back: the most recent
  context.assign(2, 0);
  EXPECT_EQ(t.RecentContext(105, context), 3u);
  EXPECT_EQ(context, (std::vector<int64_t>{5000, 2000}));
}

TEST(SessionTable, TouchKnownRefreshesAKnownConversationAndCreatesNone) {
  SessionTable t(10, 60, 2);
  bool created;
  t.Touch("a", 1, 0, &created);
  t.Touch("b", 0, 30, &created);
  EXPECT_EQ(t.TouchKnown("c", 70), nullptr);
  EXPECT_EQ(t.Find("c"), nullptr);
  EXPECT_EQ(t.active_on(1), 1);  // nothing was expired for an unknown key
  // "a" idled out at 60: seen again, it is active on its home, "b" not yet idle.
  SessionTable::Entry* a = t.TouchKnown("a", 70);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->active);
  EXPECT_EQ(a->home, 1);
  EXPECT_EQ(a->last_seen, 70);
  EXPECT_EQ(t.active_on(1), 1);
  EXPECT_EQ(t.active_on(0), 1);
  t.ExpireIdle(95);  // "b" (seen at 30) idles out first: "a" went to the front
  EXPECT_FALSE(t.Find("b")->active);
  EXPECT_TRUE(t.Find("a")->active);
}

// A gateway that starts asks its peers for every home they know, idle ones too: a conversation
// that comes back after a pause keeps its replica whichever gateway it comes back to.
TEST(SessionTable, AllHomesHasTheIdleConversationsTooButNoUnhomedOnes) {
  SessionTable t(10, 60, 2);
  bool created;
  t.Touch("idle", 1, 0, &created);
  t.SetContext(t.Touch("active", 0, 50, &created), 900);
  t.Touch("unhomed", -1, 50, &created);
  t.ExpireIdle(70);
  ASSERT_FALSE(t.Find("idle")->active);
  ASSERT_EQ(t.ChangedSince(-std::numeric_limits<double>::infinity()).size(), 1u)
      << "what a running peer is sent: the active ones";
  std::vector<SessionTable::SharedHome> all = t.AllHomes();
  ASSERT_EQ(all.size(), 2u);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  EXPECT_EQ(all[0].key, "active");
  EXPECT_EQ(all[0].home, 0);
  EXPECT_EQ(all[0].context_tokens, 900);
  EXPECT_EQ(all[1].key, "idle");
  EXPECT_EQ(all[1].home, 1);
  EXPECT_DOUBLE_EQ(all[1].last_seen, 0);
}

// A turn served through a peer is the conversation's latest: the next one here is a follow-up
// (stayed or not), though this gateway never served the one before.
TEST(SessionTable, ALaterTurnAtAPeerIsTheLatestTurnHereToo) {
  SessionTable t(10, 60, 4);
  bool created;
  t.Touch("mine", 1, 0, &created)->last_replica = 1;
  t.Learn({"theirs", 2, 1, /*context_tokens=*/5000, /*last_seen=*/1}, 2);
  EXPECT_EQ(t.Find("theirs")->last_replica, 2);
  // The partition healed: the peer re-homed "mine" and served later turns on replica 3.
  t.Learn({"mine", 3, 5, 8000, 5}, 6);
  EXPECT_EQ(t.Find("mine")->home, 3);
  EXPECT_EQ(t.Find("mine")->last_replica, 3);
  // A home placed by a peer before any turn ended there says nothing of the latest turn.
  t.Learn({"fresh", 0, 6, 0, 6}, 7);
  EXPECT_EQ(t.Find("fresh")->last_replica, -1);
}

TEST(SessionTable, BoundedTableForgetsIdleConversationsFirst) {
  SessionTable t(2, 10, 1);
  bool created;
  t.Touch("old-idle", 0, 0, &created);
  t.Touch("recent", 0, 15, &created);
  t.Touch("new", 0, 16, &created);  // full: old-idle (idle since t=10) goes
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Find("old-idle"), nullptr);
  EXPECT_NE(t.Find("recent"), nullptr);
  EXPECT_EQ(t.active_on(0), 2);
}

TEST(SessionTable, BoundedTableForgetsTheLeastRecentlySeenWhenAllAreActive) {
  SessionTable t(2, 100, 1);
  bool created;
  t.Touch("a", 0, 0, &created);
  t.Touch("b", 0, 1, &created);
  t.Touch("a", 0, 2, &created);
  t.Touch("c", 0, 3, &created);
  EXPECT_EQ(t.Find("b"), nullptr);
  EXPECT_NE(t.Find("a"), nullptr);
  EXPECT_EQ(t.active_on(0), 2);
}

// A handed-over first-turn entry is no conversation of its own: forgetting it counts no
// conversation forgotten.
TEST(SessionTable, AHandedOverEntryForgottenIsNoConversationEvicted) {
  SessionTable t(3, 100, 1);
  bool created;
  t.Touch("opening", 0, 0, &created);
  t.Retire("opening");
  t.Touch("later", 0, 1, &created);
  t.Touch("other", 0, 2, &created);
  t.SetLimits(2, 100);  // the retired entry (idle) goes first
  EXPECT_EQ(t.Find("opening"), nullptr);
  EXPECT_EQ(t.evicted(), 0u);
  t.SetLimits(1, 100);
  EXPECT_EQ(t.evicted(), 1u);
  EXPECT_EQ(t.evicted_active(), 1u);
}

TEST(SessionTable, NewLimitsTakeEffectAtOnce) {
  SessionTable t(4, 100, 2);
  bool created;
  t.Touch("a", 0, 0, &created);
  t.Touch("b", 1, 10, &created);
  t.Touch("c", 0, 20, &created);
  t.SetLimits(2, 15);  // the least recently seen goes at once; the idle time counts from now
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Find("a"), nullptr);
  EXPECT_EQ(t.max_entries(), 2u);
  t.ExpireIdle(30);  // b was last seen 20 s ago
  EXPECT_FALSE(t.Find("b")->active);
  EXPECT_TRUE(t.Find("c")->active);
  EXPECT_EQ(t.active_on(0), 1);
  EXPECT_EQ(t.active_on(1), 0);
  t.Touch("d", 1, 31, &created);  // full: b, idle, goes
  EXPECT_EQ(t.Find("b"), nullptr);
  EXPECT_EQ(t.size(), 2u);
}

TEST(SessionTable, ActiveContextFollowsHomesAndIdleness) {
  SessionTable t(10, 60, 2);
  bool created;
  SessionTable::Entry* a = t.Touch("a", 0, 0, &created);
  t.SetContext(a, 12000);
  SessionTable::Entry* b = t.Touch("b", 0, 30, &created);
  t.SetContext(b, 8000);
  EXPECT_EQ(t.active_context_on(0), 20000);
  t.SetContext(a, 13000);  // the next turn grew the history
  EXPECT_EQ(t.active_context_on(0), 21000);
  t.SetHome(b, 1, 5);
  EXPECT_EQ(t.active_context_on(0), 13000);
  EXPECT_EQ(t.active_context_on(1), 8000);
  t.ExpireIdle(61);  // a idles out
  EXPECT_EQ(t.active_context_on(0), 0);
  t.Touch("a", 0, 62, &created);
  EXPECT_EQ(t.active_context_on(0), 13000);
}

TEST(SessionTable, SetHomeMovesTheActiveCount) {
  SessionTable t(10, 60, 2);
  bool created;
  SessionTable::Entry* e = t.Touch("a", 0, 0, &created);
  t.SetHome(e, 1, 5);
  EXPECT_EQ(t.active_on(0), 0);
  EXPECT_EQ(t.active_on(1), 1);
}

// Gateways sharing one set of replicas share their homes: a conversation a peer placed is
// active here (it loads its home) and keeps the peer's home.
TEST(SessionTable, LearnedConversationsKeepThePeersHomeAndCount) {
  SessionTable t(10, 60, 3);
  t.Learn({"a", 2, /*home_since=*/1, /*context_tokens=*/9000}, /*now=*/2);
  EXPECT_EQ(t.active_context_on(2), 9000);
  ASSERT_NE(t.Find("a"), nullptr);
  EXPECT_EQ(t.Find("a")->home, 2);
  EXPECT_EQ(t.active_on(2), 1);
  bool created;
  SessionTable::Entry* e = t.Touch("a", 0, 3, &created);  // its next turn arrives here
  EXPECT_FALSE(created);
  EXPECT_EQ(e->home, 2);
  t.ExpireIdle(70);  // peers stopped mentioning it, and it was not seen here either
  EXPECT_EQ(t.active_on(2), 0);
}

// A gateway restored from its state file hears its conversations back from its peers, their
// times a hair apart after the trip through Unix time: not counted as homes taken (found by
// review: "380 homes taken from it at start" after every restart, where nothing was new).
TEST(SessionTable, ASightingToldBackIsNotCountedAsTaken) {
  SessionTable here(10, 600, 2);
  bool created;
  here.Touch("a", 1, 100, &created);
  SessionTable restarted(10, 600, 2);
  ASSERT_EQ(restarted.Restore(here.Save(110), 130), 1u);  // 20 s down: seen at 120 on its clock
  std::vector<SessionTable::SharedHome> told = restarted.AllHomes();
  ASSERT_EQ(told.size(), 1u);
  told[0].last_seen += 0.001;
  EXPECT_EQ(restarted.Learn(told, 131), 0u);
  told[0].last_seen += 5;  // a turn at the peer
  EXPECT_EQ(restarted.Learn(told, 131), 1u);
}

// A peer's context of a turn that ended later is taken, smaller or not (a compacted conversation's
// shrinks; found by review: peers kept the larger for as long as the conversation went on), with
// where that turn ran and its prompt; an older one is not. A peer of an earlier version says no
// time: then the larger context is the later.
TEST(SessionTable, ThePeersContextOfALaterTurnEndIsTakenEvenWhenSmaller) {
  SessionTable t(10, 60, 3);
  const auto news = [](int64_t context, double ended, int ran_on, int64_t prompt) {
    return SessionTable::SharedHome{.key = "a",
                                    .home = 1,
                                    .home_since = 1,
                                    .context_tokens = context,
                                    .last_seen = ended,
                                    .context_at = ended,
                                    .last_end_replica = ran_on,
                                    .last_prompt_tokens = prompt,
                                    .last_replica = ran_on};
  };
  t.Learn(news(9000, 2, 1, 8800), 3);
  EXPECT_EQ(t.active_context_on(1), 9000);
  t.Learn(news(2000, 5, 2, 1900), 6);  // compacted, and overflowed to replica 2
  const SessionTable::Entry* e = t.Find("a");
  EXPECT_EQ(e->context_tokens, 2000);
  EXPECT_EQ(t.active_context_on(1), 2000);
  EXPECT_EQ(e->last_end_replica, 2);
  EXPECT_EQ(e->last_prompt_tokens, 1900);
  EXPECT_EQ(e->last_replica, 2);
  t.Learn(news(9000, 2, 1, 8800), 7);  // an old message, late
  EXPECT_EQ(e->context_tokens, 2000);
  EXPECT_EQ(e->last_replica, 2);
  t.Learn({"a", 1, 1, 1500}, 8);  // an earlier version's: no time, smaller
  EXPECT_EQ(e->context_tokens, 2000);
  t.Learn({"a", 1, 1, 12000}, 9);  // larger: a later turn, on its home as far as it says
  EXPECT_EQ(e->context_tokens, 12000);
  EXPECT_EQ(e->last_replica, 1);
  // Untimed, it is passed on untimed (not as the earlier turn's).
  std::vector<SessionTable::SharedHome> sent = t.AllHomes();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_FALSE(std::isfinite(sent[0].context_at));
  EXPECT_EQ(sent[0].last_end_replica, -1);
  // What this table sends its peers of a timed turn says the same as it was told.
  t.Learn(news(3000, 10, 2, 2900), 11);
  sent = t.AllHomes();
  EXPECT_EQ(sent[0].context_tokens, 3000);
  EXPECT_EQ(sent[0].context_at, 10);
  EXPECT_EQ(sent[0].last_end_replica, 2);
  EXPECT_EQ(sent[0].last_prompt_tokens, 2900);
  EXPECT_EQ(e->last_replica, 2);
  // A replica out of range is not taken.
  t.Learn(news(100, 20, 7, 50), 21);
  EXPECT_EQ(e->last_end_replica, -1);
  EXPECT_EQ(e->last_replica, 2);
}

// A key left (its conversation went on under its other key) counts again when a turn comes under
// it, here or at a peer: never active without counting among the conversations known.
TEST(SessionTable, ALeftKeyCountsAgainWhenATurnComesUnderIt) {
  SessionTable t(10, 60, 2);
  bool created;
  t.Touch("k", 0, 1, &created);
  t.Leave("k");
  EXPECT_EQ(t.conversations(), 0u);
  EXPECT_EQ(t.active(), 0u);
  t.Learn({.key = "k", .home = 0, .home_since = 1, .last_seen = 2}, 3);
  EXPECT_EQ(t.conversations(), 1u);
  EXPECT_EQ(t.active(), 1u);
  t.Leave("k");
  t.Touch("k", 0, 4, &created);
  EXPECT_EQ(t.conversations(), 1u);
  EXPECT_EQ(t.active(), 1u);
}

// Two gateways that disagree converge: the later assignment wins on both, ties to the lower index.
TEST(SessionTable, TheLaterHomeWinsEverywhere) {
  SessionTable t(10, 60, 3);
  bool created;
  SessionTable::Entry* e = t.Touch("a", 0, 10, &created);  // placed here on 0 at t = 10
  t.Learn({"a", 1, 9}, 11);                                // a peer placed it on 1, earlier
  EXPECT_EQ(e->home, 0);
  t.Learn({"a", 2, 12}, 13);  // a peer re-homed it later (0 was unhealthy there)
  EXPECT_EQ(e->home, 2);
  EXPECT_EQ(t.active_on(0), 0);
  EXPECT_EQ(t.active_on(2), 1);
  t.Learn({"a", 1, 12}, 14);  // the same instant: the lower index
  EXPECT_EQ(e->home, 1);
  t.SetHome(e, 0, 20);  // re-homed here
  t.Learn({"a", 1, 12}, 21);
  EXPECT_EQ(e->home, 0);
}

// Only what this gateway routed is sent on: learned homes are not echoed back to the peers.
// What the peers are sent: homes this gateway routed a turn of, and homes it learned that were
// news to it (for a peer that restarted, or a third one), not a home learned again unchanged
// (which would go back and forth between two peers for ever).
TEST(SessionTable, ChangedSinceListsTheNewsForPeers) {
  SessionTable t(10, 60, 3);
  bool created;
  t.Touch("old", 0, 1, &created);
  t.Touch("mine", 1, 5, &created);
  t.Learn({"theirs", 2, 5}, 6);
  t.Touch("balanced", -1, 7, &created);  // routed by load alone: no home to share
  std::vector<SessionTable::SharedHome> changed = t.ChangedSince(2);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0].key, "theirs");
  EXPECT_EQ(changed[1].key, "mine");
  EXPECT_EQ(changed[1].home, 1);
  EXPECT_EQ(changed[1].home_since, 5);
  t.Learn({"theirs", 2, 5}, 7.5);  // the same again: no news
  EXPECT_TRUE(t.ChangedSince(7).empty());
  t.Learn({"theirs", 2, 5, 900}, 7.6);  // a larger context: news
  ASSERT_EQ(t.ChangedSince(7.5).size(), 1u);
  EXPECT_EQ(t.ChangedSince(7.5)[0].context_tokens, 900);
  t.Learn({"theirs", 2, 5, 600}, 7.7);  // an older turn's (messages crossed): no news
  EXPECT_TRUE(t.ChangedSince(7.65).empty());
  EXPECT_EQ(t.Find("theirs")->context_tokens, 900);
  t.Touch("theirs", 0, 8, &created);  // then it had a turn here
  EXPECT_EQ(t.ChangedSince(7.9).size(), 1u);
  EXPECT_EQ(t.ChangedSince(7.9)[0].key, "theirs");
  EXPECT_EQ(t.ChangedSince(7.9)[0].home, 2);
  // A peer that restarted gets every active homed conversation.
  EXPECT_EQ(t.ChangedSince(-std::numeric_limits<double>::infinity()).size(), 3u);
}

// A message counts the homes that told the table something (warden_peer_homes_received_total):
// a home it already has as sent is not counted again.
TEST(SessionTable, AMessageCountsOnlyTheHomesThatToldItSomething) {
  SessionTable t(10, 60, 3);
  const std::vector<SessionTable::SharedHome> first = {{"a", 0, 1, 0, 2}, {"b", 1, 1, 0, 2}};
  EXPECT_EQ(t.Learn(first, 3, /*from=*/0), 2u);  // two new conversations
  EXPECT_EQ(t.Learn(first, 4, 0), 0u);           // the same again
  const std::vector<SessionTable::SharedHome> second = {
      {"a", 0, 1, 900, 2},  // a longer context
      {"b", 1, 1, 0, 3},    // seen later
      {"c", 2, 3, 0, 3},    // new
      {"a", 2, 0.5, 0, 2},  // an older placement elsewhere: nothing
  };
  EXPECT_EQ(t.Learn(second, 5, 0), 3u);
  EXPECT_EQ(t.Find("a")->home, 0);
}

// Conversations restored from a state file are news for the peers too (they may have restarted
// as well), however long ago they were last seen.
TEST(SessionTable, RestoredConversationsGoToPeersThatRestarted) {
  SessionTable t(10, 60, 3);
  const SessionTable::SavedConversation saved[] = {{"a", 1, 1, 5}, {"b", 2, 2, 30}};
  ASSERT_EQ(t.Restore(saved, 0), 2u);
  const auto all = t.ChangedSince(-std::numeric_limits<double>::infinity());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].key, "a");
  EXPECT_EQ(all[1].key, "b");
}

// A peer that missed many homes gets them in slices, earliest first, each picking up where the
// last one ended; homes routed at the same moment stay together.
TEST(SessionTable, ChangedSinceComesInSlicesEarliestFirst) {
  SessionTable t(10, 60, 3);
  bool created;
  t.Touch("a", 0, 1, &created);
  t.Touch("b", 1, 2, &created);
  t.Touch("c", 2, 2, &created);
  t.Touch("d", 0, 3, &created);
  t.Touch("e", 1, 4, &created);
  double through;
  std::vector<SessionTable::SharedHome> slice = t.ChangedSince(0, 2, &through);
  ASSERT_EQ(slice.size(), 3u);  // b and c were routed at the same moment
  EXPECT_EQ(slice[0].key, "a");
  EXPECT_EQ(through, 2);
  slice = t.ChangedSince(through, 2, &through);
  ASSERT_EQ(slice.size(), 2u);
  EXPECT_EQ(slice[0].key, "e");  // the rest: all of it, most recent first
  EXPECT_EQ(slice[1].key, "d");
  EXPECT_EQ(through, std::numeric_limits<double>::infinity());
}

// A gateway that restarted (or had not heard of the conversation yet) places a turn afresh; the
// home its history is cached on wins on both sides, however much later the fresh one is.
TEST(SessionTable, AHomeWithHistoryBeatsAFreshPlacement) {
  SessionTable survivor(10, 60, 4), restarted(10, 60, 4);
  bool created;
  survivor.SetContext(survivor.Touch("c", 3, 1, &created), 9000);  // turns done on replica 3
  restarted.Touch("c", 0, 20, &created);  // a turn reaches the new process: placed on 0
  survivor.Learn({"c", 0, 20, 0}, 20.1);  // its fresh home, nothing finished there yet
  EXPECT_EQ(survivor.Find("c")->home, 3);
  restarted.Learn({"c", 3, 1, 9000}, 20.2);  // the survivor's full resend
  EXPECT_EQ(restarted.Find("c")->home, 3);
  EXPECT_EQ(restarted.active_on(3), 1);
  EXPECT_EQ(restarted.active_on(0), 0);
}

// A conversation this gateway routed by load alone has no home: a peer's home is taken.
TEST(SessionTable, APeersHomeFillsAConversationWithNone) {
  SessionTable t(10, 60, 3);
  bool created;
  t.Touch("a", -1, 10, &created);
  t.Learn({"a", 1, 5}, 11);
  EXPECT_EQ(t.Find("a")->home, 1);
  EXPECT_EQ(t.active_on(1), 1);
}

// A peer's message applied with an older clock reading than a turn routed here keeps the order:
// most recently seen first, for ChangedSince and the idle expiry.
TEST(SessionTable, LearningWithAnOlderClockKeepsTheOrder) {
  SessionTable t(10, 60, 3);
  bool created;
  t.Touch("mine", 0, 5.001, &created);
  t.Learn({"theirs", 1, 4}, 5.000);
  ASSERT_EQ(t.ChangedSince(4.9).size(), 2u);
  EXPECT_EQ(t.ChangedSince(4.9)[0].key, "mine");
  EXPECT_EQ(t.ChangedSince(4.9)[1].key, "theirs");
  t.ExpireIdle(65.0005);  // past "theirs"'s 60 s, not "mine"'s
  EXPECT_EQ(t.active(), 1u);
  EXPECT_TRUE(t.Find("mine")->active);
}

// A home learned from a peer keeps the age the peer gives it: it goes idle when the peer's last
// sighting is idle_timeout old, not a whole timeout after it was learned (a restarted gateway
// that learns every home from its peers does not keep idle conversations active).
TEST(SessionTable, ALearnedHomeKeepsItsAge) {
  SessionTable t(10, 60, 3);
  t.Learn({"recent", 1, 40, 500, /*last_seen=*/45}, 50);
  t.Learn({"older", 2, 10, 700, /*last_seen=*/20}, 50);
  t.Learn({"long idle", 0, 0, 900, /*last_seen=*/-30}, 50);  // idle for 80 s: known, not active
  ASSERT_NE(t.Find("long idle"), nullptr);
  EXPECT_EQ(t.Find("long idle")->home, 0);
  EXPECT_FALSE(t.Find("long idle")->active);
  EXPECT_EQ(t.active_on(0), 0);
  EXPECT_EQ(t.active(), 2u);
  EXPECT_EQ(t.Find("older")->last_seen, 20);
  t.ExpireIdle(81);  // "older" was seen 61 s ago
  EXPECT_FALSE(t.Find("older")->active);
  EXPECT_TRUE(t.Find("recent")->active);
  EXPECT_EQ(t.active_context_on(1), 500);
  EXPECT_EQ(t.active_context_on(2), 0);
}

// A peer's sighting older than this gateway's own changes neither its time nor its place.
TEST(SessionTable, AnOlderSightingFromAPeerRefreshesNothing) {
  SessionTable t(10, 60, 3);
  bool created;
  t.Touch("a", 0, 50, &created);
  t.Touch("b", 1, 51, &created);
  t.Learn({"a", 0, 50, 0, /*last_seen=*/20}, 55);
  EXPECT_EQ(t.Find("a")->last_seen, 50);
  t.ExpireIdle(110.5);  // "a" went idle at 110 whatever the peer said
  EXPECT_FALSE(t.Find("a")->active);
  EXPECT_TRUE(t.Find("b")->active);
  // A later sighting does count, and moves it back among the active ones.
  t.Learn({"a", 0, 50, 0, /*last_seen=*/110.7}, 111);
  EXPECT_TRUE(t.Find("a")->active);
  EXPECT_EQ(t.Find("a")->last_seen, 110.7);
  ASSERT_EQ(t.ChangedSince(0).size(), 2u);
  EXPECT_EQ(t.ChangedSince(0)[0].key, "a");
}

// Sightings learned in any order (a restarted gateway gets a peer's whole list, most recent
// first, or in pages earliest first) keep the active list in order: each idles at its own time.
TEST(SessionTable, SightingsLearnedInAnyOrderIdleEachInTurn) {
  SessionTable t(100, 60, 2);
  const std::vector<double> seen = {30, 10, 50, 20, 40, 5, 45, 25};
  for (double s : seen) t.Learn({"k" + std::to_string(int(s)), 0, 0, 0, s}, 55);
  for (double at = 60; at <= 115; at += 5) {
    t.ExpireIdle(at + 0.5);
    size_t expected = 0;
    for (double s : seen) expected += s >= at + 0.5 - 60;
    EXPECT_EQ(t.active(), expected) << at;
  }
}

// The same with many sightings in a shuffled order, some at equal times.
TEST(SessionTable, ManyShuffledSightingsKeepTheActiveListInOrder) {
  SessionTable t(1000, 60, 2);
  std::vector<double> seen;
  for (int i = 0; i < 300; ++i) seen.push_back((i * 7919) % 50);  // 0..49, each six times
  for (size_t i = 0; i < seen.size(); ++i)
    t.Learn({"k" + std::to_string(i), int(i % 2), 0, 0, seen[i]}, 55);
  for (int at = 60; at <= 110; ++at) {
    t.ExpireIdle(at + 0.5);
    size_t expected = 0;
    for (double s : seen) expected += s >= at + 0.5 - 60;
    ASSERT_EQ(t.active(), expected) << at;
    ASSERT_EQ(size_t(t.active_on(0) + t.active_on(1)), expected) << at;
  }
}

// A peer's backlog after a split, interleaved in time with this gateway's own conversations and
// learned in slices earliest first (some homes twice, the second time seen later), keeps the active
// list in recency order: each conversation idles at its own time, and ChangedSince stops right.
TEST(SessionTable, ABacklogLearnedInSlicesKeepsTheActiveListInOrder) {
  SessionTable t(1000, 60, 2);
  std::vector<double> seen;  // the last sighting of each conversation
  bool created;
  for (int i = 0; i < 100; ++i) {
    t.Touch("own" + std::to_string(i), i % 2, i, &created);
    seen.push_back(i);
  }
  std::vector<SessionTable::SharedHome> backlog;
  for (int i = 0; i < 100; ++i) {
    backlog.push_back({"peer" + std::to_string(i), i % 2, i + 0.5, 0, i + 0.5});
    if (i % 10 == 9)  // seen again later: the later sighting counts
      backlog.push_back({"peer" + std::to_string(i - 5), 0, 0, 0, i + 0.25});
  }
  for (int i = 0; i < 100; ++i) seen.push_back(i % 10 == 4 ? i + 5.25 : i + 0.5);
  for (size_t at = 0; at < backlog.size(); at += 7)
    t.Learn(std::span(backlog).subspan(at, std::min<size_t>(7, backlog.size() - at)), 100);
  ASSERT_EQ(t.size(), 200u);
  const std::vector<SessionTable::SharedHome> changed = t.ChangedSince(40);
  for (size_t i = 1; i < changed.size(); ++i)
    ASSERT_GE(changed[i - 1].last_seen, changed[i].last_seen) << i;
  for (double at = 100; at <= 160; at += 0.5) {
    t.ExpireIdle(at);
    size_t expected = 0;
    for (double s : seen) expected += s >= at - 60;
    ASSERT_EQ(t.active(), expected) << at;
  }
}

// News a peer sent is not news for that peer, but is for the others; a turn routed here later
// is news for every peer again.
TEST(SessionTable, APeersNewsIsNotSentBackToIt) {
  SessionTable t(10, 60, 2);
  const std::vector<SessionTable::SharedHome> from_p = {{"a", 1, 5, 700, 5}};
  t.Learn(from_p, 6, /*from=*/0);
  double through;
  EXPECT_TRUE(t.ChangedSince(0, 10, &through, /*to=*/0).empty());
  ASSERT_EQ(t.ChangedSince(0, 10, &through, /*to=*/1).size(), 1u);
  bool created;
  t.Touch("a", 0, 7, &created);
  ASSERT_EQ(t.ChangedSince(0, 10, &through, /*to=*/0).size(), 1u);
}

// What a peer sent is withheld from it only while the entry is just that: merged with news of
// another peer's, or with this gateway's own turn, it is news for the peer too.
TEST(SessionTable, AMixOfAPeersNewsAndOthersIsSentBackToIt) {
  const auto learn = [](SessionTable& t, SessionTable::SharedHome h, double now, int from) {
    t.Learn(std::span(&h, 1), now, from);
  };
  double through;
  // Three gateways: C placed k on 2; A moved it to 1 and saw a turn end (200 tokens); then C's
  // later turn on 2 ended with 300. The home stays A's (the later of two known ones), the context
  // is C's: C must hear of the home, A of the context.
  SessionTable b(10, 60, 4);
  constexpr int kA = 0, kC = 1;
  learn(b, {"k", 2, 1, 0, 1}, 1.5, kC);
  learn(b, {"k", 1, 5, 200, 5}, 5.1, kA);
  learn(b, {"k", 2, 1, 300, 5.5}, 6, kC);
  ASSERT_EQ(b.Find("k")->home, 1);
  ASSERT_EQ(b.Find("k")->context_tokens, 300);
  ASSERT_EQ(b.ChangedSince(5, 10, &through, kC).size(), 1u);
  EXPECT_EQ(b.ChangedSince(5, 10, &through, kC)[0].home, 1);
  EXPECT_EQ(b.ChangedSince(5, 10, &through, kA).size(), 1u);

  // A turn here moved k (its home was unhealthy), then A's message with a larger context came
  // before this gateway's next message: A must still hear of the move.
  SessionTable t(10, 60, 4);
  learn(t, {"k", 1, 1, 100, 1}, 2, kA);
  bool created;
  t.SetHome(t.Touch("k", 1, 10, &created), 2, 10);
  learn(t, {"k", 1, 1, 500, 5}, 11, kA);
  const std::vector<SessionTable::SharedHome> to_a = t.ChangedSince(5, 10, &through, kA);
  ASSERT_EQ(to_a.size(), 1u);
  EXPECT_EQ(to_a[0].home, 2);
  EXPECT_EQ(to_a[0].context_tokens, 500);
}

// A message with more new conversations than the table holds keeps the most recently seen, the
// learned ones and the table's own alike.
TEST(SessionTable, AMessageLargerThanTheTableKeepsTheMostRecentlySeen) {
  SessionTable t(3, 60, 2);
  bool created;
  t.Touch("own", 0, 25, &created);
  const std::vector<SessionTable::SharedHome> homes = {
      {"a", 1, 50, 0, 50}, {"b", 1, 40, 0, 40}, {"c", 1, 30, 0, 30}, {"d", 1, 20, 0, 20}};
  EXPECT_EQ(t.Learn(homes, 60), 4u);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_NE(t.Find("a"), nullptr);
  EXPECT_NE(t.Find("b"), nullptr);
  EXPECT_NE(t.Find("c"), nullptr);
  EXPECT_EQ(t.Find("own"), nullptr);
  EXPECT_EQ(t.active_on(0), 0);
  EXPECT_EQ(t.active_on(1), 3);
}

}  // namespace
}  // namespace warden
