#include "core/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace warden {
namespace {

// A small engine: 16-token blocks, `blocks` usable blocks, 4 sequences, 256-token steps.
EngineProfile SmallProfile(int blocks = 64, int max_num_seqs = 4) {
  EngineProfile p;
  p.name = "test";
  p.block_size = 16;
  p.num_gpu_blocks = blocks + 1;
  p.max_num_seqs = max_num_seqs;
  p.max_num_batched_tokens = 256;
  p.max_model_len = blocks * 16;
  p.time.step_fixed_s = 0.01;
  p.time.prefill_token_s = 0.001;
  p.time.decode_seq_s = 0.002;
  return p;
}

// Tokens 1000+seed*10000+i, all distinct word-range ids.
std::vector<TokenId> Tokens(int n, int seed) {
  std::vector<TokenId> t(n);
  for (int i = 0; i < n; ++i) t[i] = 1000 + seed * 10000 + i;
  return t;
}

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Driver {
  explicit Driver(const EngineProfile& p) : engine(p) {}

  // Steps until nothing is left to do; returns every event.
  std::vector<TokenEvent> RunAll() {
    std::vector<TokenEvent> events;
    while (engine.has_work()) Step(&events);
    return events;
  }
  void Step(std::vector<TokenEvent>* events) {
    const double d = engine.BeginStep(now);
    ASSERT_GT(d, 0);
    now += d;
    engine.EndStep(now, events);
  }
  // Runs one request alone to completion; returns its generated tokens and its last event.
  std::vector<TokenId> RunOne(std::vector<TokenId> prompt, int max_out,
                              TokenEvent* last = nullptr) {
    engine.Add({std::move(prompt), max_out, 1 << 30, 5}, now);
    std::vector<TokenId> out;
    for (const TokenEvent& e : RunAll()) {
      out.push_back(e.token);
      if (last) *last = e;
    }
    return out;
  }

  Engine engine;
  double now = 0;
};

// Sleep mode's discarded KV cache: what was cached is gone, and a request that was running is
// computed again from its start and still ends whole, its prompt counted once.
TEST(Engine, ADiscardedKvCacheForgetsThePrefixesAndRecomputesWhatRan) {
  Driver d(SmallProfile());
  TokenEvent last;
  d.RunOne(Tokens(100, 1), 1, &last);
  d.engine.DiscardKvCache();
  EXPECT_EQ(d.engine.kv_cache_usage(), 0);
  d.RunOne(Tokens(100, 1), 1, &last);
  EXPECT_EQ(last.cached_tokens, 0);  // was 96 with the cache kept (test above)

  d.engine.Add({Tokens(100, 2), 5, 1 << 30, 5}, d.now);
  std::vector<TokenEvent> events;
  d.Step(&events);  // prefill (100 tokens) and the first token
  ASSERT_EQ(events.size(), 1u);
  ASSERT_EQ(d.engine.num_running(), 1);
  const int64_t queries = d.engine.counters().prefix_cache_queries;
  d.engine.DiscardKvCache();
  EXPECT_EQ(d.engine.num_running(), 0);
  EXPECT_EQ(d.engine.num_waiting(), 1);
  EXPECT_EQ(d.engine.kv_cache_usage(), 0);
  for (const TokenEvent& e : d.RunAll()) events.push_back(e);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events.back().output_index, 4);
  EXPECT_EQ(events.back().finish, FinishReason::kLength);
  EXPECT_EQ(d.engine.counters().prefix_cache_queries, queries);
  EXPECT_EQ(d.engine.counters().preemptions, 1);
}

