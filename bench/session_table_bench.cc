// What taking a peer's backlog costs the session table (core/routing/session_table.h), against
// routing as many turns here: after a split, each gateway has routed tens of thousands of new
// conversations the other must learn, in time interleaved with its own, in slices earliest first.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "core/routing/session_table.h"

namespace warden {
namespace {

constexpr int kReplicas = 4;
constexpr double kSplitSeconds = 15;

std::string Key(const char* side, int i) {
  return std::string(side) + std::to_string(i);
}

// A table that routed `n` conversations over the split, evenly in time.
void RouteOwn(SessionTable* t, int n) {
  bool created;
  for (int i = 0; i < n; ++i)
    t->Touch(Key("own-", i), i % kReplicas, kSplitSeconds * i / n, &created);
}

// The peer's `n` conversations of the same split, each seen half a step after one of ours.
std::vector<SessionTable::SharedHome> PeerBacklog(int n) {
  std::vector<SessionTable::SharedHome> homes;
  homes.reserve(n);
  for (int i = 0; i < n; ++i) {
    const double seen = kSplitSeconds * (i + 0.5) / n;
    homes.push_back({Key("peer-", i), (i + 1) % kReplicas, seen, 2000, seen});
  }
  return homes;
}

void BM_RouteAsMany(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  for (auto _ : state) {
    SessionTable t(4 * n, 600, kReplicas);
    RouteOwn(&t, n);
    RouteOwn(&t, n);  // the second round, timed against the backlog's learning
    benchmark::DoNotOptimize(t.active());
  }
}
BENCHMARK(BM_RouteAsMany)->Arg(10000)->Arg(60000)->Unit(benchmark::kMillisecond);

void BM_LearnBacklog(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const size_t slice = 1000;
  const std::vector<SessionTable::SharedHome> backlog = PeerBacklog(n);
  for (auto _ : state) {
    SessionTable t(4 * n, 600, kReplicas);
    RouteOwn(&t, n);
    for (size_t at = 0; at < backlog.size(); at += slice) {
      const size_t len = std::min(slice, backlog.size() - at);
      t.Learn(std::span(backlog).subspan(at, len), kSplitSeconds + 1);
    }
    benchmark::DoNotOptimize(t.active());
  }
}
BENCHMARK(BM_LearnBacklog)->Arg(10000)->Arg(60000)->Unit(benchmark::kMillisecond);

// The other side of it: the peer sending its backlog, a slice of 1000 at a time.
void BM_SendBacklog(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  SessionTable t(4 * n, 600, kReplicas);
  RouteOwn(&t, n);
  for (auto _ : state) {
    double since = -1, through = 0;
    size_t sent = 0;
    while (since < kSplitSeconds) {
      sent += t.ChangedSince(since, 1000, &through).size();
      since = through;
    }
    benchmark::DoNotOptimize(sent);
  }
}
BENCHMARK(BM_SendBacklog)->Arg(10000)->Arg(60000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace warden

BENCHMARK_MAIN();
