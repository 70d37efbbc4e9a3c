#include "gateway/config_reload.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "gateway/config_test_util.h"

namespace warden {
namespace {

std::string Model(std::string_view name, std::string_view more = "") {
  return fmt::format("  - name: {}\n    url: http://127.0.0.1:8000\n    max_num_seqs: 32\n{}", name,
                     more);
}

GatewayConfig Running() {
  return FromFile("models:\n" + Model("m") + Model("n"));
}

TEST(ConfigReload, TheAccessLogTurnsOnAndOffInPlace) {
  const ReloadPlan on = PlanReload(
      Running(), FromFile("access_log: true\nmodels:\n" + Model("m") + Model("n")), {}, false);
  EXPECT_EQ(on.access_log, true);
  EXPECT_TRUE(on.needing_restart.empty());
  const ReloadPlan off = PlanReload(on.now_running, Running(), {}, false);
  EXPECT_EQ(off.access_log, false);
  // --access-log wins over a file that turns it off.
  ConfigOverrides flag;
  flag.access_log = true;
  GatewayConfig running = Running();
  running.access_log = true;
  const ReloadPlan flagged = PlanReload(running, Running(), flag, false);
  EXPECT_FALSE(flagged.access_log.has_value());
  EXPECT_EQ(flagged.overridden, std::vector<std::string>{"access_log (--access-log)"});
}

TEST(ConfigReload, AModelsAliasesChangeInPlace) {
  const ReloadPlan plan = PlanReload(
      Running(),
      FromFile("models:\n" + Model("m", "    aliases: [claude-*, gpt-4o]\n") + Model("n")), {},
      false);
  ASSERT_EQ(plan.applied.size(), 1u);
  EXPECT_EQ(plan.applied[0].aliases, (std::vector<std::string>{"claude-*", "gpt-4o"}));
  EXPECT_FALSE(plan.applied[0].affinity || plan.applied[0].overflow_limit ||
               plan.applied[0].policy);
  EXPECT_TRUE(plan.needing_restart.empty());
  EXPECT_EQ(Describe(plan.applied[0], 32), "aliases claude-*, gpt-4o");
  // Taken out again: none.
  const ReloadPlan back = PlanReload(plan.now_running, Running(), {}, false);
  ASSERT_EQ(back.applied.size(), 1u);
  EXPECT_EQ(Describe(back.applied[0], 32), "no aliases");
  // A file giving two models one alias is refused whole, as at a start.
  const ReloadPlan clash = PlanReload(
      Running(),
      FromFile("models:\n" + Model("m", "    aliases: [x]\n") + Model("n", "    aliases: [x]\n")),
      {}, false);
  EXPECT_FALSE(clash.error.empty());
  EXPECT_TRUE(clash.applied.empty());
}

TEST(ConfigReload, AModelsAffinityAndOverflowLimitChangeInPlace) {
  const ReloadPlan plan = PlanReload(
      Running(),
      FromFile("models:\n" + Model("m", "    affinity: off\n    overflow_limit: 4\n") + Model("n")),
      {}, false);
  ASSERT_EQ(plan.applied.size(), 1u);
  EXPECT_EQ(plan.applied[0].model, "m");
  EXPECT_EQ(plan.applied[0].affinity, false);
  EXPECT_EQ(plan.applied[0].overflow_limit, 4);
  EXPECT_TRUE(plan.needing_restart.empty());
  EXPECT_FALSE(plan.now_running.models[0].affinity);
  EXPECT_EQ(plan.now_running.models[0].overflow_limit, 4);
  EXPECT_EQ(Describe(plan.applied[0], 32), "affinity off, overflow limit 4");

  // The next reload compares with what was applied: the same file changes nothing more.
  const ReloadPlan again = PlanReload(
      plan.now_running,
      FromFile("models:\n" + Model("m", "    affinity: off\n    overflow_limit: 4\n") + Model("n")),
      {}, false);
  EXPECT_TRUE(again.applied.empty());
  EXPECT_TRUE(again.needing_restart.empty());
}

TEST(ConfigReload, AnOverflowLimitBackToAutoIsSaidWithItsValue) {
  GatewayConfig running = Running();
  running.models[1].overflow_limit = 3;
  const ReloadPlan plan =
      PlanReload(running, FromFile("models:\n" + Model("m") + Model("n")), {}, false);
  ASSERT_EQ(plan.applied.size(), 1u);
  EXPECT_EQ(plan.applied[0].model, "n");
  EXPECT_FALSE(plan.applied[0].affinity);
  EXPECT_TRUE(plan.applied[0].overflow_limit_auto());
  EXPECT_EQ(Describe(plan.applied[0], 32), "overflow limit 8 (auto)");
}

TEST(ConfigReload, OtherEditsOfAModelAreNamedAndItsPolicyStillApplies) {
  const ReloadPlan plan =
      PlanReload(Running(),
                 FromFile("models:\n" +
                          Model("m",
                                "    policy: round-robin\n    admission: fifo\n    "
                                "tls_verify: false\n") +
                          Model("n")),
                 {}, false);
  ASSERT_EQ(plan.applied.size(), 1u);
  EXPECT_EQ(plan.applied[0].policy, "round-robin");
  EXPECT_EQ(plan.applied[0].admission, "fifo");
  EXPECT_EQ(Describe(plan.applied[0], 32), "policy round-robin, admission fifo");
  EXPECT_EQ(plan.needing_restart, std::vector<std::string>{"models[0] (m): tls_verify"});
  EXPECT_EQ(plan.now_running.models[0].policy, "round-robin");
  EXPECT_EQ(plan.now_running.models[0].admission, "fifo");
  EXPECT_TRUE(plan.now_running.models[0].tls_verify);  // not applied
}

TEST(ConfigReload, TheReplicasLimitsScrapingAndSessionTableChangeInPlace) {
  const ReloadPlan plan = PlanReload(
      Running(),
      FromFile("models:\n" + Model("m") +
               "  - name: n\n    url: http://127.0.0.1:8000\n    max_num_seqs: 64\n"
               "    scrape_interval_s: 0.5\n    session_idle_timeout_s: 60\n    max_sessions: 10\n"
               "    when_affinity_off: gateway\n    inline_system_as_user: on\n"
               "    idle_sleep: on\n"),
      {}, false);
  ASSERT_EQ(plan.applied.size(), 1u);
  const ModelSettingsChange& n = plan.applied[0];
  EXPECT_EQ(n.model, "n");
  EXPECT_EQ(n.max_num_seqs, 64);
  EXPECT_EQ(n.scrape_interval_s, 0.5);
  EXPECT_EQ(n.session_idle_timeout_s, 60);
  EXPECT_EQ(n.max_sessions, 10u);
  EXPECT_EQ(n.engine_balances_when_off, false);
  EXPECT_EQ(n.inline_system_as_user, true);
  EXPECT_EQ(n.idle_sleep, true);
  EXPECT_FALSE(n.affinity || n.overflow_limit || n.policy || n.admission || n.aliases);
  EXPECT_TRUE(plan.needing_restart.empty());
  EXPECT_EQ(Describe(n, 64),
            "max_num_seqs 64, scrape interval 0.5 s, session idle timeout 60 s, at most 10 "
            "sessions, with affinity off, the gateway balances, inline system messages sent as "
            "user messages, sleeping replicas wake at their next request (idle_sleep)");
  const ReloadPlan again = PlanReload(
      plan.now_running,
      FromFile("models:\n" + Model("m") +
               "  - name: n\n    url: http://127.0.0.1:8000\n    max_num_seqs: 64\n"
               "    scrape_interval_s: 0.5\n    session_idle_timeout_s: 60\n    max_sessions: 10\n"
               "    when_affinity_off: gateway\n    inline_system_as_user: on\n"
               "    idle_sleep: on\n"),
      {}, false);
  EXPECT_TRUE(again.applied.empty());
  EXPECT_TRUE(again.needing_restart.empty());
}

// Models are matched by name: one moved in the file has its settings applied, and the new order
// (which model takes a name two aliases match) waits for a restart; one renamed is another model.
TEST(ConfigReload, AModelMovedIsMatchedByNameAndARenamedOneIsAnother) {
  const ReloadPlan moved = PlanReload(
      Running(), FromFile("models:\n" + Model("n", "    affinity: off\n") + Model("m")), {}, false);
  ASSERT_EQ(moved.applied.size(), 1u);
  EXPECT_EQ(moved.applied[0].model, "n");
  EXPECT_EQ(moved.applied[0].affinity, false);
  EXPECT_EQ(moved.needing_restart, std::vector<std::string>{"the models' order"});
  EXPECT_EQ(moved.now_running.models[1].name, "n");  // still where it runs
  EXPECT_FALSE(moved.now_running.models[1].affinity);
  const ReloadPlan renamed = PlanReload(
      Running(), FromFile("models:\n" + Model("o") + Model("m", "    policy: chwbl\n")), {}, false);
  ASSERT_EQ(renamed.applied.size(), 1u);
  EXPECT_EQ(renamed.applied[0].model, "m");
  EXPECT_EQ(renamed.applied[0].policy, "chwbl");
  EXPECT_EQ(renamed.needing_restart,
            (std::vector<std::string>{"model n taken out", "model o added"}));
}

TEST(ConfigReload, ModelsAddedOrTakenOutAndTheGatewaysOwnSettingsAreNamed) {
  ReloadPlan plan = PlanReload(
      Running(),
      FromFile("listen: 127.0.0.1:9999\nmodels:\n" + Model("m") + Model("n") + Model("o")), {},
      false);
  EXPECT_EQ(plan.needing_restart, (std::vector<std::string>{"listen", "model o added"}));
  plan = PlanReload(
      Running(),
      FromFile("read_timeout_s: 5\npeers: [http://10.0.0.2:8080]\nmodels:\n" + Model("m") +
               "  - name: n\n    urls: [http://127.0.0.1:8000, http://127.0.0.1:8001]\n"
               "    max_num_seqs: 32\n    replica_api_key: sk-abcdefgh12345678\n"),
      {}, false);
  EXPECT_EQ(
      plan.needing_restart,
      (std::vector<std::string>{"peers, read_timeout_s", "models[1] (n): urls, replica_api_key"}));
  plan = PlanReload(Running(), FromFile("models:\n" + Model("m")), {}, false);
  EXPECT_EQ(plan.needing_restart, std::vector<std::string>{"model n taken out"});
  plan = PlanReload(
      Running(), FromFile("threads: 3\nmax_connections: 500\nmodels:\n" + Model("m") + Model("n")),
      {}, false);
  EXPECT_EQ(plan.needing_restart, std::vector<std::string>{"threads, max_connections"});
  plan = PlanReload(Running(),
                    FromFile("traffic_log: /tmp/t.jsonl\nmodels:\n" + Model("m") + Model("n")), {},
                    false);
  EXPECT_EQ(plan.needing_restart, std::vector<std::string>{"traffic_log"});
}

// session.idle_timeout_s and session.max_entries are every model's defaults: applied to the
// models, and not named as needing a restart (the next reload neither).
TEST(ConfigReload, TheSessionTablesDefaultsApplyToTheModels) {
  const std::string file =
      "session:\n  idle_timeout_s: 5\n  max_entries: 50\nmodels:\n" + Model("m");
  const ReloadPlan plan = PlanReload(FromFile("models:\n" + Model("m")), FromFile(file), {}, false);
  ASSERT_EQ(plan.applied.size(), 1u);
  EXPECT_EQ(plan.applied[0].session_idle_timeout_s, 5);
  EXPECT_EQ(plan.applied[0].max_sessions, 50u);
  EXPECT_TRUE(plan.needing_restart.empty());
  const ReloadPlan again = PlanReload(plan.now_running, FromFile(file), {}, false);
  EXPECT_TRUE(again.applied.empty());
  EXPECT_TRUE(again.needing_restart.empty());
}

TEST(ConfigReload, ACommandLineFlagStillWinsOverTheFile) {
  ConfigOverrides flags;
  flags.affinity = "on";
  GatewayConfig running = Running();
  ASSERT_EQ(ApplyConfigOverrides(flags, &running), "");
  const ReloadPlan plan =
      PlanReload(running, FromFile("models:\n" + Model("m", "    affinity: off\n") + Model("n")),
                 flags, false);
  EXPECT_TRUE(plan.applied.empty());
  EXPECT_TRUE(plan.needing_restart.empty());
  EXPECT_EQ(plan.overridden, std::vector<std::string>{"models[0].affinity (--affinity on)"});
}

// A file a start would refuse (what --check says) has none of its settings applied.
TEST(ConfigReload, AFileAStartWouldRefuseAppliesNothing) {
  ReloadPlan plan = PlanReload(
      Running(),
      FromFile("models:\n" + Model("m", "    affinity: off\n    policy: nonsense\n") + Model("n")),
      {}, false);
  EXPECT_NE(plan.error.find("models[0].policy: unknown policy 'nonsense'"), std::string::npos)
      << plan.error;
  EXPECT_TRUE(plan.applied.empty());
  EXPECT_TRUE(plan.now_running == Running());

  // A flag that replaces the bad value does not make the file right for the next start.
  ConfigOverrides policy_flag;
  policy_flag.policy = "round-robin";
  plan = PlanReload(
      Running(),
      FromFile("models:\n" + Model("m", "    affinity: off\n    policy: nonsense\n") + Model("n")),
      policy_flag, false);
  EXPECT_NE(plan.error.find("unknown policy 'nonsense'"), std::string::npos) << plan.error;
  EXPECT_TRUE(plan.applied.empty());

  // The command line's flags no longer fit the file: --dp is for a file with one model.
  ConfigOverrides flags;
  flags.data_parallel_size = 2;
  plan =
      PlanReload(Running(), FromFile("models:\n" + Model("m", "    affinity: off\n") + Model("n")),
                 flags, false);
  EXPECT_FALSE(plan.error.empty());
  EXPECT_TRUE(plan.applied.empty());
}

TEST(ConfigReload, TheDemosModelIsNotTheFiles) {
  const ReloadPlan plan = PlanReload(
      Running(), FromFile("models:\n" + Model("m", "    affinity: off\n")), {}, /*demo=*/true);
  EXPECT_TRUE(plan.applied.empty());
  EXPECT_TRUE(plan.needing_restart.empty());
}

// The demo's model is the demo's own, but the file's session settings reach it as they reach any
// model (they were left out).
TEST(ConfigReload, TheDemosModelTakesTheFilesSessionSettings) {
  const ReloadPlan plan =
      PlanReload(Running(), FromFile("session:\n  idle_timeout_s: 120\n  max_entries: 50\n"), {},
                 /*demo=*/true);
  ASSERT_TRUE(plan.error.empty()) << plan.error;
  ASSERT_EQ(plan.applied.size(), 2u);
  for (const ModelSettingsChange& change : plan.applied) {
    EXPECT_EQ(change.session_idle_timeout_s, 120);
    EXPECT_EQ(change.max_sessions, 50u);
    EXPECT_FALSE(change.affinity || change.policy);
  }
  EXPECT_TRUE(plan.needing_restart.empty());
  EXPECT_TRUE(PlanReload(plan.now_running,
                         FromFile("session:\n  idle_timeout_s: 120\n  "
                                  "max_entries: 50\n"),
                         {}, true)
                  .applied.empty());
  // Taken out of the file: the demo's own again (600 s of simulated time), as at a start.
  GatewayConfig demo = plan.now_running;
  demo.demo_idle_timeout_s = 60;
  const ReloadPlan taken_out = PlanReload(demo, FromFile("listen: 127.0.0.1:8080\n"), {}, true);
  ASSERT_TRUE(taken_out.error.empty()) << taken_out.error;
  ASSERT_EQ(taken_out.applied.size(), 2u);
  EXPECT_EQ(taken_out.applied[0].session_idle_timeout_s, 60);
  EXPECT_EQ(taken_out.applied[0].max_sessions, ModelConfig{}.max_sessions);
  // Written out, the default's value is the file's, not the demo's.
  const ReloadPlan written =
      PlanReload(taken_out.now_running, FromFile("session:\n  idle_timeout_s: 600\n"), {}, true);
  ASSERT_EQ(written.applied.size(), 2u);
  EXPECT_EQ(written.applied[0].session_idle_timeout_s, 600);
}

TEST(ConfigReload, TheClientKeysAreLeftToTheirOwnReload) {
  const ReloadPlan plan = PlanReload(
      Running(), FromFile("api_keys: [secret]\nmodels:\n" + Model("m") + Model("n")), {}, false);
  EXPECT_TRUE(plan.needing_restart.empty());
}

}  // namespace
}  // namespace warden
