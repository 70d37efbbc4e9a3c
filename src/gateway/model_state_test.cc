#include "gateway/model_state.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <cmath>

namespace warden {
namespace {

ModelConfig Config(std::string policy = "warden-seed") {
  ModelConfig c;
  c.name = "m";
  c.urls = {"http://127.0.0.1:9", "http://127.0.0.1:10"};
  c.max_num_seqs = 32;
  c.policy = std::move(policy);
  return c;
}

class ModelStateSettings : public ::testing::Test {
 protected:
  std::unique_ptr<ModelState> Make(const ModelConfig& config) {
    auto model = std::make_unique<ModelState>(
        config, std::vector<boost::asio::any_io_executor>{io_.get_executor()});
    model->set_hash_prompts_flag(&hash_prompts_);
    return model;
  }
  ModelSettingsChange Policy(std::string name) {
    ModelSettingsChange c;
    c.policy = std::move(name);
    return c;
  }

  boost::asio::io_context io_;
  std::atomic<bool> hash_prompts_{false};
};

// A policy that reads prefixes needs the prompts' hashes, however it arrives: from a peer here.
TEST_F(ModelStateSettings, APrefixPolicyFromAPeerTurnsOnThePromptHashes) {
  auto model = Make(Config());
  EXPECT_FALSE(hash_prompts_);
  EXPECT_EQ(model->TakePeerSettings({{"policy", "llm-d", 100}}).size(), 1u);
  EXPECT_TRUE(hash_prompts_);
  EXPECT_EQ(*model->SettingsNow().policy, "llm-d");
  EXPECT_EQ(model->Patched(), (std::vector<PatchedSetting>{{"policy", "llm-d", "warden-seed"}}));
}

// The policy it runs, set again (a PATCH naming it beside another setting, a peer's message), is
// not started afresh: it keeps what it placed where and what it counts in flight.
TEST_F(ModelStateSettings, ThePolicyItRunsSetAgainKeepsItsMemory) {
  auto model = Make(Config("dynamo"));
  const auto running = [&] {
    return model->WithRouter([](ModelRouter& r) { return &r.policy(); });
  };
  const RoutingPolicy* before = running();
  ModelSettingsChange same;
  same.policy = "dynamo";
  same.affinity = false;
  model->ApplySettings(same, ModelState::SettingsFrom::kAdminApi, 100);
  EXPECT_EQ(running(), before);
  same.policy = "llm-d";
  model->ApplySettings(same, ModelState::SettingsFrom::kAdminApi, 101);
  EXPECT_NE(running(), before);
  EXPECT_EQ(running()->name(), "llm-d");
}

// What changed, by whom and when, is kept for the panel's chart; a value set again is no change.
TEST_F(ModelStateSettings, ChangesAreNotedWithWhoMadeThem) {
  auto model = Make(Config());
  ModelSettingsChange off;
  off.affinity = false;
  off.overflow_limit = 3;
  const ModelSettingsChange first =
      model->ApplySettings(off, ModelState::SettingsFrom::kAdminApi, 100);
  EXPECT_EQ(first.affinity, false);
  EXPECT_EQ(first.overflow_limit, 3);
  // The same again: nothing changed, so nothing for the log to say "from now on" of.
  const ModelSettingsChange again =
      model->ApplySettings(off, ModelState::SettingsFrom::kAdminApi, 101);
  EXPECT_FALSE(again.affinity);
  EXPECT_FALSE(again.overflow_limit);
  ModelSettingsChange seqs;
  seqs.max_num_seqs = 64;
  seqs.affinity = false;  // unchanged
  model->ApplySettings(seqs, ModelState::SettingsFrom::kConfigFile, 102);
  model->TakePeerSettings({{"policy", "llm-d", 103}});
  const std::pair<int, bool> drain[] = {{1, true}};
  model->SetDraining(drain, 104);
  model->SetDraining(drain, 105);  // already draining
  model->TakePeerDraining({false, false}, {0, 106});
  EXPECT_EQ(model->changes().Since(0),
            (std::vector<ChangeLog::Change>{{100, "affinity off, overflow limit 3", "admin API"},
                                            {102, "max_num_seqs 64", "SIGHUP"},
                                            {103, "policy llm-d", "a peer"},
                                            {104, "replica 1 draining", "admin API"},
                                            {106, "replica 1 back in service", "a peer"}}));
}

// A reload's max_num_seqs moves the overflow limit while it is auto, and not when it is set.
TEST_F(ModelStateSettings, AReloadedSeqLimitMovesTheAutoOverflowLimit) {
  auto model = Make(Config());
  const auto limit = [&] {
    return model->WithRouter([](ModelRouter& r) { return r.settings().overflow_limit; });
  };
  EXPECT_EQ(limit(), 8);
  ModelSettingsChange seqs;
  seqs.max_num_seqs = 64;
  seqs.max_sessions = 5;
  seqs.session_idle_timeout_s = 30;
  model->ApplySettings(seqs, ModelState::SettingsFrom::kConfigFile, 100);
  EXPECT_EQ(model->max_num_seqs(), 64);
  EXPECT_EQ(limit(), 16);
  EXPECT_EQ(model->WithRouter([](ModelRouter& r) { return r.sessions().max_entries(); }), 5u);
  EXPECT_EQ(model->WithRouter([](ModelRouter& r) { return r.sessions().idle_timeout_s(); }), 30);
  EXPECT_TRUE(model->Patched().empty());  // nothing an operator patched
  ModelSettingsChange fixed;
  fixed.overflow_limit = 3;
  model->ApplySettings(fixed, ModelState::SettingsFrom::kAdminApi, 101);
  seqs.max_num_seqs = 128;
  model->ApplySettings(seqs, ModelState::SettingsFrom::kConfigFile, 102);
  EXPECT_EQ(limit(), 3);
  ModelSettingsChange back_to_auto;
  back_to_auto.overflow_limit = 0;
  model->ApplySettings(back_to_auto, ModelState::SettingsFrom::kAdminApi, 103);
  EXPECT_EQ(limit(), 32);  // a quarter of the max_num_seqs now in effect
}

// So does admission, switched on at run time; switched off, requests are no longer offered.
TEST_F(ModelStateSettings, AdmissionSwitchedAtRunTime) {
  auto model = Make(Config());
  ModelSettingsChange on;
  on.admission = "reserve:3";
  model->ApplySettings(on, ModelState::SettingsFrom::kAdminApi, 100);
  EXPECT_TRUE(model->admission_enabled());
  EXPECT_TRUE(hash_prompts_);
  EXPECT_EQ(model->admission(), "reserve:3");
  ModelSettingsChange off;
  off.admission = "off";
  model->ApplySettings(off, ModelState::SettingsFrom::kAdminApi, 101);
  EXPECT_FALSE(model->admission_enabled());
  EXPECT_TRUE(model->Patched().empty());  // back to the config's
}

// A policy with options keeps them, here and as sent to the peers.
TEST_F(ModelStateSettings, APolicyWithOptionsKeepsThem) {
  auto model = Make(Config());
  model->ApplySettings(Policy("warden:tpr=2048"), ModelState::SettingsFrom::kAdminApi, 100);
  EXPECT_EQ(model->SharedSettings(),
            (std::vector<ModelState::SharedSetting>{{"policy", "warden:tpr=2048", 100}}));
}

// Two gateways that each stamp a change alike (after the same latest change, from a clock ahead)
// end with the same value: the greater.
TEST_F(ModelStateSettings, ChangesStampedAlikeSettleOnTheSameValueEverywhere) {
  auto a = Make(Config()), b = Make(Config());
  a->ApplySettings(Policy("round-robin"), ModelState::SettingsFrom::kAdminApi, 100);
  b->ApplySettings(Policy("llm-d"), ModelState::SettingsFrom::kAdminApi, 100);
  a->TakePeerSettings(b->SharedSettings());
  b->TakePeerSettings(a->SharedSettings());
  EXPECT_EQ(*a->SettingsNow().policy, "round-robin");
  EXPECT_EQ(*b->SettingsNow().policy, "round-robin");
  // An older one changes nothing.
  EXPECT_TRUE(a->TakePeerSettings({{"policy", "dynamo", 99}}).empty());
}

// The same for drains: stamped alike, the drain wins on both.
TEST_F(ModelStateSettings, DrainsStampedAlikeSettleOnTheDrain) {
  auto a = Make(Config()), b = Make(Config());
  const std::pair<int, bool> drain{1, true}, resume{1, false};
  a->SetDraining({&drain, 1}, 100);
  b->SetDraining({&resume, 1}, 100);
  const ModelState::DrainState from_a = a->Draining(), from_b = b->Draining();
  EXPECT_EQ(b->TakePeerDraining(from_a.draining, from_a.changed_at_each), std::vector<int>{1});
  EXPECT_TRUE(a->TakePeerDraining(from_b.draining, from_b.changed_at_each).empty());
  EXPECT_TRUE(a->Draining().draining[1]);
  EXPECT_TRUE(b->Draining().draining[1]);
}

// At a restart, a setting the config changed meanwhile is the config's, not sent to the peers as a
// PATCH, and the restore is saved again; one it did not change keeps its time and goes on being
// sent.
TEST_F(ModelStateSettings, ARestartDatesWhatTheConfigChangedAndKeepsTheRest) {
  auto before = Make(Config());
  before->ApplySettings(Policy("llm-d"), ModelState::SettingsFrom::kAdminApi, 100);
  before->ApplySettings(Policy("warden-seed"), ModelState::SettingsFrom::kAdminApi, 101);
  ModelSettingsChange affinity;
  affinity.affinity = false;
  before->ApplySettings(affinity, ModelState::SettingsFrom::kAdminApi, 102);
  const ModelSnapshot saved = before->Snapshot(0, 1000);

  auto same = Make(Config());
  size_t dropped = 0;
  same->Restore(saved, 0, 1000, &dropped);
  EXPECT_FALSE(same->RestoreChangedSettings());
  EXPECT_EQ(same->SharedSettings(), (std::vector<ModelState::SharedSetting>{
                                        {"affinity", "off", 102}, {"policy", "warden-seed", 101}}));

  auto edited = Make(Config("round-robin"));
  edited->Restore(saved, 0, 1000, &dropped);
  EXPECT_TRUE(edited->RestoreChangedSettings());
  EXPECT_EQ(*edited->SettingsNow().policy, "round-robin");
  EXPECT_EQ(edited->SharedSettings(),
            (std::vector<ModelState::SharedSetting>{{"affinity", "off", 102}}));
  // A peer's older PATCH does not undo the config's change.
  EXPECT_TRUE(edited->TakePeerSettings({{"policy", "llm-d", 100}}).empty());
}

// The panel's chart keeps its hour across a restart: the buckets come back at their Unix times on
// the new gateway's clock (which starts at 0 again), on the replicas as the file names them
// (whatever their order now), and the chart says since when it knows.
TEST_F(ModelStateSettings, TheChartsHourIsKeptAcrossARestart) {
  auto before = Make(Config());
  // Gateway clock 500 s = Unix 10,500: a bucket on each replica, one on the engine's balancer.
  before->WithRouter([](ModelRouter& r) {
    r.RestoreHistory(0, 100, 10, 405);  // bucket [400, 410): Unix 10,400
    r.RestoreHistory(1, 0, 30, 495);
    r.RestoreHistory(2, 7, 0, 495);
  });
  ModelSnapshot saved = before->Snapshot(500, 10500);
  saved.saved_at = 10500;  // as ParseState reads it from the file
  ASSERT_EQ(saved.history.size(), 2u);
  EXPECT_EQ(saved.history[0].start_unix, 10400);
  EXPECT_EQ(saved.history_since, 10000);  // the first gateway's start

  // A minute later, with the replicas listed the other way round.
  ModelConfig swapped = Config();
  std::swap(swapped.urls[0], swapped.urls[1]);
  auto after = Make(swapped);
  size_t dropped = 0;
  after->Restore(saved, 0, 10560, &dropped);
  EXPECT_DOUBLE_EQ(after->history_extent().since, -560);
  // It knows nothing of the minute from the save to the restart.
  ASSERT_EQ(after->history_extent().gaps.size(), 1u);
  EXPECT_DOUBLE_EQ(after->history_extent().gaps[0].first, -60);
  EXPECT_DOUBLE_EQ(after->history_extent().gaps[0].second, 0);
  std::vector<TokenHistory::Bucket> window;
  after->WithRouter([&](ModelRouter& r) { window = r.history().Window(0); });
  int64_t cached[3] = {}, computed[3] = {};
  double first_at = 1;  // where the first replica's bucket went
  for (const TokenHistory::Bucket& b : window) {
    for (int i = 0; i < 3; ++i) {
      cached[i] += b.cached[i];
      computed[i] += b.computed[i];
    }
    if (b.cached[1] > 0) first_at = b.start_s;
  }
  EXPECT_EQ(first_at, -160);  // Unix 10,400 (+5): 160 s before
  EXPECT_EQ(cached[1], 100);  // the first replica then is the second now
  EXPECT_EQ(computed[1], 10);
  EXPECT_EQ(computed[0], 30);
  EXPECT_EQ(cached[2], 7);  // the engine's balancer's
  // Saved again, the times are the same Unix times, the gap too.
  const ModelSnapshot again = after->Snapshot(0, 10560);
  ASSERT_EQ(again.history.size(), 2u);
  EXPECT_EQ(again.history_since, 10000);
  EXPECT_EQ(again.history_gaps, (std::vector<std::pair<double, double>>{{10500, 10560}}));
}

// The bucket still filling at the save, saved a moment before the restart, is kept too.
TEST_F(ModelStateSettings, TheChartsBucketStillFillingIsKept) {
  auto before = Make(Config());
  before->WithRouter([](ModelRouter& r) { r.RestoreHistory(0, 100, 10, 1); });
  const ModelSnapshot saved = before->Snapshot(2, 10002);  // bucket [0, 10): Unix 10,000
  auto after = Make(Config());
  size_t dropped = 0;
  after->Restore(saved, 0, 10003, &dropped);
  int64_t cached = 0;
  after->WithRouter([&](ModelRouter& r) {
    for (const TokenHistory::Bucket& b : r.history().Window(0)) cached += b.cached[0];
  });
  EXPECT_EQ(cached, 100);
  EXPECT_DOUBLE_EQ(after->history_extent().since, -3);
}

// A file from more than the chart's hour ago brings back nothing, and the chart starts at the
// gateway's start.
TEST_F(ModelStateSettings, AChartOlderThanItsHourIsNotRestored) {
  auto before = Make(Config());
  before->WithRouter([](ModelRouter& r) { r.RestoreHistory(0, 100, 10, 405); });
  ModelSnapshot saved = before->Snapshot(500, 10500);
  saved.saved_at = 10500;
  auto after = Make(Config());
  size_t dropped = 0;
  after->Restore(saved, 0, 10500 + 4000, &dropped);
  EXPECT_DOUBLE_EQ(after->history_extent().since, 0);
  EXPECT_TRUE(after->history_extent().gaps.empty());
  EXPECT_TRUE(after->Snapshot(0, 14500).history.empty());
}

// A chart whose counts were all of replicas no longer configured (a restart with the servers on
// other ports) brings back nothing, and does not claim the time before the restart either.
TEST_F(ModelStateSettings, AChartOfReplicasNoLongerConfiguredIsNotClaimed) {
  auto before = Make(Config());
  before->WithRouter([](ModelRouter& r) { r.RestoreHistory(0, 100, 10, 405); });
  ModelSnapshot saved = before->Snapshot(500, 10500);
  saved.saved_at = 10500;
  ModelConfig moved = Config();
  moved.urls = {"http://127.0.0.1:19", "http://127.0.0.1:20"};
  auto after = Make(moved);
  size_t dropped = 0;
  after->Restore(saved, 0, 10560, &dropped);
  EXPECT_DOUBLE_EQ(after->history_extent().since, 0);
  EXPECT_TRUE(after->history_extent().gaps.empty());
}

// A request's usage is bounded by the largest context of the model's servers, once each has said
// its own: servers of different context lengths each keep their plausible usage.
TEST_F(ModelStateSettings, UsageIsBoundedByTheLargestContextOnceEveryServerSaidIt) {
  auto model = Make(Config());
  EXPECT_EQ(model->usage_bound(), 0);
  model->set_server_model_len(0, 32768);
  EXPECT_EQ(model->usage_bound(), 0);  // the other server has not said
  model->set_server_model_len(1, 131072);
  EXPECT_EQ(model->usage_bound(), 131072);
  model->set_server_model_len(1, 0);  // restarted as one that does not say
  EXPECT_EQ(model->usage_bound(), 0);
}

// A Responses API turn continuing a stored response sends only its new input, yet the replica
// reads the whole conversation: admission claims room for it too, as big as the engine counted
// the conversation through that response (before, only the new input's: far too little).
TEST_F(ModelStateSettings, ATurnOnAStoredResponseClaimsRoomForItsConversation) {
  ModelConfig config = Config();
  config.admission = "fifo";
  auto model = Make(config);
  const auto claimed = [&] {
    return model->WithRouter([](ModelRouter& r) { return r.admission().claimed_tokens(0); });
  };
  const double per_block =
      model->WithRouter([](ModelRouter& r) { return r.admission().tokens_per_block(); });
  const std::vector<uint64_t> new_input = {11, 12};
  EXPECT_EQ(model->Admit(0, 1, new_input, "conv", true, io_.get_executor()), nullptr);
  const double alone = claimed();
  model->AdmissionDone(1);
  model->RememberResponse(
      "resp_1", "conv", 0, [] { return 1.0; }, true, /*tokens=*/1600);
  EXPECT_EQ(model->Admit(0, 2, new_input, "conv", true, io_.get_executor(), "resp_1"), nullptr);
  EXPECT_DOUBLE_EQ(claimed() - alone, std::ceil(1600 / per_block) * per_block);
  model->AdmissionDone(2);
  // A response whose size is not known (told by a peer) claims as before.
  model->RememberResponse(
      "resp_2", "conv", 0, [] { return 2.0; }, false);
  EXPECT_EQ(model->Admit(0, 3, new_input, "conv", true, io_.get_executor(), "resp_2"), nullptr);
  EXPECT_DOUBLE_EQ(claimed(), alone);
}

}  // namespace
}  // namespace warden
