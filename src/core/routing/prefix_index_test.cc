#include "core/routing/prefix_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>
#include <vector>

namespace warden {
namespace {

TEST(PrefixIndex, MatchesLeadingBlocksAndForgetsTheLeastRecentlyUsed) {
  PrefixIndex index(2, 3);
  const std::vector<uint64_t> abc = {1, 2, 3};
  index.Insert(0, abc);
  EXPECT_EQ(index.Match(0, abc), 3);
  EXPECT_EQ(index.Match(1, abc), 0);  // another replica's
  const std::vector<uint64_t> ab_x = {1, 2, 9};
  EXPECT_EQ(index.Match(0, ab_x), 2);
  const std::vector<uint64_t> first = {1};
  index.Insert(0, first);  // 1 is now the most recent: 2 is the oldest
  const std::vector<uint64_t> d = {4};
  index.Insert(0, d);
  EXPECT_EQ(index.size(0), 3u);
  EXPECT_EQ(index.Match(0, abc), 1);  // 2 went
  const std::vector<uint64_t> three = {3};
  EXPECT_EQ(index.Match(0, three), 1);
}

// Recorded head newest (as vLLM frees a finished request's blocks tail first, so its cache lets
// the tail go first), a prompt the index has no room for loses its tail first and still matches
// its head; recorded the other way it loses its head first and matches nothing.
TEST(PrefixIndex, HeadNewestLosesThePromptsTailFirst) {
  const std::vector<uint64_t> prompt = {1, 2, 3, 4}, other = {8, 9};
  PrefixIndex head_newest(1, 6), tail_newest(1, 6);
  head_newest.Insert(0, prompt, 0, /*head_newest=*/true);
  tail_newest.Insert(0, prompt);
  head_newest.Insert(0, other, 0, true);
  tail_newest.Insert(0, other);
  EXPECT_EQ(head_newest.Match(0, prompt), 4);  // room for both
  const std::vector<uint64_t> more = {20, 21};
  head_newest.Insert(0, more, 0, true);
  tail_newest.Insert(0, more);
  EXPECT_EQ(head_newest.Match(0, prompt), 2);  // 4, then 3 went
  EXPECT_EQ(tail_newest.Match(0, prompt), 0);  // 1, then 2 went
}

// A smaller capacity forgets the least recently used blocks past it; a larger one keeps all.
TEST(PrefixIndex, ASmallerCapacityForgetsTheLeastRecentlyUsed) {
  PrefixIndex index(1, 6);
  const std::vector<uint64_t> prompt = {1, 2, 3, 4, 5, 6};
  index.Insert(0, prompt);
  index.SetCapacity(10);
  EXPECT_EQ(index.Match(0, prompt), 6);
  index.SetCapacity(4);  // 1 and 2, the oldest, go
  EXPECT_EQ(index.size(0), 4u);
  const std::vector<uint64_t> from_three = {3, 4, 5, 6};
  EXPECT_EQ(index.Match(0, from_three), 4);
  const std::vector<uint64_t> seven = {7};
  index.Insert(0, seven);  // full at 4: 3 goes
  EXPECT_EQ(index.Match(0, from_three), 0);
  EXPECT_EQ(index.size(0), 4u);
}

// Blocks recorded before a time are forgotten, those recorded (or recorded again) since are kept,
// and the room the forgotten ones leave is used again.
TEST(PrefixIndex, ForgetsBlocksRecordedBeforeATime) {
  PrefixIndex index(2, 3);
  const std::vector<uint64_t> ab = {1, 2}, a = {1}, c = {3}, de = {4, 5};
  index.Insert(0, ab, 10);
  index.Insert(1, c, 10);
  index.Insert(0, a, 20);  // 1 recorded again
  index.ExpireBefore(15);
  EXPECT_EQ(index.Match(0, ab), 1);  // 2 went, 1 stays
  EXPECT_EQ(index.Match(1, c), 0);   // on every replica
  EXPECT_EQ(index.size(0), 1u);
  index.Insert(0, de, 30);  // into the room 2 left, and one more
  EXPECT_EQ(index.size(0), 3u);
  EXPECT_EQ(index.Match(0, de), 2);
  EXPECT_EQ(index.Match(0, a), 1);
  index.ExpireBefore(25);
  EXPECT_EQ(index.size(0), 2u);
}

// The same decisions as a plain list of recency, over many random inserts (the lab's figures
// for the prefix-aware baselines rest on them).
TEST(PrefixIndex, KeepsWhatAPlainLruListKeeps) {
  constexpr size_t kCapacity = 50;
  PrefixIndex index(1, kCapacity);
  std::list<uint64_t> lru;  // most recent first
  std::mt19937_64 random(7);
  for (int step = 0; step < 20000; ++step) {
    std::vector<uint64_t> hashes(1 + random() % 8);
    for (uint64_t& h : hashes) h = random() % 120;
    index.Insert(0, hashes);
    for (uint64_t h : hashes) {
      lru.remove(h);
      lru.push_front(h);
      if (lru.size() > kCapacity) lru.pop_back();
    }
    ASSERT_EQ(index.size(0), lru.size());
    for (uint64_t h = 0; h < 120; ++h) {
      const std::vector<uint64_t> one = {h};
      const bool kept = std::find(lru.begin(), lru.end(), h) != lru.end();
      ASSERT_EQ(index.Match(0, one), kept ? 1 : 0) << step << " " << h;
    }
  }
}

}  // namespace
}  // namespace warden
