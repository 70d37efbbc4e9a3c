#include "core/routing/response_chain.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace warden
