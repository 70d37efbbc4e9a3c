// Calibration: the lab, with the default profile and the seed's workload, against the seed's
// published table (tests/fixtures/seed-results.csv). Deterministic: a full run, in about a second.
#include "lab/lab.h"

#include <gtest/gtest.h>

#include <map>

#include "core/routing/policy_factory.h"

namespace warden {
namespace {

struct Pair {
  StageResult off, on;
};

std::map<int, Pair> RunSeedExperiment(const std::string& off_policy) {
  LabOptions o;
  o.policies = {off_policy, "warden-seed"};
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  EXPECT_TRUE(RunLab(o, &results, &error)) << error;
  std::map<int, Pair> by_stage;
  for (const StageResult& r : results)
    (r.variant == off_policy ? by_stage[r.sessions].off : by_stage[r.sessions].on) = r;
  return by_stage;
}

// The seed's table, off -> on: hits (%) and whether each comparison goes up.
struct SeedStage {
  int sessions;
  double off_hits, on_hits;
};
constexpr SeedStage kSeed[] = {
    {4, 56.2, 86.4}, {8, 44.3, 86.1}, {16, 33.2, 48.6}, {24, 32.8, 37.9}, {32, 31.6, 31.6}};

// vLLM 0.26's balancer as the seed ran it (a dense model, so round-robin in each of four API
// servers, a connection per session, picking when the request is in) against the seed's rule.
TEST(LabCalibration, VllmDpAgainstTheSeedsRuleGoesTheSeedsWay) {
  const auto stages = RunSeedExperiment("vllm-dp");
  ASSERT_EQ(stages.size(), 5u);
  for (const SeedStage& seed : kSeed) {
    const Pair& p = stages.at(seed.sessions);
    SCOPED_TRACE(seed.sessions);
    // TTFB p95: better with affinity at every stage, as in the seed.
    EXPECT_LT(p.on.ttfb_p95_s, p.off.ttfb_p95_s);
    // Hit rate: higher with affinity (the seed's 32-session cell is a tie: not worse by a point).
    if (seed.on_hits > seed.off_hits) {
      EXPECT_GT(p.on.prefix_hit_pct, p.off.prefix_hit_pct);
    } else {
      EXPECT_GT(p.on.prefix_hit_pct, p.off.prefix_hit_pct - 1.0);
    }
    // Hit rates within 10 points of the seed's: all cells but 16 sessions with affinity (our
    // model keeps more of the cache there: 71 % against the seed's 49 %; see docs/policies.md).
    EXPECT_NEAR(p.off.prefix_hit_pct, seed.off_hits, 10);
    if (seed.sessions != 16) {
      EXPECT_NEAR(p.on.prefix_hit_pct, seed.on_hits, 10);
    }
    if (seed.sessions <= 16) {  // slack: affinity wins on the median and on output
      EXPECT_LT(p.on.ttfb_p50_s, p.off.ttfb_p50_s);
      EXPECT_GT(p.on.output_tokens_per_min, p.off.output_tokens_per_min);
    } else {  // overload: the median gets worse with affinity, the seed's open problem
      EXPECT_GT(p.on.ttfb_p50_s, p.off.ttfb_p50_s);
      // Not reproduced: the seed's +12-24 % output with affinity here (ours: +1 % and -3 %).
      EXPECT_NEAR(p.on.output_tokens_per_min / p.off.output_tokens_per_min, 1.0, 0.06);
    }
  }
  // The seed's "off" at 4 sessions: most turns land where their history is not (p50 2.05 s),
  // and fewer replicas are busy than sessions run (2.71 of 4: load-blind placement).
  EXPECT_GT(stages.at(4).off.ttfb_p50_s, 1.5);
  EXPECT_LT(stages.at(4).off.stayed_on_replica_pct, 30);
  EXPECT_NEAR(stages.at(4).off.replicas_busy, 2.71, 0.3);
  EXPECT_NEAR(stages.at(8).off.replicas_busy, 3.74, 0.3);
}

// vLLM's balancer picks in its API server, after the network: by then the replica a turn just
// left has its counts back down (the engine's, 100 ms fresh), so with slack the next turn goes
// back there. Picked when the client sends (as the lab once did), the old counts sent it away
// (12 % stayed).
TEST(LabCalibration, VllmsBalancerPicksWhenTheRequestIsIn) {
  LabOptions o;
  o.policies = {"vllm-dp-fresh"};
  o.stages = {4};
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  EXPECT_GT(results[0].stayed_on_replica_pct, 80);
  EXPECT_LT(results[0].ttfb_p50_s, 0.5);
}

// A three-minute stage at 32 sessions ends about four turns a session, and which turns fall in
// it depends on the stages before: there vLLM's balancer can end more of the small early turns
// and deliver more output than the project's policy. In fifteen-minute stages (steady state) the
// project's policy delivers at least as much at every stage, with a shorter tail
// (docs/policies.md, "Why vllm-dp gets more output at 32 sessions in three minutes").
TEST(LabCalibration, InSteadyStateTheProjectsPolicyDeliversAtLeastTheBalancersOutput) {
  LabOptions o;
  o.policies = {"vllm-dp", "warden"};
  o.stage_seconds = 900;
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  std::map<int, Pair> stages;
  for (const StageResult& r : results)
    (r.variant == "vllm-dp" ? stages[r.sessions].off : stages[r.sessions].on) = r;
  ASSERT_EQ(stages.size(), 5u);
  for (const auto& [sessions, p] : stages) {
    SCOPED_TRACE(sessions);
    EXPECT_GT(p.on.output_tokens_per_min, p.off.output_tokens_per_min);
    EXPECT_LT(p.on.ttfb_p95_s, p.off.ttfb_p95_s);
  }
}

TEST(LabCalibration, RunsAreDeterministic) {
  LabOptions o;
  o.policies = {"warden-seed"};
  o.stages = {8};
  o.stage_seconds = 60;
  o.progress = false;
  std::vector<StageResult> a, b;
  std::string error;
  ASSERT_TRUE(RunLab(o, &a, &error));
  ASSERT_TRUE(RunLab(o, &b, &error));
  EXPECT_EQ(a[0].output_tokens_per_min, b[0].output_tokens_per_min);
  EXPECT_EQ(a[0].ttfb_p50_s, b[0].ttfb_p50_s);
  EXPECT_EQ(a[0].prefix_hit_pct, b[0].prefix_hit_pct);
}

// The bound takes each request where its policy sent it, with caches that never evict, counted in
// the stage the engine admits it in: no policy passes it, whatever its placement (session-hash
// puts three of four sessions on one replica, and so shares their system prompt more).
TEST(LabBound, NoPolicysHitRatePassesItsUpperBound) {
  LabOptions o;
  o.policies = {"session-hash", "chwbl", "llm-d", "round-robin"};
  o.stages = {4, 8, 16};
  o.stage_seconds = 60;
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  for (const StageResult& r : results)
    EXPECT_LE(r.prefix_hit_pct, r.upper_bound_hit_pct) << r.variant << " " << r.sessions;
}

// Any placement's bound is every token computed once on some replica: no placement's own bound
// passes it. With four sessions on four replicas the shared system prompt is computed on each
// replica a sticky rule uses, once anywhere in the other's: the gap is its three extra copies.
TEST(LabBound, NoPlacementsBoundPassesAnyPlacements) {
  LabOptions o;
  o.policies = {"session-hash", "vllm-dp", "warden-seed"};
  o.stages = {4, 16};
  o.stage_seconds = 60;
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  for (const StageResult& r : results) {
    EXPECT_LE(r.upper_bound_hit_pct, r.any_placement_bound_hit_pct + 1e-9)
        << r.variant << " " << r.sessions;
    if (r.variant == "vllm-dp") {
      // vLLM 0.26's balancer spreads each conversation over every replica: far below any
      // placement's.
      EXPECT_LT(r.upper_bound_hit_pct, r.any_placement_bound_hit_pct - 20) << r.sessions;
    }
  }
}

// With --warm the next policy starts on the caches the one before filled: so does its bound.
TEST(LabBound, AWarmRunsBoundKeepsWhatTheRunBeforeCached) {
  LabOptions o;
  o.policies = {"vllm-dp", "warden-seed"};
  o.stages = {4};
  o.stage_seconds = 60;
  o.warm = true;
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  ASSERT_EQ(results.size(), 2u);
  for (const StageResult& r : results)
    EXPECT_LE(r.prefix_hit_pct, r.upper_bound_hit_pct) << r.variant;
}

TEST(LabCalibration, TheSeedsRuleReachesTheUpperBoundWhileTheWorkingSetFits) {
  LabOptions o;
  o.policies = {"warden-seed", "warden"};
  o.stages = {4, 8};
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error));
  for (const StageResult& r : results) {
    EXPECT_NEAR(r.prefix_hit_pct, r.upper_bound_hit_pct, 3) << r.variant << " " << r.sessions;
    // And of any placement's: the placement loses only the shared system prompt's other copies.
    EXPECT_NEAR(r.prefix_hit_pct, r.any_placement_bound_hit_pct, 3)
        << r.variant << " " << r.sessions;
  }
}

