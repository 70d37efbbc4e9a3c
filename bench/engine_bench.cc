// How many times faster than real time the engine model runs: N replicas, each with `seqs`
// concurrent Claude-Code-style conversations in closed loop (a turn's reply, then the next turn
// extending the prompt), stepped in simulated time as the lab does. Prints the ratio of simulated
// seconds to wall seconds ("x_real_time"); the lab needs >= 180 for the seed's 30 simulated minutes
// in 10 s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "core/engine/engine.h"
#include "core/tokens.h"

namespace warden {
namespace {

struct Conversation {
  std::vector<TokenId> tokens;  // the next prompt
  int turns = 0;
  uint32_t next_word = 0;
};

constexpr int kSystemTokens = 3500;
constexpr int kFirstMessageTokens = 7300;
constexpr int kTurnTokens = 400;
constexpr int kReplyTokens = 256;
constexpr int kTurnsPerSession = 6;

void NewSession(Conversation* c, uint32_t session_id) {
  c->tokens.clear();
  for (int i = 0; i < kSystemTokens; ++i) c->tokens.push_back(kFirstWordToken + i);
  c->next_word = session_id << 20;
  for (int i = 0; i < kFirstMessageTokens; ++i)
    c->tokens.push_back(kFirstWordToken + c->next_word++);
  c->turns = 0;
}

void RunClosedLoop(benchmark::State& state) {
  const int replicas = static_cast<int>(state.range(0));
  const int seqs = static_cast<int>(state.range(1));
  const EngineProfile& profile = Profiles()[state.range(2)];
  state.SetLabel(profile.name);
  int64_t running_samples = 0, steps = 0;
  const double sim_seconds = 180;
  double total_sim = 0;
  int64_t total_tokens = 0;
  for (auto _ : state) {
    std::vector<std::unique_ptr<Engine>> engines;
    std::vector<double> step_end(replicas, -1);
    std::vector<std::vector<Conversation>> convs(replicas, std::vector<Conversation>(seqs));
    std::vector<std::unordered_map<RequestId, int>> owner(replicas);
    uint32_t sessions = 1;
    for (int r = 0; r < replicas; ++r) {
      engines.push_back(std::make_unique<Engine>(profile));
      for (int s = 0; s < seqs; ++s) {
        NewSession(&convs[r][s], sessions++);
        owner[r][engines[r]->Add({convs[r][s].tokens, kReplyTokens, 1 << 30, sessions}, 0)] = s;
      }
      step_end[r] = engines[r]->BeginStep(0);
    }
    std::vector<TokenEvent> events;
    for (;;) {
      const int r =
          static_cast<int>(std::min_element(step_end.begin(), step_end.end()) - step_end.begin());
      const double now = step_end[r];
      if (now > sim_seconds) break;
      events.clear();
      engines[r]->EndStep(now, &events);
      total_tokens += static_cast<int64_t>(events.size());
      for (const TokenEvent& e : events) {
        Conversation& c = convs[r][owner[r][e.id]];
        if (e.token != kImEnd) c.tokens.push_back(e.token);
        if (e.finish == FinishReason::kNone) continue;
        const int slot = owner[r][e.id];
        owner[r].erase(e.id);
        if (++c.turns == kTurnsPerSession) {
          NewSession(&c, sessions++);
        } else {
          for (int i = 0; i < kTurnTokens; ++i) c.tokens.push_back(kFirstWordToken + c.next_word++);
        }
        owner[r][engines[r]->Add({c.tokens, kReplyTokens, 1 << 30, sessions + c.next_word}, now)] =
            slot;
      }
      const double d = engines[r]->BeginStep(now);
      running_samples += engines[r]->num_running();
      ++steps;
      step_end[r] = now + (d > 0 ? d : 1e9);
    }
    total_sim += sim_seconds;
  }
  state.counters["x_real_time"] = benchmark::Counter(total_sim, benchmark::Counter::kIsRate);
  state.counters["mean_running"] = double(running_samples) / double(std::max<int64_t>(steps, 1));
  state.counters["tokens_per_s"] =
      benchmark::Counter(double(total_tokens), benchmark::Counter::kIsRate);
}

BENCHMARK(RunClosedLoop)
    ->ArgNames({"replicas", "seqs", "profile"})
    ->Args({4, 8, 0})   // a4000-qwen3-4b: the seed's load at 8 sessions per replica
    ->Args({4, 32, 0})  // a4000: 32 per replica do not fit in its KV cache; most wait
    ->Args({4, 32, 1})  // h100-llama3-8b: all 32 run at once
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace warden

BENCHMARK_MAIN();