TEST(Engine, RepeatedPromptHitsEveryFullBlockButTheOneHoldingTheLastToken) {
  Driver d(SmallProfile());
  TokenEvent last;
  d.RunOne(Tokens(100, 1), 1, &last);
  EXPECT_EQ(last.cached_tokens, 0);
  d.RunOne(Tokens(100, 1), 1, &last);
  EXPECT_EQ(last.cached_tokens, 96);  // 6 full blocks
  d.RunOne(Tokens(96, 1), 1, &last);
  EXPECT_EQ(last.cached_tokens, 80);  // capped: the last token's block is recomputed
  EXPECT_EQ(d.engine.counters().prefix_cache_queries, 296);
  EXPECT_EQ(d.engine.counters().prefix_cache_hits, 176);
}

// vLLM's --no-enable-prefix-caching: every prompt is computed whole, and the prefix-cache counters
// stay at zero (vLLM records no query when caching is off).
TEST(Engine, WithoutPrefixCachingEveryPromptIsComputedWhole) {
  EngineProfile profile = SmallProfile();
  profile.enable_prefix_caching = false;
  Driver d(profile);
  TokenEvent last;
  d.RunOne(Tokens(100, 1), 1, &last);
  d.RunOne(Tokens(100, 1), 1, &last);
  EXPECT_EQ(last.cached_tokens, 0);
  EXPECT_EQ(d.engine.counters().prefix_cache_queries, 0);
  EXPECT_EQ(d.engine.counters().prefix_cache_hits, 0);
}

// vLLM keys a LoRA adapter's blocks by the adapter too: the same prompt under another adapter (or
// the base model) computes its blocks again, and under the same one hits them.
TEST(Engine, ARequestReadsOnlyItsOwnCacheNamespace) {
  Driver d(SmallProfile());
  const auto run = [&](uint64_t ns) {
    d.engine.Add({Tokens(100, 1), 1, 1 << 30, 5, ns}, d.now);
    TokenEvent last;
    for (const TokenEvent& e : d.RunAll()) last = e;
    return last.cached_tokens;
  };
  EXPECT_EQ(run(0), 0);
  EXPECT_EQ(run(7), 0);
  EXPECT_EQ(run(7), 96);
  EXPECT_EQ(run(0), 96);
  EXPECT_EQ(run(8), 0);
}

TEST(Engine, NextTurnHitsPreviousPromptAndReplyRoundedDownToBlocks) {
  Driver d(SmallProfile());
  const auto prompt = Tokens(100, 1);
  const auto reply = d.RunOne(prompt, 20);
  ASSERT_EQ(reply.size(), 20u);
  // KV exists for the prompt and 19 reply tokens (the last one is never fed back): 119 tokens,
  // 7 full blocks.
  TokenEvent last;
  d.RunOne(Concat(Concat(prompt, reply), Tokens(30, 2)), 1, &last);
  EXPECT_EQ(last.prompt_tokens, 150);
  EXPECT_EQ(last.cached_tokens, 112);
}

TEST(Engine, GeneratedBlocksAreCachedForTheNextTurn) {
  Driver d(SmallProfile());
  const auto prompt = Tokens(32, 1);
  const auto reply = d.RunOne(prompt, 40);  // 71 tokens of KV: 4 full blocks, 2 of them generated
  TokenEvent last;
  d.RunOne(Concat(Concat(prompt, reply), Tokens(10, 3)), 1, &last);
  EXPECT_EQ(last.cached_tokens, 64);
}

TEST(Engine, PromptSharingOnlyTheSystemPartHitsOnlyItsFullBlocks) {
  Driver d(SmallProfile());
  const auto system = Tokens(40, 9);
  d.RunOne(Concat(system, Tokens(50, 1)), 1);
  TokenEvent last;
  d.RunOne(Concat(system, Tokens(50, 2)), 1, &last);
  EXPECT_EQ(last.cached_tokens, 32);
}