// In overload, letting the conversation most recently active on a replica in first (admission
// at the gateway) keeps histories cached: more output and a lower median than the seed's rule with
// the engines' own first-come first-served queues, paid for in the tail (docs/policies.md).
// The seed's rule, then `policy`, at 16 then 24 sessions (24 reached from 16, as in the seed's
// run, not from an empty start): four stage results, and every request of them.
void RunSeedRuleAnd(const std::string& policy, std::vector<StageResult>* r,
                    std::vector<LabRequest>* requests) {
  LabOptions o;
  o.policies = {"warden-seed", policy};
  o.stages = {16, 24};
  o.progress = false;
  std::string error;
  ASSERT_TRUE(RunLab(o, r, &error, requests)) << error;
  ASSERT_EQ(r->size(), 4u);
}

TEST(LabAdmission, RecentFirstTradesTheTailForOutputAndMedianInOverload) {
  std::vector<StageResult> r;
  std::vector<LabRequest> requests;
  ASSERT_NO_FATAL_FAILURE(RunSeedRuleAnd("warden-seed+recent:4", &r, &requests));
  const StageResult& engine_queues = r[1];
  const StageResult& recent_first = r[3];
  ASSERT_EQ(recent_first.sessions, 24);
  EXPECT_GT(recent_first.prefix_hit_pct, engine_queues.prefix_hit_pct + 10);
  EXPECT_GT(recent_first.output_tokens_per_min, engine_queues.output_tokens_per_min * 1.05);
  EXPECT_LT(recent_first.ttfb_p50_s, engine_queues.ttfb_p50_s * 0.9);
  EXPECT_GT(recent_first.ttfb_p95_s, engine_queues.ttfb_p95_s);

  // Where the tail comes from (requests.csv): new conversations wait at the gateway while warm
  // turns go first; without admission nothing waits there but the network.
  struct Held {
    double first = 0, later = 0;
    int firsts = 0, laters = 0, records = 0;
  };
  std::map<std::string, Held> held;
  for (const LabRequest& q : requests) {
    if (q.sessions != 24) continue;
    Held& h = held[q.variant];
    ++h.records;
    ASSERT_GE(q.held_s, 0);
    ASSERT_GE(q.ttft_s, q.held_s);
    ASSERT_LE(q.cached_tokens, q.prompt_tokens);
    (q.turn == 0 ? h.first : h.later) += q.held_s;
    ++(q.turn == 0 ? h.firsts : h.laters);
  }
  EXPECT_EQ(held["warden-seed"].records, engine_queues.turns);
  EXPECT_EQ(held["warden-seed+recent:4"].records, recent_first.turns);
  const Held& none = held["warden-seed"];
  EXPECT_LT(none.first / none.firsts + none.later / none.laters, 2.0);
  const Held& recent = held["warden-seed+recent:4"];
  EXPECT_GT(recent.first / recent.firsts, 2 * recent.later / recent.laters);
  EXPECT_NE(LabRequestsCsv(requests).find("variant,sessions,session,subagent,turn,replica,route"),
            std::string::npos);
}

