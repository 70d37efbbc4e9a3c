#include "gateway/client_table.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

HttpRequest WithHeader(std::string_view name, std::string_view value) {
  HttpRequest request{http::verb::post, "/v1/messages", 11};
  request.set(name, value);
  return request;
}

TEST(ClientTable, FindsTheClientByEitherHeader) {
  const ClientTable table({{"alice", "sk-a"}, {"", "sk-b", 2}}, nullptr);
  ASSERT_FALSE(table.empty());
  const ClientTable::Client* alice = table.Find(WithHeader("x-api-key", "sk-a"));
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->name, "alice");
  const ClientTable::Client* second = table.Find(WithHeader("Authorization", "Bearer sk-b"));
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->name, "key-2");
  EXPECT_EQ(second->max_in_flight, 2);
  EXPECT_EQ(table.Find(WithHeader("x-api-key", "sk-c")), nullptr);
  EXPECT_EQ(table.Find(WithHeader("Authorization", "Basic sk-a")), nullptr);
  EXPECT_TRUE(ClientTable({}, nullptr).empty());
}

TEST(ClientTable, AClientWhoseNameStaysKeepsItsCountersAcrossTables) {
  const ClientTable first({{"alice", "sk-a1"}, {"bob", "sk-b"}}, nullptr);
  first.clients()[0].counts->requests = 5;
  first.clients()[1].counts->requests = 7;
  const ClientTable second({{"carol", "sk-c"}, {"alice", "sk-a2"}}, &first);
  EXPECT_EQ(second.clients()[0].counts->requests.load(), 0);
  EXPECT_EQ(second.clients()[1].counts, first.clients()[0].counts);
  EXPECT_EQ(second.Find(WithHeader("x-api-key", "sk-a1")), nullptr);
  EXPECT_EQ(second.Find(WithHeader("x-api-key", "sk-a2"))->counts->requests.load(), 5);
}

// A key without a name is known by its key: taking back the first of two unnamed keys leaves the
// second with its own counters, though its name (key-N, its place) changes.
TEST(ClientTable, AnUnnamedKeyKeepsItsOwnCountersWhenItsPlaceChanges) {
  const ClientTable first({{"", "sk-1"}, {"", "sk-2"}}, nullptr);
  first.clients()[0].counts->requests = 3;
  first.clients()[1].counts->requests = 9;
  const ClientTable second({{"", "sk-2"}, {"ops", "sk-1"}}, &first);
  EXPECT_EQ(second.clients()[0].name, "key-1");
  EXPECT_EQ(second.clients()[0].counts->requests.load(), 9);
  EXPECT_EQ(second.clients()[1].counts->requests.load(), 0);  // named now: another client
}

TEST(ClientTable, TakeSlotStopsAtMaxInFlightAndCountsWhatItRefuses) {
  const ClientTable table({{"ci", "sk-ci", 2}, {"dev", "sk-dev", 0}}, nullptr);
  const ClientTable::Client& ci = table.clients()[0];
  EXPECT_TRUE(ClientTable::TakeSlot(ci));
  EXPECT_TRUE(ClientTable::TakeSlot(ci));
  EXPECT_FALSE(ClientTable::TakeSlot(ci));
  EXPECT_EQ(ci.counts->in_flight.load(), 2);
  EXPECT_EQ(ci.counts->limited.load(), 1);
  const ClientTable::Client& dev = table.clients()[1];
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(ClientTable::TakeSlot(dev));
  EXPECT_EQ(dev.counts->limited.load(), 0);
}