TEST(Engine, EvictsTheTailOfTheOldestChainFirst) {
  Driver d(SmallProfile(8));
  d.RunOne(Tokens(64, 1), 1);  // A: blocks 1-4, freed tail-first: queue 5 6 7 8 4 3 2 1
  d.RunOne(Tokens(64, 2), 1);  // B: blocks 5-8: queue 4 3 2 1 8 7 6 5
  d.RunOne(Tokens(32, 3), 1);  // C: takes 4 and 3, evicting A's last two blocks
  EXPECT_EQ(d.engine.block_pool().evictions(), 2);
  TokenEvent last;
  d.RunOne(Tokens(64, 1), 1, &last);
  EXPECT_EQ(last.cached_tokens, 32);  // A's head survived
}

TEST(Engine, ChunkedPrefillSplitsALongPromptIntoBudgetSizedSteps) {
  Driver d(SmallProfile());
  d.engine.Add({Tokens(600, 1), 1, 1 << 30, 0}, 0);
  std::vector<TokenEvent> events;
  std::vector<int> chunks;
  while (d.engine.has_work()) {
    d.Step(&events);
    chunks.push_back(d.engine.last_step().prefill_tokens);
  }
  EXPECT_EQ(chunks, (std::vector<int>{256, 256, 88}));
  EXPECT_EQ(events.size(), 1u);
}

TEST(Engine, RespectsMaxNumSeqs) {
  Driver d(SmallProfile(64, 4));
  for (int i = 0; i < 6; ++i) d.engine.Add({Tokens(8, i), 3, 1 << 30, 0}, 0);
  std::vector<TokenEvent> events;
  d.Step(&events);
  EXPECT_EQ(d.engine.num_running(), 4);
  EXPECT_EQ(d.engine.num_waiting(), 2);
  while (d.engine.has_work()) {
    d.Step(&events);
    EXPECT_LE(d.engine.num_running(), 4);
  }
  EXPECT_EQ(events.size(), 18u);
}

TEST(Engine, PreemptsTheLastAdmittedRequestWhenBlocksRunOut) {
  Driver d(SmallProfile(8));
  // Each needs 6 blocks by its end (48 + 40 tokens); together they need 12 of 8.
  d.engine.Add({Tokens(48, 1), 40, 1 << 30, 1}, 0);
  d.engine.Add({Tokens(48, 2), 40, 1 << 30, 2}, 0);
  std::vector<TokenEvent> events;
  d.Step(&events);
  ASSERT_EQ(d.engine.num_running(), 2);
  while (d.engine.counters().preemptions == 0) d.Step(&events);
  EXPECT_EQ(d.engine.num_running(), 1);
  EXPECT_EQ(d.engine.num_waiting(), 1);
  events.clear();
  while (d.engine.has_work()) d.Step(&events);

  // B could not come back until A finished and freed its blocks.
  size_t a_last = 0, b_first = events.size();
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].id == 1) a_last = i;
    if (events[i].id == 2 && b_first == events.size()) b_first = i;
  }
  EXPECT_LT(a_last, b_first);
  EXPECT_EQ(d.engine.counters().generation_tokens, 80);  // B kept its tokens: none generated twice
  EXPECT_EQ(events.back().id, 2u);
  EXPECT_EQ(events.back().finish, FinishReason::kLength);
  // The preempted request's second admission is not a new prefix-cache query.
  EXPECT_EQ(d.engine.counters().prefix_cache_queries, 96);
}

// vLLM's --scheduling-policy priority: one request runs at a time; of those waiting, the lowest
// priority value goes first, then the earliest. Under fcfs they go in arrival order.
std::vector<RequestId> FirstTokenOrder(bool priority_scheduling) {
  EngineProfile p = SmallProfile(64, 1);
  p.priority_scheduling = priority_scheduling;
  Driver d(p);
  d.engine.Add({Tokens(8, 1), 2, 1 << 30, 1}, 0);
  std::vector<TokenEvent> events;
  d.Step(&events);                         // A runs
  const int priorities[] = {1, 0, -1, 0};  // B, C, D, E
  for (int i = 0; i < 4; ++i) {
    NewRequest r{Tokens(8, 2 + i), 2, 1 << 30, 1};
    if (priority_scheduling) r.priority = priorities[i];
    d.engine.Add(std::move(r), d.now + 0.001 * i);
  }
  while (d.engine.has_work()) d.Step(&events);
  std::vector<RequestId> order;
  for (const TokenEvent& e : events) {
    if (e.output_index == 0) order.push_back(e.id);
  }
  return order;
}