// reserve:N keeps a conversation's room through the moment its client sends the next turn: in
// overload its history is a hit, and the turns that start a run of N wait for room. More output
// and a far lower median than the engine's queues, a longer tail (docs/policies.md).
TEST(LabAdmission, ReservationsTradeTheTailForOutputAndMedianInOverload) {
  std::vector<StageResult> r;
  std::vector<LabRequest> requests;
  ASSERT_NO_FATAL_FAILURE(RunSeedRuleAnd("warden-seed+reserve:3", &r, &requests));
  const StageResult& engine_queues = r[1];
  const StageResult& reserved = r[3];
  ASSERT_EQ(reserved.sessions, 24);
  EXPECT_GT(reserved.prefix_hit_pct, engine_queues.prefix_hit_pct + 25);
  EXPECT_GT(reserved.output_tokens_per_min, engine_queues.output_tokens_per_min * 1.2);
  EXPECT_LT(reserved.ttfb_p50_s, engine_queues.ttfb_p50_s * 0.5);
  EXPECT_GT(reserved.ttfb_p95_s, engine_queues.ttfb_p95_s);
  // The waits fall on the turns that start a run (turns 0 and 3); turns 1, 2, 4, 5 go straight in.
  double run_start = 0, in_run = 0;
  int run_starts = 0, in_runs = 0;
  for (const LabRequest& q : requests) {
    if (q.sessions != 24 || q.variant != "warden-seed+reserve:3") continue;
    const bool starts = q.turn % 3 == 0;
    (starts ? run_start : in_run) += q.held_s;
    ++(starts ? run_starts : in_runs);
  }
  ASSERT_GT(run_starts, 0);
  ASSERT_GT(in_runs, 0);
  EXPECT_GT(run_start / run_starts, 10.0);
  EXPECT_LT(in_run / in_runs, 0.5);
}

