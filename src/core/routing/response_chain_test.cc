#include "core/routing/response_chain.h"

#include <gtest/gtest.h>

#include <limits>

namespace warden {
namespace {

TEST(ResponseChain, EachResponseLeadsBackToItsConversation) {
  ResponseChain chain(10);
  chain.Remember("resp_1", "conv-a");
  chain.Remember("resp_2", "conv-a");
  chain.Remember("resp_3", "conv-b");
  EXPECT_EQ(chain.KeyOf("resp_2"), "conv-a");
  EXPECT_EQ(chain.KeyOf("resp_3"), "conv-b");
  EXPECT_EQ(chain.KeyOf("resp_9"), "");
  chain.Remember("", "conv-c");  // nothing to remember
  chain.Remember("resp_4", "");
  EXPECT_EQ(chain.size(), 3u);
}

// Where each response was stored: a response told again without its replica keeps the one known.
TEST(ResponseChain, EachResponseKnowsTheReplicaThatStoredIt) {
  ResponseChain chain(10);
  chain.Remember("resp_1", "conv-a", 1, true, /*replica=*/2);
  chain.Remember("resp_2", "conv-a", 2, true);
  EXPECT_EQ(chain.ReplicaOf("resp_1"), 2);
  EXPECT_EQ(chain.ReplicaOf("resp_2"), -1);
  EXPECT_EQ(chain.ReplicaOf("resp_9"), -1);
  chain.Remember("resp_1", "conv-a");
  EXPECT_EQ(chain.ReplicaOf("resp_1"), 2);
  chain.Remember("resp_2", "conv-a", 3, false, 0);
  EXPECT_EQ(chain.ReplicaOf("resp_2"), 0);
}

TEST(ResponseChain, ForgetsTheOldestBeyondItsCapacity) {
  ResponseChain chain(2);
  chain.Remember("resp_1", "a");
  chain.Remember("resp_2", "b");
  chain.Remember("resp_1", "c");  // known: re-keyed, not added
  chain.Remember("resp_3", "d");
  EXPECT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain.KeyOf("resp_1"), "");
  EXPECT_EQ(chain.KeyOf("resp_2"), "b");
  EXPECT_EQ(chain.KeyOf("resp_3"), "d");
}

TEST(ResponseChain, ASmallerCapacityForgetsTheOldestAtOnce) {
  ResponseChain chain(3);
  chain.Remember("resp_1", "a");
  chain.Remember("resp_2", "b");
  chain.Remember("resp_3", "c");
  chain.SetCapacity(1);
  EXPECT_EQ(chain.size(), 1u);
  EXPECT_EQ(chain.KeyOf("resp_2"), "");
  EXPECT_EQ(chain.KeyOf("resp_3"), "c");
}

TEST(ResponseChain, EntriesRebuildTheSameChainOldestFirst) {
  ResponseChain chain(2);
  chain.Remember("r1", "a");
  chain.Remember("r2", "b");
  chain.Remember("r3", "a", 0, false, /*replica=*/1);  // r1 is forgotten
  const auto entries = chain.Entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0], (StoredResponse{"r2", "b", -1}));
  EXPECT_EQ(entries[1], (StoredResponse{"r3", "a", 1}));
  ResponseChain rebuilt(2);
  for (const auto& [id, key, replica] : entries) rebuilt.Remember(id, key, 0, false, replica);
  EXPECT_EQ(rebuilt.KeyOf("r3"), "a");
  EXPECT_EQ(rebuilt.ReplicaOf("r3"), 1);
  EXPECT_EQ(rebuilt.ReplicaOf("r2"), -1);
  rebuilt.Remember("r4", "c");  // the oldest, r2, goes first here too
  EXPECT_EQ(rebuilt.KeyOf("r2"), "");
  EXPECT_EQ(rebuilt.KeyOf("r3"), "a");
}

// What a gateway sends its peers: the responses made through it (not those a peer or a state
// file told it of) after a time, earliest first, in slices of `limit`.
TEST(ResponseChain, NewsAreTheResponsesMadeHereSinceATime) {
  ResponseChain chain(10);
  chain.Remember("restored", "a");  // from a state file: no news
  chain.Remember("r1", "a", 1, /*news=*/true);
  chain.Remember("told", "b", 2, /*news=*/false);  // by a peer
  chain.Remember("r2", "b", 3, true);
  chain.Remember("r3", "c", 3, true);
  chain.Remember("r4", "c", 4, true);
  double through;
  using Pairs = std::vector<StoredResponse>;
  EXPECT_EQ(chain.NewsSince(0, 10, &through),
            (Pairs{{"r1", "a", -1}, {"r2", "b", -1}, {"r3", "c", -1}, {"r4", "c", -1}}));
  EXPECT_EQ(through, std::numeric_limits<double>::infinity());
  EXPECT_EQ(chain.NewsSince(3, 10, &through), (Pairs{{"r4", "c", -1}}));
  // Two at a time: r1 and r2, and r3 made at the same moment as r2; then from 3 on.
  EXPECT_EQ(chain.NewsSince(0, 2, &through),
            (Pairs{{"r1", "a", -1}, {"r2", "b", -1}, {"r3", "c", -1}}));
  EXPECT_EQ(through, 3);
  EXPECT_EQ(chain.NewsSince(through, 2, &through), (Pairs{{"r4", "c", -1}}));
  EXPECT_EQ(through, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(chain.NewsSince(4, 2, &through).empty());
}

// The conversation's size through a response, for admission's claim; forgotten with it.
TEST(ResponseChain, KeepsTheConversationsTokensThroughAResponse) {
  ResponseChain chain(2);
  chain.Remember("resp_1", "a");
  chain.SetTokens("resp_1", 9000);
  chain.SetTokens("resp_9", 100);  // not known: nothing kept
  EXPECT_EQ(chain.TokensOf("resp_1"), 9000);
  EXPECT_EQ(chain.TokensOf("resp_9"), 0);
  chain.Remember("resp_2", "a");
  chain.Remember("resp_3", "a");
  EXPECT_EQ(chain.TokensOf("resp_1"), 0);
}

}  // namespace
}  // namespace warden
