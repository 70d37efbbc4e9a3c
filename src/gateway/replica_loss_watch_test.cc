#include "gateway/replica_loss_watch.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <memory>
#include <vector>

#include "gateway/model_state.h"
#include "net/socket_pair_test_util.h"

namespace warden {
namespace {

class ReplicaLossWatchTest : public ::testing::Test {
 protected:
  ReplicaLossWatchTest()
      : model_(Config(), std::vector<boost::asio::any_io_executor>{io_.get_executor()}),
        watch_(io_.get_executor()) {}

  static ModelConfig Config() {
    ModelConfig c;
    c.name = "m";
    c.urls = {"http://127.0.0.1:9"};
    c.max_num_seqs = 32;
    return c;
  }

  boost::asio::io_context io_;
  ModelState model_;
  ReplicaLossWatch watch_;
};

// The drain's end closes the replica's side of a request waiting for its answer's head and of a
// stream being relayed, so that each client is told before its connection is cut.
TEST_F(ReplicaLossWatchTest, TheDrainsEndClosesEveryRequestWaitingAtItsReplica) {
  SocketPair head_wait(io_), relay(io_);
  ReplicaLossWatch::Waiting waiting_for_head(watch_, model_, 0, head_wait.writer);
  ReplicaLossWatch::Waiting relaying(watch_, model_, 0, relay.writer, {},
                                     /*give_up_when_lost=*/false);
  watch_.EndRelays();
  EXPECT_TRUE(waiting_for_head.ended_by_stop());
  EXPECT_TRUE(relaying.ended_by_stop());
  EXPECT_FALSE(head_wait.writer.is_open());
  EXPECT_FALSE(relay.writer.is_open());
  EXPECT_FALSE(waiting_for_head.given_up());
}

// A request that reaches its replica after the drain's end (it was still connecting, or was
// routed again) is ended at once too, rather than sent on to be cut with its client.
TEST_F(ReplicaLossWatchTest, ARequestThatReachesItsReplicaAfterTheDrainsEndIsEndedAtOnce) {
  watch_.EndRelays();
  SocketPair late(io_);
  ReplicaLossWatch::Waiting waiting(watch_, model_, 0, late.writer);
  EXPECT_TRUE(waiting.ended_by_stop());
  EXPECT_FALSE(late.writer.is_open());
}

TEST_F(ReplicaLossWatchTest, BeforeTheDrainsEndAWaitingLeavesItsSocketOpen) {
  SocketPair pair(io_);
  ReplicaLossWatch::Waiting waiting(watch_, model_, 0, pair.writer);
  EXPECT_FALSE(waiting.ended_by_stop());
  EXPECT_TRUE(pair.writer.is_open());
}

}  // namespace
}  // namespace warden