// Subagents are conversations of their own (their own affinity key and system prompt): kept on
// their replica, they reach the upper bound as the main conversations do while the cache has room.
TEST(LabSubagents, EachSubagentKeepsItsOwnHome) {
  LabOptions o;
  o.policies = {"warden-seed"};
  o.stages = {8};
  o.subagents = 2;
  o.progress = false;
  std::vector<StageResult> with, without;
  std::string error;
  ASSERT_TRUE(RunLab(o, &with, &error)) << error;
  o.subagents = 0;
  ASSERT_TRUE(RunLab(o, &without, &error)) << error;
  EXPECT_EQ(with[0].stayed_on_replica_pct, 100);
  EXPECT_NEAR(with[0].prefix_hit_pct, with[0].upper_bound_hit_pct, 3);
  // Subagent requests are short: more of them, more output per minute than without.
  EXPECT_GT(with[0].output_tokens_per_min, without[0].output_tokens_per_min);
  o.subagents = 6;  // the sessions have 6 turns: at most 5 subagents
  EXPECT_NE(ValidateLabOptions(o).find("--subagents"), std::string::npos);
}

// An agent's tools run between a reply and its next request (--tool-seconds): each session's
// next turn leaves when its previous one's last token came plus the pause its script draws, and
// the pauses leave the replicas idle more of the time.
TEST(LabToolPauses, EachTurnWaitsForItsToolsPause) {
  LabOptions o;
  o.policies = {"warden-seed"};
  o.stages = {4};
  o.stage_seconds = 300;
  o.workload.tool_seconds = 5;
  o.progress = false;
  std::vector<StageResult> paused, at_once;
  std::vector<LabRequest> requests;
  std::string error;
  ASSERT_TRUE(RunLab(o, &paused, &error, &requests)) << error;
  std::map<uint64_t, const LabRequest*> previous;  // by session
  int pairs = 0;
  double pauses = 0;
  for (const LabRequest& r : requests) {
    const LabRequest* before = previous[r.session];
    previous[r.session] = &r;
    if (!before || r.turn == 0) continue;
    ASSERT_EQ(r.turn, before->turn + 1);
    const double pause = SessionScript(o.workload, 0, r.session).ToolSecondsBefore(r.turn);
    EXPECT_NEAR(r.sent_s, before->ended_s + pause, 1e-6) << r.session << " " << r.turn;
    pauses += pause;
    ++pairs;
  }
  ASSERT_GT(pairs, 20);
  EXPECT_NEAR(pauses / pairs, 5.0, 1.5);
  o.workload.tool_seconds = 0;
  ASSERT_TRUE(RunLab(o, &at_once, &error)) << error;
  EXPECT_LT(paused[0].replicas_busy, at_once[0].replicas_busy);
  EXPECT_LT(paused[0].output_tokens_per_min, at_once[0].output_tokens_per_min);
}

// warden:exact, the project's policy told what each engine caches, is the lab's alone: the
// gateway, which cannot see into the engines, does not take the name.
TEST(LabOptions, TheExactCachePolicyIsTheLabsAlone) {
  LabOptions o;
  o.policies = {"warden:exact", "warden"};
  o.stages = {4};
  o.stage_seconds = 60;
  o.progress = false;
  EXPECT_EQ(ValidateLabOptions(o), "");
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].variant, "warden:exact");
  // While the working set fits, knowing the caches changes nothing.
  EXPECT_EQ(results[0].prefix_hit_pct, results[1].prefix_hit_pct);
  EXPECT_EQ(MakePolicy("warden:exact"), nullptr);
}

