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

// A stream is relayed on while its replica is out of service (a slow /health is no reason to cut
// one that flows), but one that sends nothing for the lost-quiet limit then is given up: a
// frozen replica's streams would wait for ever. Not while the gateway writes to the client
// (paused), nor for a replica in service.
TEST(ReplicaLossWatch, AStreamOfALostReplicaThatSendsNothingIsGivenUp) {
  boost::asio::io_context io;
  ModelConfig c;
  c.name = "m";
  c.urls = {"http://127.0.0.1:9", "http://127.0.0.1:10"};
  ModelState model(c, std::vector<boost::asio::any_io_executor>{io.get_executor()});
  ReplicaLossWatch watch(io.get_executor(), std::chrono::milliseconds(5),
                         std::chrono::milliseconds(300));
  SocketPair silent_pair(io), paused_pair(io), in_service_pair(io);
  ReplicaLossWatch::Waiting silent(watch, model, 0, silent_pair.writer, {}, false);
  ReplicaLossWatch::Waiting paused(watch, model, 0, paused_pair.writer, {}, false);
  ReplicaLossWatch::Waiting in_service(watch, model, 1, in_service_pair.writer, {}, false);
  silent.Progress();  // a read waits
  paused.Pause();     // the gateway writes to the client
  in_service.Progress();
  // Silent for longer than the limit before the replica was lost: counted from the loss (a
  // stream queued for long at a busy replica whose /health is late is not cut at once).
  const auto lost_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  while (std::chrono::steady_clock::now() < lost_at) io.run_one_for(std::chrono::milliseconds(10));
  ASSERT_FALSE(silent.given_up());  // (its replica is in service)
  model.SetLost(0, true);
  io.run_one_for(std::chrono::milliseconds(6));  // a check or so, well within the limit
  EXPECT_FALSE(silent.given_up());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!silent.given_up() && std::chrono::steady_clock::now() < deadline)
    io.run_one_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(silent.given_up());
  EXPECT_TRUE(silent.lost_and_silent());
  EXPECT_FALSE(silent_pair.writer.is_open());
  EXPECT_FALSE(paused.given_up());
  EXPECT_FALSE(in_service.given_up());
  EXPECT_TRUE(in_service_pair.writer.is_open());
}

}  // namespace
}  // namespace warden