// A key's tokens_per_minute: requests go while tokens are left; a request holds its prompt's size
// while it runs and its engine work (prompt tokens not read from the cache, all of them when that
// is unknown, and output tokens) is taken in place of that; a key without one is never refused; a
// reload keeps what was used.
TEST(ClientTable, ABudgetRefusesOnceItsTokensAreUsedAndAReloadKeepsWhatWasUsed) {
  EXPECT_EQ(ClientTable::EngineWork(1000, 900, 50), 150);
  EXPECT_EQ(ClientTable::EngineWork(300, -1, 200), 500);  // cached unknown: all computed
  EXPECT_EQ(ClientTable::EngineWork(-1, -1, -1), 0);
  EXPECT_EQ(ClientTable::EngineWork(100, 400, 0), 0);  // (an implausible split: none computed)

  // A hold is the share of the prompt the client's answers have computed so far.
  ClientTable::Counts counts;
  EXPECT_DOUBLE_EQ(ClientTable::PromptHold(counts, 20000), 20000);  // nothing known: all of it
  counts.cached_tokens = 90000;
  counts.computed_tokens = 10000;
  EXPECT_DOUBLE_EQ(ClientTable::PromptHold(counts, 20000), 2000);  // a Claude Code key, cached
  counts.computed_tokens = 0;
  EXPECT_DOUBLE_EQ(ClientTable::PromptHold(counts, 20000), 1000);  // 5 % at least

  const ClientTable table(
      {{.name = "ci", .key = "sk-ci", .tokens_per_minute = 600}, {.name = "dev", .key = "sk-dev"}},
      nullptr, 0);
  const ClientTable::Client& ci = table.clients()[0];
  double wait = 0;
  {
    ASSERT_TRUE(ClientTable::WithinBudget(ci, 0, &wait));
    ClientSlot first(ci.counts.get());
    first.Hold(500, 0);  // its prompt's size, while it runs
    // Sent beside it: goes (tokens are left), and holds its own.
    ASSERT_TRUE(ClientTable::WithinBudget(ci, 0, &wait));
    ClientSlot second(ci.counts.get());
    second.Hold(500, 0);
    EXPECT_DOUBLE_EQ(ci.counts->budget.Left(0), -400);
    EXPECT_FALSE(ClientTable::WithinBudget(ci, 0, &wait));  // a third waits
    EXPECT_EQ(ci.counts->budget_limited.load(), 1);
    first.Settle(150, 0);  // mostly read from the cache: most of its hold given back
    EXPECT_DOUBLE_EQ(ci.counts->budget.Left(0), -50);
    second.Settle(500, 0);
    second.Settle(500, 0);  // once only
    EXPECT_DOUBLE_EQ(ci.counts->budget.Left(0), -50);
    ClientSlot never_ran(ci.counts.get());
    never_ran.Hold(300, 0);
  }  // ... given back whole when it ends unsettled
  EXPECT_DOUBLE_EQ(ci.counts->budget.Left(0), -50);

  EXPECT_FALSE(ClientTable::WithinBudget(ci, 0, &wait));
  EXPECT_NEAR(wait, 5.1, 1e-9);  // 51 tokens at 10 a second
  EXPECT_TRUE(ClientTable::WithinBudget(ci, 5.2, &wait));

  const ClientTable::Client& dev = table.clients()[1];
  {
    ClientSlot slot(dev.counts.get());
    slot.Settle(2'000'000, 0);
  }
  EXPECT_TRUE(ClientTable::WithinBudget(dev, 0, &wait));
  EXPECT_EQ(dev.counts->budget_limited.load(), 0);

  {
    ClientSlot slot(ci.counts.get());
    slot.Settle(1000, 5.2);
  }
  const ClientTable reloaded({{.name = "ci", .key = "sk-ci2", .tokens_per_minute = 1200}}, &table,
                             5.2);
  EXPECT_EQ(reloaded.clients()[0].counts, ci.counts);
  EXPECT_NEAR(ci.counts->budget.Left(5.2), -998, 1e-9);  // still owed, paid back faster
  EXPECT_FALSE(ClientTable::WithinBudget(reloaded.clients()[0], 5.2, &wait));
  EXPECT_NEAR(wait, 49.95, 1e-9);  // 999 tokens at 20 a second
  {
    ClientSlot left_early(ci.counts.get());
    left_early.Hold(300, 5.2);
    left_early.Ran();  // sent to a replica, and its client left before the answer: it pays its hold
  }
  EXPECT_NEAR(ci.counts->budget.Left(5.2), -1298, 1e-9);
}

// A slot is given back once, whether by the answer's recording or by the request's end.
TEST(ClientSlot, GivesItsPlaceBackOnceWhicheverComesFirst) {
  const ClientTable table({{"ci", "sk-ci", 1}}, nullptr);
  const ClientTable::Client& ci = table.clients()[0];
  ASSERT_TRUE(ClientTable::TakeSlot(ci));
  {
    ClientSlot slot(ci.counts.get());
    EXPECT_FALSE(ClientTable::TakeSlot(ci));
    slot.Release();
    EXPECT_EQ(ci.counts->in_flight.load(), 0);
    ASSERT_TRUE(ClientTable::TakeSlot(ci));  // the next request's
  }
  EXPECT_EQ(ci.counts->in_flight.load(), 1);  // the first slot did not give back the second's
  { ClientSlot ends_here(ci.counts.get()); }
  EXPECT_EQ(ci.counts->in_flight.load(), 0);
  { ClientSlot keyless(nullptr); }
}

}  // namespace
}  // namespace warden