TEST(Engine, WithPrioritySchedulingTheWaitingQueueGoesByPriorityThenArrival) {
  EXPECT_EQ(FirstTokenOrder(true), (std::vector<RequestId>{1, 4, 3, 5, 2}));
  EXPECT_EQ(FirstTokenOrder(false), (std::vector<RequestId>{1, 2, 3, 4, 5}));
}

// 7 blocks: A (56 tokens, 4 blocks) and B (48 tokens, 3 blocks) fill them; B's first decoded
// token needs an 8th. Under fcfs the last admitted (B) gives way; with priority scheduling the
// lowest priority does, A, though it was admitted first and already scheduled in that step.
struct PreemptionCase {
  explicit PreemptionCase(bool priority_scheduling)
      : d([&] {
          EngineProfile p = SmallProfile(7);
          p.priority_scheduling = priority_scheduling;
          return p;
        }()) {
    NewRequest a{Tokens(56, 1), 40, 1 << 30, 1};
    NewRequest b{Tokens(48, 2), 40, 1 << 30, 2};
    if (priority_scheduling) a.priority = 1;
    d.engine.Add(std::move(a), 0);
    d.engine.Add(std::move(b), 0.001);
    std::vector<TokenEvent> events;
    d.Step(&events);  // both prompts computed, a first token each
    d.Step(&events);
    running_after_shortage = d.engine.num_running();
    decoded_in_that_step = d.engine.last_step().decode_seqs;
    events.clear();
    while (d.engine.has_work()) d.Step(&events);
    for (const TokenEvent& e : events) {
      if (e.finish != FinishReason::kNone) finished.push_back(e.id);
    }
  }
  Driver d;
  int running_after_shortage = 0;
  int decoded_in_that_step = 0;
  std::vector<RequestId> finished;
};

TEST(Engine, WithPrioritySchedulingTheLowestPriorityIsPreempted) {
  PreemptionCase fcfs(false);
  EXPECT_EQ(fcfs.running_after_shortage, 1);
  EXPECT_EQ(fcfs.finished, (std::vector<RequestId>{1, 2}));  // A went on, B waited for it

  PreemptionCase priority(true);
  EXPECT_EQ(priority.running_after_shortage, 1);
  EXPECT_EQ(priority.decoded_in_that_step, 1);  // A's share of the step was taken back
  EXPECT_EQ(priority.finished, (std::vector<RequestId>{2, 1}));
  EXPECT_EQ(priority.d.engine.counters().preemptions, 1);
  EXPECT_EQ(priority.d.engine.counters().generation_tokens, 80);  // none generated twice
}

// vLLM's scheduler_reserve_full_isl: 8 blocks, 32-token steps. A (48 + 40 tokens: 6 blocks by its
// end) is decoding when B (80 tokens: 5 blocks) arrives. B's first chunk would fit, its whole
// prompt does not: with the reservation B waits for A and nothing is preempted; without it, B is
// let in on its first chunk and one of them is preempted later.
struct FullPromptCase {
  explicit FullPromptCase(bool reserve, bool count_every_lookup = false)
      : d([&] {
          EngineProfile p = SmallProfile(8);
          p.max_num_batched_tokens = 32;
          p.reserve_full_prompt = reserve;
          p.count_every_lookup = count_every_lookup;
          return p;
        }()) {
    d.engine.Add({Tokens(48, 1), 40, 1 << 30, 1}, 0);
    std::vector<TokenEvent> events;
    while (events.empty()) d.Step(&events);  // A's prompt computed, its first token out
    d.engine.Add({Tokens(80, 2), 8, 1 << 30, 2}, d.now);
    d.Step(&events);
  }
  Driver d;
};

