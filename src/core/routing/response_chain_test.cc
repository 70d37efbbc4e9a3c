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

TEST(ResponseChain, EntriesRebuildTheSameChainOldestFirst) {
  ResponseChain chain(2);
  chain.Remember("r1", "a");
  chain.Remember("r2", "b");
  chain.Remember("r3", "a");  // r1 is forgotten
  const auto entries = chain.Entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0], std::make_pair(std::string("r2"), std::string("b")));
  ResponseChain rebuilt(2);
  for (const auto& [id, key] : entries) rebuilt.Remember(id, key);
  EXPECT_EQ(rebuilt.KeyOf("r3"), "a");
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
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(chain.NewsSince(0, 10, &through),
            (Pairs{{"r1", "a"}, {"r2", "b"}, {"r3", "c"}, {"r4", "c"}}));
  EXPECT_EQ(through, std::numeric_limits<double>::infinity());
  EXPECT_EQ(chain.NewsSince(3, 10, &through), (Pairs{{"r4", "c"}}));
  // Two at a time: r1 and r2, and r3 made at the same moment as r2; then from 3 on.
  EXPECT_EQ(chain.NewsSince(0, 2, &through), (Pairs{{"r1", "a"}, {"r2", "b"}, {"r3", "c"}}));
  EXPECT_EQ(through, 3);
  EXPECT_EQ(chain.NewsSince(through, 2, &through), (Pairs{{"r4", "c"}}));
  EXPECT_EQ(through, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(chain.NewsSince(4, 2, &through).empty());
}

}  // namespace
}  // namespace warden
