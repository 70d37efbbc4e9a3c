#include "gateway/change_log.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(ChangeLog, GivesTheChangesSinceATimeOldestFirst) {
  ChangeLog log;
  log.Note(100, "affinity off", "admin API");
  log.Note(200, "replica 2 draining", "a peer");
  log.Note(300, "affinity on", "SIGHUP");
  EXPECT_EQ(log.Since(200), (std::vector<ChangeLog::Change>{{200, "replica 2 draining", "a peer"},
                                                            {300, "affinity on", "SIGHUP"}}));
  EXPECT_TRUE(log.Since(301).empty());
}

// A peer's change is noted when its message comes, after later ones of this gateway's (found by
// review: a gateway's restart listed before a peer's drain made before it).
TEST(ChangeLog, AChangeNotedLateTakesItsPlaceInTime) {
  ChangeLog log;
  log.Note(500, "gateway restarted", "state file");
  log.Note(400, "replica 1 draining", "a peer");
  log.Restore({{100, "affinity off", "admin API"}, {450, "affinity on", "admin API"}});
  const std::vector<ChangeLog::Change> all = log.Since(0);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].unix, 100);
  EXPECT_EQ(all[1].unix, 400);
  EXPECT_EQ(all[2].unix, 450);
  EXPECT_EQ(all[3].unix, 500);
}

TEST(ChangeLog, KeepsTheMostRecentOnesOnly) {
  ChangeLog log(2);
  log.Note(1, "a", "x");
  log.Note(2, "b", "x");
  log.Note(3, "c", "x");
  const std::vector<ChangeLog::Change> kept = log.Since(0);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].what, "b");
  EXPECT_EQ(kept[1].what, "c");
}

TEST(ChangeLog, NothingToSayIsNotNoted) {
  ChangeLog log;
  log.Note(1, "", "SIGHUP");  // a reload that changed nothing of this model
  EXPECT_TRUE(log.Since(0).empty());
}

TEST(ChangeLog, ChangesKeptAcrossARestartComeBeforeTheNewOnes) {
  ChangeLog log(3);
  log.Note(500, "gateway restarted", "state file");
  log.Restore({{100, "affinity off", "admin API"},
               {200, "replica 1 down: connection refused", "a request"},
               {300, "replica 1 healthy again", "health checks"}});
  const std::vector<ChangeLog::Change> kept = log.Since(0);
  ASSERT_EQ(kept.size(), 3u);  // the oldest kept one is the first to go
  EXPECT_EQ(kept[0].what, "replica 1 down: connection refused");
  EXPECT_EQ(kept[2].what, "gateway restarted");
  EXPECT_EQ(log.noted(), 1u);  // what was restored was not noted here
}

}  // namespace
}  // namespace warden