TEST(Engine, AWaitingRequestIsAdmittedOnlyWhenItsWholePromptFits) {
  FullPromptCase with(true);
  EXPECT_EQ(with.d.engine.num_running(), 1);
  EXPECT_EQ(with.d.engine.num_waiting(), 1);
  const std::vector<TokenEvent> events = with.d.RunAll();
  EXPECT_EQ(with.d.engine.counters().preemptions, 0);
  EXPECT_EQ(events.back().id, 2u);  // B came in after A was done

  FullPromptCase without(false);
  EXPECT_EQ(without.d.engine.num_running(), 2);  // let in on its first chunk
  without.d.RunAll();
  EXPECT_GT(without.d.engine.counters().preemptions, 0);
}

// The whole-prompt check counts a prefix hit whose blocks sit in the free queue as taken from it,
// as vLLM's can_fit_full_sequence does. 9 blocks, 17-token steps: A's 64-token prompt is cached
// and free; B runs, holding 4 blocks; C opens with A's prompt (4 hit blocks in the free queue of
// 5) and needs 1 block more for 80 tokens, 2 for 96, while its first 16-token chunk needs 1.
int RunningAfterCArrives(int c_tokens, bool reserve) {
  EngineProfile p = SmallProfile(9);
  p.max_num_batched_tokens = 17;
  p.reserve_full_prompt = reserve;
  Driver d(p);
  d.RunOne(Tokens(64, 1), 1);
  d.engine.Add({Tokens(48, 2), 40, 1 << 30, 2}, d.now);
  std::vector<TokenEvent> events;
  while (events.empty()) d.Step(&events);  // B's prompt in, its first token out
  d.Step(&events);                         // B's first decode takes its 4th block
  d.engine.Add({Concat(Tokens(64, 1), Tokens(c_tokens - 64, 3)), 4, 1 << 30, 3}, d.now);
  d.Step(&events);
  return d.engine.num_running();
}

TEST(Engine, TheWholePromptCheckCountsHitBlocksTakenFromTheFreeQueue) {
  EXPECT_EQ(RunningAfterCArrives(80, true), 2);   // 1 block to allocate, 1 free besides its hits
  EXPECT_EQ(RunningAfterCArrives(96, true), 1);   // 2 to allocate: it waits
  EXPECT_EQ(RunningAfterCArrives(96, false), 2);  // on its first chunk alone it would go in
}

// Before vLLM's PR #48860, every lookup of a waiting request counted in the prefix-cache counters;
// after it, only the one at admission.
TEST(Engine, ALookupCountsOnceUnlessEveryLookupIsCounted) {
  FullPromptCase once(true);
  once.d.RunAll();
  EXPECT_EQ(once.d.engine.counters().prefix_cache_queries, 48 + 80);

  FullPromptCase every(true, true);
  every.d.RunAll();
  // B was looked up at every step of A's decoding (about 40), and counted each time.
  EXPECT_GT(every.d.engine.counters().prefix_cache_queries, 48 + 80 * 30);
}

TEST(Engine, ReplyEndsWithEndOfSequenceAtItsNaturalLength) {
  Driver d(SmallProfile());
  d.engine.Add({Tokens(20, 1), 100, 5, 3}, 0);
  const auto events = d.RunAll();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events.back().token, kImEnd);
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
  EXPECT_EQ(d.engine.counters().requests_stopped, 1);
}

TEST(Engine, CountersMatchHandComputedValues) {
  Driver d(SmallProfile());
  d.RunOne(Tokens(40, 1), 10);
  d.RunOne(Tokens(40, 1), 10);
  const EngineCounters& c = d.engine.counters();
  EXPECT_EQ(c.prompt_tokens, 80);
  EXPECT_EQ(c.generation_tokens, 20);
  EXPECT_EQ(c.prefix_cache_queries, 80);
  EXPECT_EQ(c.prefix_cache_hits, 32);
  EXPECT_EQ(c.requests_length, 2);
  EXPECT_EQ(c.ttft.count(), 2u);
  EXPECT_EQ(d.engine.num_running(), 0);
  EXPECT_DOUBLE_EQ(d.engine.kv_cache_usage(), 0.0);
}

