#include "gateway/peer_sync.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

// A peer that answers is sent a message every interval, however long; one that does not is tried
// again with the interval doubled per failure, up to a second, or the interval if that is longer.
TEST(PeerSendWait, TheIntervalWhileAnsweredAndABoundedBackoffWhileNot) {
  EXPECT_EQ(PeerSendWait(0.2, 0), 0.2);
  EXPECT_EQ(PeerSendWait(60, 0), 60);  // was cut to the backoff's bound
  EXPECT_EQ(PeerSendWait(0.2, 1), 0.4);
  EXPECT_EQ(PeerSendWait(0.2, 2), 0.8);
  EXPECT_EQ(PeerSendWait(0.2, 3), kMaxPeerBackoffS);
  EXPECT_EQ(PeerSendWait(0.2, 1000), kMaxPeerBackoffS);
  EXPECT_EQ(PeerSendWait(60, 5), 60);
}

}  // namespace
}  // namespace warden
