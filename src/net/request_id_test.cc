#include "net/request_id.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace warden {
namespace {

TEST(RequestId, AClientsIdIsKeptOnlyWhenItIsVisibleTextOfAModestLength) {
  EXPECT_TRUE(UsableRequestId("req-7f3a_9:abc/1"));
  EXPECT_TRUE(UsableRequestId(std::string(kMaxRequestIdLength, 'a')));
  EXPECT_FALSE(UsableRequestId(""));
  EXPECT_FALSE(UsableRequestId(std::string(kMaxRequestIdLength + 1, 'a')));
  EXPECT_FALSE(UsableRequestId("two words"));  // a log line's fields split on spaces
  EXPECT_FALSE(UsableRequestId("tab\there"));
  EXPECT_FALSE(UsableRequestId("caf\xC3\xA9"));  // not ASCII
  EXPECT_FALSE(UsableRequestId(std::string("a\0b", 3)));
}

TEST(RequestId, MadeIdsAreThirtyTwoHexDigitsWithTheSourcesHalfAndNoRepeats) {
  RequestIdSource source(0x0123456789abcdefULL);
  std::set<std::string> seen;
  std::string previous;
  for (int i = 0; i < 10000; ++i) {  // (the first too: it does not end in zeros)
    const RequestIdSource::Id made = source.Next();
    const std::string id(made.begin(), made.end());
    ASSERT_EQ(id.size(), 32u);
    EXPECT_EQ(id.substr(0, 16), "0123456789abcdef");
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_TRUE(seen.insert(id).second) << "repeated: " << id;
    if (!previous.empty()) {  // neighbours differ past their last digits
      EXPECT_NE(id.substr(16, 8), previous.substr(16, 8));
    }
    previous = id;
  }
  // Two sources (two gateways) share no id.
  RequestIdSource other(0xfedcba9876543210ULL);
  const RequestIdSource::Id theirs = other.Next();
  EXPECT_EQ(seen.count(std::string(theirs.begin(), theirs.end())), 0u);
}

}  // namespace
}  // namespace warden