TEST(Engine, StepTimeFollowsTheTimeModel) {
  Driver d(SmallProfile());
  d.engine.Add({Tokens(100, 1), 3, 1 << 30, 0}, 0);
  const double prefill = d.engine.BeginStep(0);
  EXPECT_DOUBLE_EQ(prefill, 0.01 + 100 * 0.001);
  std::vector<TokenEvent> events;
  d.engine.EndStep(prefill, &events);
  ASSERT_EQ(events.size(), 1u);
  const double decode = d.engine.BeginStep(prefill);
  EXPECT_DOUBLE_EQ(decode, 0.01 + 0.002);
  d.engine.EndStep(prefill + decode, &events);
  EXPECT_EQ(d.engine.last_step().decode_context, 101);
}

TEST(Engine, AbortFreesBlocksAndEmitsNothingMore) {
  Driver d(SmallProfile());
  const RequestId id = d.engine.Add({Tokens(100, 1), 50, 1 << 30, 0}, 0);
  std::vector<TokenEvent> events;
  d.Step(&events);
  EXPECT_GT(d.engine.kv_cache_usage(), 0);
  d.engine.Abort(id);
  EXPECT_FALSE(d.engine.has_work());
  EXPECT_DOUBLE_EQ(d.engine.kv_cache_usage(), 0.0);
  EXPECT_EQ(d.engine.counters().requests_aborted, 1);
}

TEST(Engine, AbortDuringAStepDropsTheRequestAtTheStepsEnd) {
  Driver d(SmallProfile());
  const RequestId id = d.engine.Add({Tokens(10, 1), 50, 1 << 30, 0}, 0);
  const double dt = d.engine.BeginStep(0);
  d.engine.Abort(id);
  std::vector<TokenEvent> events;
  d.engine.EndStep(dt, &events);
  EXPECT_TRUE(events.empty());
  EXPECT_FALSE(d.engine.has_work());
}

// With CPU offloading (vLLM's native backend): 1 ms a token to read back, room for 64 blocks.
EngineProfile OffloadingProfile(int blocks) {
  EngineProfile p = SmallProfile(blocks);
  p.kv_bytes_per_token = 1000;
  p.kv_load_bytes_per_s = 1e6;
  p.kv_offloading_gib = 64.0 * 16 * 1000 / (1 << 30);
  return p;
}

// A prompt the GPU's cache has evicted is read back from CPU memory, all but the block holding
// its last token: the request waits for the copy (nothing else runs meanwhile, so the step is
// the wait) and then computes only the rest. Usage counts the blocks read back as cached, the
// GPU's prefix-cache counters do not, vLLM's external ones do.
TEST(Engine, APromptEvictedFromTheGpuIsReadBackFromCpuMemory) {
  Driver d(OffloadingProfile(8));
  ASSERT_NE(d.engine.cpu_tier(), nullptr);
  EXPECT_EQ(d.engine.cpu_tier()->capacity(), 64);
  d.RunOne(Tokens(64, 1), 1);
  d.RunOne(Tokens(64, 2), 1);
  d.RunOne(Tokens(64, 3), 1);  // A's blocks evicted from the GPU
  const EngineCounters before = d.engine.counters();
  EXPECT_EQ(before.external_prefix_cache_hits, 0);
  const double added = d.now;
  d.engine.Add({Tokens(64, 1), 1, 1 << 30, 5}, d.now);
  std::vector<TokenEvent> events;
  // Steps that only wait, each no longer than an engine step (a request that came meanwhile
  // would be scheduled), until the copy is done: 48 tokens at 1 ms each.
  double began = d.now;
  for (;;) {
    began = d.now;
    d.Step(&events);
    if (!d.engine.last_step().empty()) break;
    EXPECT_TRUE(events.empty());
    EXPECT_LE(d.now - added, 0.048 + 1e-9);
  }
  EXPECT_NEAR(began - added, 0.048, 1e-9);
  EXPECT_EQ(d.engine.last_step().prefill_tokens, 16);  // only the last block is computed
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].cached_tokens, 48);
  const EngineCounters& after = d.engine.counters();
  EXPECT_EQ(after.prefix_cache_queries - before.prefix_cache_queries, 64);
  EXPECT_EQ(after.prefix_cache_hits - before.prefix_cache_hits, 0);
  EXPECT_EQ(after.external_prefix_cache_queries - before.external_prefix_cache_queries, 64);
  EXPECT_EQ(after.external_prefix_cache_hits - before.external_prefix_cache_hits, 48);
}