// dynamo:events is Dynamo's router on the engines' KV events, as it runs by default: the lab's
// alone too. While every history fits it places as the approximate index does; with tools
// pausing sessions in overload the index still counts histories the engines evicted, the events
// do not, and conversations leave their replica more often.
TEST(LabOptions, DynamoOnKvEventsIsTheLabsAloneAndSeesEvictions) {
  LabOptions o;
  o.policies = {"dynamo:events", "dynamo"};
  o.stages = {4, 24};
  o.workload.tool_seconds = 5;
  o.progress = false;
  EXPECT_EQ(ValidateLabOptions(o), "");
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].variant, "dynamo:events");
  EXPECT_EQ(results[0].stayed_on_replica_pct, results[2].stayed_on_replica_pct);
  EXPECT_LT(results[1].stayed_on_replica_pct, results[3].stayed_on_replica_pct - 5);
  EXPECT_EQ(MakePolicy("dynamo:events"), nullptr);
}

TEST(LabOptions, RejectsUnknownPoliciesAndBadStages) {
  LabOptions o;
  o.policies = {"magic"};
  EXPECT_NE(ValidateLabOptions(o).find("unknown policy 'magic'"), std::string::npos);
  o.policies = {"vllm-dp", "warden-seed", "warden-seed"};  // rows no one could tell apart
  EXPECT_NE(ValidateLabOptions(o).find("'warden-seed' is named twice"), std::string::npos);
  o = {};
  o.stages = {0};
  EXPECT_NE(ValidateLabOptions(o).find("--stages"), std::string::npos);
  o = {};
  o.policies = {"warden-seed+lifo"};
  EXPECT_NE(ValidateLabOptions(o).find("expected off, fifo, recent:K"), std::string::npos);
  o = {};
  o.admission = "lifo";  // the flag's own error, not the first policy's
  EXPECT_TRUE(ValidateLabOptions(o).starts_with("--admission")) << ValidateLabOptions(o);
  // Values that would be ignored, or would take the machine's memory, are refused.
  o = {};
  o.kv_tokens = -5;
  EXPECT_NE(ValidateLabOptions(o).find("--kv-tokens"), std::string::npos);
  o.kv_tokens = 2'000'000'000;
  EXPECT_NE(ValidateLabOptions(o).find("--kv-tokens"), std::string::npos);
  o = {};
  o.max_num_seqs = -5;
  EXPECT_NE(ValidateLabOptions(o).find("--max-num-seqs"), std::string::npos);
  o = {};
  o.api_latency_s = -5;
  EXPECT_NE(ValidateLabOptions(o).find("--api-latency"), std::string::npos);
  o = {};
  o.stages.assign(1001, 4);
  EXPECT_NE(ValidateLabOptions(o).find("at most 1000 stages"), std::string::npos);
  o = {};
  o.stages = {10001};  // 1.3 GB per 10,000 sessions
  EXPECT_EQ(ValidateLabOptions(o), "--stages: 10001 must be 1 to 10000 sessions");
  o = {};
  o.workload.first_message_tokens = 2'000'000'000;
  EXPECT_NE(ValidateLabOptions(o).find("--first-tokens"), std::string::npos);
}

// A stage after a smaller one runs its full count again: the sessions the smaller one let end
// are started anew, as the bench does.
TEST(LabStages, AStageAfterASmallerOneRunsAllItsSessions) {
  LabOptions o;
  o.policies = {"warden-seed"};
  o.stages = {4, 2, 4};
  o.stage_seconds = 120;
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  ASSERT_EQ(results.size(), 3u);
  EXPECT_GT(results[2].replicas_busy, 3.5);  // four sessions on four replicas, as in the first
  EXPECT_GT(results[2].output_tokens_per_min, 0.8 * results[0].output_tokens_per_min);
  // ... and a smaller stage runs its own count, the others stopped after their turn under way
  // (found by review: they went on to the end of their sessions, and the two-session stage
  // measured four replicas busy).
  EXPECT_LT(results[1].replicas_busy, 2.3);
  EXPECT_LT(results[1].output_tokens_per_min, 0.65 * results[0].output_tokens_per_min);
}

