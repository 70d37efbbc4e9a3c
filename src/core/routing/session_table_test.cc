#include "core/routing/session_table.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

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
  t.SetHome(b, 1);
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
  t.SetHome(e, 1);
  EXPECT_EQ(t.active_on(0), 0);
  EXPECT_EQ(t.active_on(1), 1);
}

}  // namespace
}  // namespace warden