// Only prompt blocks are offloaded (vLLM's offload_prompt_only): a conversation's next turn reads
// its previous prompt back, and computes the reply it got and what is new.
TEST(Engine, OnlyPromptBlocksAreOffloaded) {
  Driver d(OffloadingProfile(12));
  const std::vector<TokenId> reply = d.RunOne(Tokens(64, 1), 40);
  d.RunOne(Tokens(96, 2), 1);
  d.RunOne(Tokens(96, 3), 1);  // the first turn's blocks evicted from the GPU
  TokenEvent last;
  d.RunOne(Concat(Concat(Tokens(64, 1), reply), Tokens(20, 4)), 1, &last);
  EXPECT_EQ(last.cached_tokens, 64);
}

// Without offloading nothing is read back and vLLM's external counters stay still.
TEST(Engine, WithoutOffloadingAnEvictedPromptIsComputedAgain) {
  Driver d(SmallProfile(8));
  EXPECT_EQ(d.engine.cpu_tier(), nullptr);
  d.RunOne(Tokens(64, 1), 1);
  d.RunOne(Tokens(64, 2), 1);
  d.RunOne(Tokens(64, 3), 1);
  TokenEvent last;
  d.RunOne(Tokens(64, 1), 1, &last);
  EXPECT_EQ(last.cached_tokens, 0);
  EXPECT_EQ(d.engine.counters().external_prefix_cache_queries, 0);
}

// A request whose prefix is on its way back keeps its place, and the request behind it runs
// meanwhile; sleep mode's discarded cache sends it back to the start.
TEST(Engine, OthersRunWhileAPrefixIsReadBackAndADiscardedCacheStartsItOver) {
  Driver d(OffloadingProfile(16));
  d.RunOne(Tokens(64, 1), 1);
  d.RunOne(Tokens(128, 2), 1);
  d.RunOne(Tokens(128, 3), 1);  // A's blocks evicted from the GPU
  d.engine.Add({Tokens(64, 1), 1, 1 << 30, 5}, d.now);
  d.engine.Add({Tokens(32, 5), 1, 1 << 30, 5}, d.now);
  d.engine.BeginStep(d.now);
  EXPECT_EQ(d.engine.last_step().prefill_tokens, 32);  // the second, while A's blocks come
  std::vector<TokenEvent> events;
  d.now += 0.001;
  d.engine.EndStep(d.now, &events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_GT(d.engine.block_pool().Usage(), 0);
  d.engine.DiscardKvCache();
  EXPECT_EQ(d.engine.kv_cache_usage(), 0);  // A's blocks let go
  TokenEvent last;
  for (const TokenEvent& e : d.RunAll()) last = e;
  EXPECT_EQ(last.prompt_tokens, 64);
  EXPECT_EQ(last.finish, FinishReason::kLength);
}

// Two reads back that together need more room than the cache has for both whole requests: the
// second waits for the first to be done rather than taking the room the first needs once its
// prefix is back (found by review: both held their blocks and neither could go on, for ever).
TEST(Engine, AReadBackIsStartedOnlyWithRoomForTheReadsBackUnderWay) {
  EngineProfile p = OffloadingProfile(64);
  p.kv_offloading_gib *= 4;  // 256 blocks: the filler below evicts nothing there
  Driver d(p);
  d.RunOne(Tokens(160, 1), 1);   // 10 blocks, copied to CPU memory
  d.RunOne(Tokens(192, 2), 1);   // 12 blocks
  d.RunOne(Tokens(1000, 3), 1);  // 63 blocks: the GPU's cache holds neither any more
  d.engine.Add({Concat(Tokens(160, 1), Tokens(720, 4)), 1, 1 << 30, 5}, d.now);  // 55 blocks
  d.engine.Add({Concat(Tokens(192, 2), Tokens(16, 5)), 1, 1 << 30, 5}, d.now);   // 13 blocks
  std::vector<TokenEvent> events;
  while (d.engine.has_work()) d.Step(&events);  // (a step of 0 with work left fails the test)
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].cached_tokens, 160);
  EXPECT_EQ(events[1].cached_tokens, 192);
}