// A policy run with --admission carries it in its rows' name, as one written NAME+ADMISSION does
// (found by review: a run with --admission reserve:3 read as one without).
TEST(LabOptions, TheAdmissionARunHadIsInItsRowsName) {
  LabOptions o;
  o.policies = {"warden-seed", "vllm-dp+fifo"};
  o.admission = "reserve:3";
  o.stages = {4};
  o.stage_seconds = 30;
  o.progress = false;
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(RunLab(o, &results, &error)) << error;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].variant, "warden-seed+reserve:3");
  EXPECT_EQ(results[1].variant, "vllm-dp+fifo");
  // Two policies whose rows would carry one name are refused.
  o.policies = {"warden-seed", "warden-seed+reserve:3"};
  EXPECT_FALSE(RunLab(o, &results, &error));
  EXPECT_EQ(error,
            "--policy: 'warden-seed+reserve:3' is named twice (its rows could not be told apart)");
}

// On warm engines each policy's sessions have words of their own, as the bench's variants do: the
// second finds only the shared system prompt cached, not its own prompts, so its hit rate and
// bound are those of a cold run; and with CPU offloading its reads back are not held until the
// run before's clock (found by review: the second policy's replicas stalled for 900 s).
TEST(LabWarm, ARunOnWarmEnginesFindsNoneOfItsOwnPromptsCachedAndDoesNotStall) {
  LabOptions o;
  o.policies = {"warden-seed", "sglang-cache-aware"};
  o.stages = {4, 16};
  o.stage_seconds = 120;
  o.kv_offloading_gib = 16;
  o.progress = false;
  std::vector<StageResult> cold, warm;
  std::string error;
  ASSERT_TRUE(RunLab(o, &cold, &error)) << error;
  o.warm = true;
  ASSERT_TRUE(RunLab(o, &warm, &error)) << error;
  ASSERT_EQ(warm.size(), 4u);
  ASSERT_EQ(cold.size(), 4u);
  // (The shared system prompt, cached on every replica already, is worth 2 points at 4
  // sessions; its own prompts cached gave it 8 points more.)
  for (size_t i = 2; i < 4; ++i) {  // the second policy's stages
    SCOPED_TRACE(warm[i].sessions);
    EXPECT_LT(warm[i].prefix_hit_pct, cold[i].prefix_hit_pct + 3);
    EXPECT_LT(warm[i].upper_bound_hit_pct, cold[i].upper_bound_hit_pct + 3);
    EXPECT_GT(warm[i].output_tokens_per_min, 0.9 * cold[i].output_tokens_per_min);
  }
}

// With vLLM's CPU offloading on small replicas in overload, reads back from host memory never
// stall a replica: every replica stays busy and the output is at least what it is without
// offloading (found by review: two reads back could each hold part of the cache and wait for
// ever for the rest, and a replica stopped).
TEST(LabOffloading, ReadsBackNeverStallAReplica) {
  LabOptions o;
  o.profile = "tiny";
  o.policies = {"warden-seed", "vllm-dp"};
  o.stages = {8, 16, 32};
  o.stage_seconds = 120;
  o.workload.system_tokens = 100;
  o.workload.first_message_tokens = 250;
  o.workload.first_message_jitter = 20;
  o.workload.turn_tokens = 60;
  o.workload.turn_jitter = 10;
  o.workload.turns = 4;
  o.workload.max_output_tokens = 32;
  o.reply_tokens = 32;
  o.progress = false;
  std::vector<StageResult> without, with;
  std::string error;
  ASSERT_TRUE(RunLab(o, &without, &error)) << error;
  for (double gib : {0.01, 0.0002}) {  // room for many prompts; for a few blocks only
    o.kv_offloading_gib = gib;
    with.clear();
    ASSERT_TRUE(RunLab(o, &with, &error)) << error;
    ASSERT_EQ(with.size(), without.size());
    for (size_t i = 0; i < with.size(); ++i) {
      SCOPED_TRACE(with[i].variant + " " + std::to_string(with[i].sessions) + " " +
                   std::to_string(gib));
      EXPECT_GT(with[i].replicas_busy, 3.8);
      EXPECT_GT(with[i].output_tokens_per_min, 0.97 * without[i].output_tokens_per_min);
    }
  }
}

}  // namespace
}  // namespace warden
