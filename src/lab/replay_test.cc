#include "lab/replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace warden {
namespace {

TraceRequest Turn(double at_ms, std::string session, std::vector<uint64_t> ids, int input,
                  int output = 50, double delay_ms = -1) {
  TraceRequest r;
  r.timestamp_ms = at_ms;
  r.session_id = std::move(session);
  r.hash_ids = std::move(ids);
  r.input_length = input;
  r.output_length = output;
  r.delay_ms = delay_ms;
  return r;
}

struct Replayed {
  std::vector<StageResult> results;
  std::vector<LabRequest> requests;  // in the order they ended
  ReplayNotes notes;
  const LabRequest& ByTurn(int turn) const {
    return *std::find_if(requests.begin(), requests.end(),
                         [&](const LabRequest& r) { return r.turn == turn; });
  }
};

Replayed Replay(const std::vector<TraceRequest>& trace, std::vector<std::string> policies,
                ReplayOptions r = {}, int replicas = 4) {
  LabOptions o;
  o.policies = std::move(policies);
  o.replicas = replicas;
  o.progress = false;
  o.latency_jitter = 0;
  Replayed out;
  std::string error;
  EXPECT_TRUE(RunReplay(o, r, trace, &out.results, &out.notes, &error, &out.requests)) << error;
  return out;
}

// Three sessions sharing a system prompt (ids 0-3), each a turn every few seconds that resends
// the last with more.
std::vector<TraceRequest> ThreeSessions() {
  std::vector<TraceRequest> trace;
  for (int s = 0; s < 3; ++s) {
    std::vector<uint64_t> ids = {0, 1, 2, 3};
    for (int turn = 0; turn < 4; ++turn) {
      ids.push_back(100 + s * 10 + turn);
      trace.push_back(Turn(s * 500 + turn * 6000, "s" + std::to_string(s), ids,
                           static_cast<int>(ids.size()) * 512, 50, turn == 0 ? -1 : 2000));
    }
  }
  return trace;
}

TEST(Replay, ASessionStaysOnOneReplicaAndReadsItsHistoryFromTheCache) {
  const Replayed run = Replay(ThreeSessions(), {"warden-seed"});
  ASSERT_EQ(run.requests.size(), 12u);
  EXPECT_EQ(run.notes.requests, 12);
  EXPECT_EQ(run.notes.sessions, 3);
  std::map<uint64_t, std::vector<const LabRequest*>> by_session;
  for (const LabRequest& r : run.requests) by_session[r.session].push_back(&r);
  ASSERT_EQ(by_session.size(), 3u);
  for (auto& [session, turns] : by_session) {
    std::sort(turns.begin(), turns.end(),
              [](const LabRequest* a, const LabRequest* b) { return a->turn < b->turn; });
    ASSERT_EQ(turns.size(), 4u);
    for (size_t t = 0; t < turns.size(); ++t) {
      EXPECT_EQ(turns[t]->replica, turns[0]->replica) << "session " << session << " turn " << t;
      EXPECT_EQ(turns[t]->prompt_tokens, static_cast<int>(5 + t) * 512);
      EXPECT_EQ(turns[t]->output_tokens, 50);
      // A later turn finds the turn before it whole, and the reply it got (but a part block).
      if (t == 0) continue;
      EXPECT_GE(turns[t]->cached_tokens, turns[t - 1]->prompt_tokens + 50 - 16);
      EXPECT_LT(turns[t]->cached_tokens, turns[t]->prompt_tokens);
    }
  }
  // Each session on its own replica (new conversations go to the least loaded).
  EXPECT_NE(by_session[0][0]->replica, by_session[1][0]->replica);
  EXPECT_EQ(run.results.size(), 1u);
  EXPECT_EQ(run.results[0].variant, "warden-seed");
  EXPECT_DOUBLE_EQ(run.results[0].stayed_on_replica_pct, 100);
}

TEST(Replay, PromptsShareExactlyThePrefixTheirIdsShare) {
  // One replica: the second session's first turn finds the shared system prompt (ids 0-3) only.
  const std::vector<TraceRequest> trace = {Turn(0, "a", {0, 1, 2, 3, 10}, 2560),
                                           Turn(5000, "b", {0, 1, 2, 3, 20}, 2560),
                                           Turn(10000, "c", {9, 1, 2, 3, 30}, 2560)};
  const Replayed run = Replay(trace, {"round-robin"}, {}, 1);
  ASSERT_EQ(run.requests.size(), 3u);
  EXPECT_EQ(run.requests[0].cached_tokens, 0);
  EXPECT_EQ(run.requests[1].cached_tokens, 4 * 512);
  EXPECT_EQ(run.requests[2].cached_tokens, 0);  // the same ids after another first block
}

TEST(Replay, ATurnThatDoesNotGoOnFromTheOneBeforeFindsOnlyTheIdsTheyShare) {
  // The second turn keeps the first's four leading ids and drops the rest (a compacted history):
  // it finds those four blocks, not the turn before it whole.
  const std::vector<TraceRequest> trace = {Turn(0, "a", {0, 1, 2, 3, 10, 11}, 3072),
                                           Turn(5000, "a", {0, 1, 2, 3, 50}, 2560, 50, 1000)};
  const Replayed run = Replay(trace, {"warden-seed"});
  ASSERT_EQ(run.requests.size(), 2u);
  EXPECT_EQ(run.ByTurn(1).replica, run.ByTurn(0).replica);
  EXPECT_EQ(run.ByTurn(1).cached_tokens, 4 * 512);
}

TEST(Replay, ALaterTurnWaitsForTheOneBeforeItThenItsDelay) {
  // Recorded one second apart, but the first takes longer than that to answer here: in closed
  // loop the second goes 2 s after the first ended; in open loop at its timestamp.
  const std::vector<TraceRequest> trace = {Turn(0, "a", {1, 2}, 1024, 200),
                                           Turn(1000, "a", {1, 2, 3}, 1536, 50, 2000)};
  const Replayed closed = Replay(trace, {"warden-seed"});
  ASSERT_EQ(closed.requests.size(), 2u);
  const LabRequest& first = closed.ByTurn(0);
  const LabRequest& second = closed.ByTurn(1);
  EXPECT_GT(first.ttft_s, 0);
  EXPECT_GT(second.sent_s, first.sent_s + first.ttft_s + 2.0);
  ReplayOptions open;
  open.closed_loop = false;
  const Replayed opened = Replay(trace, {"warden-seed"}, open);
  ASSERT_EQ(opened.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(opened.ByTurn(0).sent_s, 0);
  EXPECT_DOUBLE_EQ(opened.ByTurn(1).sent_s, 1.0);
  ReplayOptions fast = open;
  fast.speed = 4;
  EXPECT_DOUBLE_EQ(Replay(trace, {"warden-seed"}, fast).ByTurn(1).sent_s, 0.25);
}

TEST(Replay, ATurnSentWhileTheOneBeforeRanKeepsItsOffset) {
  // No delay: the client sent it before the first answer came (a parallel request).
  const std::vector<TraceRequest> trace = {Turn(0, "a", {1, 2}, 1024, 300),
                                           Turn(300, "a", {1, 2, 3}, 1536, 50)};
  const Replayed run = Replay(trace, {"warden-seed"});
  ASSERT_EQ(run.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(run.ByTurn(1).sent_s, 0.3);
}

TEST(Replay, RequestsWithoutASessionAreBalancedAndTooLongOnesLeftOut) {
  const std::vector<TraceRequest> trace = {Turn(0, "", {1}, 512), Turn(10, "", {2}, 512),
                                           Turn(20, "", {3}, 10'000'000)};
  const Replayed run = Replay(trace, {"warden-seed"});
  EXPECT_EQ(run.notes.too_long, 1);
  EXPECT_EQ(run.notes.requests, 2);
  EXPECT_EQ(run.notes.sessions, 2);
  ASSERT_EQ(run.requests.size(), 2u);
  for (const LabRequest& r : run.requests) EXPECT_EQ(r.route, "balanced");
}

TEST(Replay, EveryPolicyReplaysTheSameRequests) {
  const Replayed run = Replay(ThreeSessions(), {"vllm-dp", "round-robin", "warden-seed"});
  ASSERT_EQ(run.results.size(), 3u);
  ASSERT_EQ(run.requests.size(), 36u);
  for (const StageResult& r : run.results) {
    long prompt = 0;
    for (const LabRequest& q : run.requests)
      if (q.variant == r.variant) prompt += q.prompt_tokens;
    EXPECT_EQ(prompt, 3 * (5 + 6 + 7 + 8) * 512) << r.variant;
    EXPECT_EQ(r.sessions, 3);
  }
  // Affinity reads more from the cache than round-robin on the same trace.
  EXPECT_GT(run.results[2].prefix_hit_pct, run.results[1].prefix_hit_pct);
}

TEST(Replay, ASessionsTurnsWithoutTimestampsFollowItsFirstByTheirDelays) {
  // aiperf's multi-turn lines: a timestamp on a session's first turn only.
  std::vector<TraceRequest> trace = {
      Turn(5000, "a", {1, 2}, 1024), Turn(-1, "a", {1, 2, 3}, 1536, 50, 1000),
      Turn(-1, "a", {1, 2, 3, 4}, 2048, 50, 1000), Turn(6000, "b", {9}, 512)};
  const Replayed run = Replay(trace, {"warden-seed"});
  ASSERT_EQ(run.requests.size(), 4u);
  const auto of_a = [&](int turn) {
    return *std::find_if(run.requests.begin(), run.requests.end(), [&](const LabRequest& r) {
      return r.turn == turn && r.prompt_tokens == 1024 + 512 * turn;
    });
  };
  EXPECT_DOUBLE_EQ(of_a(0).sent_s, 0);  // the trace begins with a's first turn
  EXPECT_GT(of_a(1).sent_s, of_a(0).sent_s + of_a(0).ttft_s + 1.0);
  EXPECT_GT(of_a(2).sent_s, of_a(1).sent_s + of_a(1).ttft_s + 1.0);
  ReplayOptions open;
  open.closed_loop = false;  // at the first turn's time plus the delays
  const Replayed opened = Replay(trace, {"warden-seed"}, open);
  std::vector<double> sent;
  for (const LabRequest& r : opened.requests) sent.push_back(r.sent_s);
  std::sort(sent.begin(), sent.end());
  EXPECT_EQ(sent, (std::vector<double>{0, 1, 1, 2}));
}

TEST(Replay, IdsThatNameOnlyAPromptsFirstBlocksAreNotStretched) {
  // Mooncake's ids may cover only a prompt's cached prefix: 5 blocks of a 10,000-token prompt.
  const std::vector<TraceRequest> trace = {Turn(0, "", {1, 2, 3, 4, 5}, 10000),
                                           Turn(60000, "", {1, 2, 3, 4, 5}, 10000)};
  const Replayed run = Replay(trace, {"round-robin"}, {}, 1);
  ASSERT_EQ(run.requests.size(), 2u);
  EXPECT_EQ(run.notes.tokens_per_id, 512);
  EXPECT_EQ(run.requests[1].cached_tokens, 5 * 512);
}

TEST(Replay, IdsThatRunPastTheirPromptsStandForTheirShare) {
  // Ten ids for 2,560 tokens (a tokenizer taking more bytes a token than the ids reckoned): each
  // id stands for about 270 tokens, so that the shared first four hold about 1,080.
  const std::vector<TraceRequest> trace = {
      Turn(0, "", {1, 2, 3, 4, 10, 11, 12, 13, 14, 15}, 2560),
      Turn(60000, "", {1, 2, 3, 4, 20, 21, 22, 23, 24, 25}, 2560)};
  const Replayed run = Replay(trace, {"round-robin"}, {}, 1);
  ASSERT_EQ(run.requests.size(), 2u);
  EXPECT_EQ(run.notes.tokens_per_id, 269);  // 5,120 tokens over 19 ids
  EXPECT_EQ(run.requests[1].cached_tokens, 4 * 269 / 16 * 16);
}

TEST(Replay, ATraceSpanningYearsIsRefused) {
  // A Unix-time timestamp beside a relative one.
  const std::vector<TraceRequest> trace = {Turn(0, "a", {1}, 512),
                                           Turn(1733500000000, "b", {1}, 512)};
  LabOptions o;
  o.progress = false;
  std::vector<StageResult> results;
  ReplayNotes notes;
  std::string error;
  EXPECT_FALSE(RunReplay(o, {}, trace, &results, &notes, &error));
  EXPECT_NE(error.find("request 2 of the trace comes"), std::string::npos) << error;
  const std::vector<TraceRequest> waits = {Turn(0, "a", {1}, 512),
                                           Turn(-1, "a", {1, 2}, 1024, 50, 1e15)};
  EXPECT_FALSE(RunReplay(o, {}, waits, &results, &notes, &error));
  EXPECT_NE(error.find("after the turn before it"), std::string::npos) << error;
  std::vector<TraceRequest> many = {Turn(0, "a", {1}, 512)};
  for (int t = 1; t < 12; ++t) many.push_back(Turn(-1, "a", {1}, 512, 50, 9e9));
  EXPECT_FALSE(RunReplay(o, {}, many, &results, &notes, &error));
  EXPECT_NE(error.find("more than 1e+07 s"), std::string::npos) << error;
  // Each delay within the bound, the timestamps close together, but their sum past it.
  const std::vector<TraceRequest> stamped = {Turn(0, "a", {1}, 512),
                                             Turn(1000, "a", {1}, 512, 50, 9e9),
                                             Turn(2000, "a", {1}, 512, 50, 9e9)};
  EXPECT_FALSE(RunReplay(o, {}, stamped, &results, &notes, &error));
  EXPECT_NE(error.find("session a of the trace waits"), std::string::npos) << error;
}

TEST(Replay, AtAConcurrencyAConversationBeginsAsAnotherEnds) {
  // Four conversations recorded a minute apart, two turns each; two at once: the third begins
  // when one of the first two has ended, long before its recorded minute.
  std::vector<TraceRequest> trace;
  for (int s = 0; s < 4; ++s) {
    const std::string id = "s" + std::to_string(s);
    const uint64_t own = 10 * (s + 1);
    trace.push_back(Turn(s * 60000.0, id, {own}, 512, 20));
    trace.push_back(Turn(s * 60000.0 + 3000, id, {own, own + 1}, 1024, 20, 500));
  }
  ReplayOptions r;
  r.concurrency = 2;
  const Replayed run = Replay(trace, {"warden-seed"}, r);
  ASSERT_EQ(run.requests.size(), 8u);
  std::map<uint64_t, std::pair<double, double>> span;  // a session's first send, its last
  for (const LabRequest& q : run.requests) {
    auto [it, added] = span.emplace(q.session, std::make_pair(q.sent_s, q.sent_s));
    it->second.first = std::min(it->second.first, q.sent_s);
    it->second.second = std::max(it->second.second, q.sent_s);
  }
  ASSERT_EQ(span.size(), 4u);
  std::vector<double> starts;
  for (const auto& [session, times] : span) starts.push_back(times.first);
  std::sort(starts.begin(), starts.end());
  EXPECT_EQ(starts[0], 0);
  EXPECT_EQ(starts[1], 0);
  EXPECT_GT(starts[2], 0.5);  // after a whole conversation (its delay included)
  EXPECT_LT(starts[3], 30);   // nowhere near its recorded minutes
  EXPECT_EQ(run.results[0].sessions, 2);
  // Never more than two at once: each later start is at or after some conversation's last turn.
  int ended_before_third = 0;
  for (const auto& [session, times] : span)
    if (times.second < starts[2]) ++ended_before_third;
  EXPECT_GE(ended_before_third, 1);
  r.closed_loop = false;
  LabOptions o;
  std::vector<StageResult> results;
  ReplayNotes notes;
  std::string error;
  EXPECT_FALSE(RunReplay(o, r, trace, &results, &notes, &error));
  EXPECT_NE(error.find("--trace-concurrency"), std::string::npos);
}

TEST(Replay, ADelayedTurnWaitsForEveryEarlierTurnOfItsSession) {
  // A1 answers at length; A2 went while it ran; A3 came 2 s after both had ended. A3 waits for
  // A1 too, not only for A2 (the turn just before it), and goes on from A2.
  const std::vector<TraceRequest> trace = {
      Turn(0, "a", {1, 2}, 1024, 1500), Turn(300, "a", {1, 2, 3}, 1536, 20),
      Turn(60000, "a", {1, 2, 3, 4}, 2048, 20, 2000), Turn(500, "b", {9}, 512, 20)};
  const Replayed run = Replay(trace, {"warden-seed"});
  ASSERT_EQ(run.requests.size(), 4u);
  const auto of = [&](int prompt) {
    return *std::find_if(run.requests.begin(), run.requests.end(),
                         [&](const LabRequest& r) { return r.prompt_tokens == prompt; });
  };
  // A1's 1,500 tokens take tens of seconds; A3 went after them.
  EXPECT_GT(of(2048).sent_s, of(1024).sent_s + of(1024).ttft_s + 10);
  EXPECT_GE(of(2048).cached_tokens, 1536);  // A2's prompt and reply, found
  // One conversation at a time: b begins only when all of a has ended.
  ReplayOptions one;
  one.concurrency = 1;
  const Replayed serial = Replay(trace, {"warden-seed"}, one);
  double b_sent = -1, a3_sent = -1;
  for (const LabRequest& r : serial.requests) {
    if (r.prompt_tokens == 512) b_sent = r.sent_s;
    if (r.prompt_tokens == 2048) a3_sent = r.sent_s;
  }
  EXPECT_GT(b_sent, a3_sent);
}

TEST(Replay, ATurnAfterASingleIdIsAContinuationOnlyIfItHoldsIt) {
  // One id each: the ids cannot tell; 300 tokens cannot hold the 400 and a reply before them.
  const std::vector<TraceRequest> trace = {Turn(0, "a", {1}, 400, 20),
                                           Turn(5000, "a", {2}, 300, 20, 1000)};
  const Replayed run = Replay(trace, {"warden-seed"});
  ASSERT_EQ(run.requests.size(), 2u);
  EXPECT_EQ(run.ByTurn(1).cached_tokens, 0);
}

TEST(Replay, BadOptionsAndEmptyTracesAreRefused) {
  LabOptions o;
  o.progress = false;
  std::vector<StageResult> results;
  ReplayNotes notes;
  std::string error;
  EXPECT_FALSE(RunReplay(o, {}, {}, &results, &notes, &error));
  EXPECT_EQ(error, "the trace has no requests");
  ReplayOptions r;
  r.speed = 0;
  EXPECT_FALSE(RunReplay(o, r, {Turn(0, "a", {1}, 10)}, &results, &notes, &error));
  EXPECT_NE(error.find("--trace-speed"), std::string::npos);
  r = {};
  r.block_tokens = 0;
  EXPECT_FALSE(RunReplay(o, r, {Turn(0, "a", {1}, 10)}, &results, &notes, &error));
  EXPECT_NE(error.find("--trace-block"), std::string::npos);
  // Windows under a second, or more than 100,000 of them (found by review: a millisecond window
  // wrote 600,000 rows, a smaller one ran out of memory).
  for (double window : {0.5, -1.0, 1e8}) {
    r = {};
    r.window_s = window;
    EXPECT_FALSE(RunReplay(o, r, {Turn(0, "a", {1}, 10)}, &results, &notes, &error)) << window;
    EXPECT_NE(error.find("--trace-window"), std::string::npos) << window;
  }
  r = {};
  r.window_s = 1;
  EXPECT_FALSE(RunReplay(o, r, {Turn(0, "a", {1}, 10), Turn(200'000'001, "b", {2}, 10)}, &results,
                         &notes, &error));
  EXPECT_NE(error.find("more than 100000 windows"), std::string::npos) << error;
}

// With a window, each policy's replay is also cut into windows of that many seconds: a trace with
// a busy minute, a quiet quarter of an hour and another busy minute gives rows that tell them
// apart, and the windows together count what the whole does.
TEST(Replay, WindowsCutTheReplayIntoRowsThatAddUpToTheWhole) {
  std::vector<TraceRequest> trace = ThreeSessions();
  for (TraceRequest r : ThreeSessions()) {
    r.timestamp_ms += 1'000'000;  // the same three again, a thousand seconds later
    r.session_id += "-later";
    trace.push_back(r);
  }
  ReplayOptions options;
  options.window_s = 300;
  LabOptions o;
  o.policies = {"round-robin", "warden-seed"};
  o.progress = false;
  o.latency_jitter = 0;
  std::vector<StageResult> results;
  std::vector<ReplayWindow> windows;
  ReplayNotes notes;
  std::string error;
  ASSERT_TRUE(RunReplay(o, options, trace, &results, &notes, &error, nullptr, &windows)) << error;
  ASSERT_EQ(results.size(), 2u);
  ASSERT_EQ(windows.size() % 2, 0u);
  const size_t per_policy = windows.size() / 2;
  ASSERT_EQ(per_policy, 4u);  // 0-300, 300-600, 600-900, 900-1200 (the last cut at the end)
  for (size_t p = 0; p < 2; ++p) {
    long turns = 0, tokens = 0;
    for (size_t w = 0; w < per_policy; ++w) {
      const ReplayWindow& window = windows[p * per_policy + w];
      EXPECT_EQ(window.result.variant, results[p].variant);
      EXPECT_DOUBLE_EQ(window.start_s, 300.0 * static_cast<double>(w));
      turns += window.result.turns;
      tokens += std::lround(window.result.output_tokens_per_min * window.result.stage_seconds / 60);
    }
    EXPECT_EQ(turns, results[p].turns);
    EXPECT_EQ(turns, 24);
    EXPECT_EQ(tokens, 24 * 50);
    const StageResult& busy = windows[p * per_policy].result;
    const StageResult& quiet = windows[p * per_policy + 1].result;
    const StageResult& again = windows[p * per_policy + 3].result;
    EXPECT_EQ(busy.sessions, 3);
    EXPECT_EQ(busy.turns, 12);
    EXPECT_EQ(quiet.sessions, 0);
    EXPECT_EQ(quiet.turns, 0);
    EXPECT_EQ(quiet.output_tokens_per_min, 0);
    EXPECT_EQ(again.sessions, 3);
    EXPECT_EQ(again.turns, 12);
    EXPECT_LT(again.stage_seconds, 300);  // to the replay's end
  }
  // The seed's rule keeps each conversation home in both busy windows.
  EXPECT_EQ(windows[per_policy].result.stayed_on_replica_pct, 100);
  EXPECT_EQ(windows[per_policy + 3].result.stayed_on_replica_pct, 100);
  const std::string csv = ReplayWindowsCsv(windows);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "window_start_s,window_s,sessions,variant,sessions_per_hour,output_tokens_per_min,"
            "ttfb_p50_s,ttfb_p95_s,replicas_busy,prefix_hit_pct,stayed_on_replica_pct,"
            "upper_bound_hit_pct,any_placement_bound_hit_pct");
  EXPECT_NE(csv.find("\n900,"), std::string::npos) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 9);
}

}  // namespace
}  // namespace warden