// Blocks being read back are not found in the GPU's cache until they are there: a request with
// the same prefix that comes meanwhile reads its own copy from CPU memory (after the first, one
// copy at a time), rather than counting a GPU hit on blocks not yet filled.
TEST(Engine, BlocksBeingReadBackAreNotFoundOnTheGpuUntilThere) {
  Driver d(OffloadingProfile(16));
  d.RunOne(Tokens(96, 1), 1);
  d.RunOne(Tokens(128, 2), 1);
  d.RunOne(Tokens(128, 3), 1);  // the first's blocks evicted from the GPU
  const EngineCounters before = d.engine.counters();
  d.engine.Add({Tokens(96, 1), 1, 1 << 30, 5}, d.now);
  d.engine.Add({Tokens(96, 1), 1, 1 << 30, 5}, d.now);
  std::vector<TokenEvent> events;
  d.Step(&events);
  EXPECT_TRUE(d.engine.last_step().empty());
  EXPECT_EQ(d.engine.counters().prefix_cache_hits, before.prefix_cache_hits);
  EXPECT_EQ(d.engine.counters().external_prefix_cache_hits, 2 * 80);
  while (d.engine.has_work()) d.Step(&events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].cached_tokens, 80);
  EXPECT_EQ(events[1].cached_tokens, 80);
}

// One seat, a request reading its prefix back, and a running one whose reply outgrows the cache
// that is left: the running one gives way, and the engine schedules again at once rather than
// stopping with work to do (found by review: BeginStep returned 0, and its driver parked).
TEST(Engine, ARequestThatGivesWayToAReadBackDoesNotStopTheEngine) {
  EngineProfile p = SmallProfile(64, /*max_num_seqs=*/1);
  p.kv_bytes_per_token = 1024;
  p.kv_load_bytes_per_s = 1e9;
  p.kv_offloading_gib = 1024.0 * 16 * 1024 / (1 << 30);
  Driver d(p);
  d.RunOne(Tokens(640, 1), 1);                             // its prompt copied to CPU memory
  d.engine.DiscardKvCache();                               // the GPU's cache gone
  d.engine.Add({Tokens(645, 1), 4, 1 << 30, 2}, d.now);    // reads 40 blocks back
  d.engine.Add({Tokens(16, 2), 1000, 1 << 30, 3}, d.now);  // takes the one seat meanwhile
  std::vector<TokenEvent> events;
  while (d.engine.has_work()) d.Step(&events);  // (a step of 0 with work left fails the test)
  EXPECT_EQ(d.engine.block_pool().num_free(), 64);
  EXPECT_EQ(std::count_if(events.begin(), events.end(),
                          [](const TokenEvent& e) { return e.finish != FinishReason::kNone; }),
            2);
}

}  // namespace
}  // namespace warden
