// What checking a client's API key costs a request (net/api_keys.h): a SHA-256 of the key and a
// constant-time comparison with each key held.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "net/api_keys.h"

namespace warden {
namespace {

std::vector<std::string> Keys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i)
    keys.push_back("sk-warden-" + std::to_string(1000000 + i) + "-abcdef");
  return keys;
}

void BM_FindBearer(benchmark::State& state) {
  const std::vector<std::string> keys = Keys(static_cast<int>(state.range(0)));
  const ApiKeys held(keys);
  const std::string header = "Bearer " + keys.back();
  for (auto _ : state) benchmark::DoNotOptimize(held.FindBearer(header));
}
BENCHMARK(BM_FindBearer)->Arg(1)->Arg(10)->Arg(100);

void BM_FindBearerRefused(benchmark::State& state) {
  const ApiKeys held(Keys(10));
  const std::string header = "Bearer sk-nobody";
  for (auto _ : state) benchmark::DoNotOptimize(held.FindBearer(header));
}
BENCHMARK(BM_FindBearerRefused);

}  // namespace
}  // namespace warden

BENCHMARK_MAIN();
