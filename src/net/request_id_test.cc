#include "net/request_id.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>

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

TEST(RequestId, MadeIdsAreThirtyTwoHexDigitsOfRandomBitsAndDoNotRepeat) {
  RequestIdSource source;
  std::set<std::string> seen;
  std::string previous;
  int digits_alike = 0;              // with the previous id, at the same place
  for (int i = 0; i < 10000; ++i) {  // (past a refill of the random bytes: 256 ids each)
    const RequestIdSource::Id made = source.Next();
    const std::string id(made.begin(), made.end());
    ASSERT_EQ(id.size(), 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_TRUE(seen.insert(id).second) << "repeated: " << id;
    if (!previous.empty()) {
      for (size_t d = 0; d < id.size(); ++d) digits_alike += id[d] == previous[d];
    }
    previous = id;
  }
  // Random digits agree with the previous id's one time in 16: 20,000 of 320,000, give or take a
  // few hundred (a counter's ids would agree in most places).
  EXPECT_NEAR(digits_alike, 9999 * 32 / 16, 1000);
  // Other threads (other shards, other gateways alike) make ids of their own.
  std::string other;
  std::thread([&] {
    const RequestIdSource::Id made = RequestIdSource().Next();
    other.assign(made.begin(), made.end());
  }).join();
  EXPECT_EQ(seen.count(other), 0u);
}

}  // namespace
}  // namespace warden
