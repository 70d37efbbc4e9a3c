#include "core/protocol/vllm_metrics_reader.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

constexpr std::string_view kDataParallel = R"(# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 3.0
vllm:num_requests_running{model_name="m",engine="1"} 1.0
vllm:num_requests_waiting{model_name="m",engine="1"} 2.0
vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.5
vllm:prefix_cache_queries_total{model_name="m",engine="1"} 1000.0
vllm:prefix_cache_hits_total{model_name="m",engine="1"} 750.0
vllm:prefix_cache_hits_total{model_name="m",engine="7"} 9.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="2313",engine="0"} 1.0
process_cpu_seconds_total 12.5
)";

TEST(VllmMetricsReader, DataParallelEnginesAreReplicas) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(ReadVllmMetrics(kDataParallel, 2, true, &m, &error)) << error;
  EXPECT_EQ(m[0].running, 3);
  EXPECT_EQ(m[1].running, 1);
  EXPECT_EQ(m[1].waiting, 2);
  EXPECT_DOUBLE_EQ(m[0].kv_cache_usage, 0.5);
  EXPECT_EQ(m[1].prefix_cache_hits, 750);  // engine 7 is not a replica here
  EXPECT_EQ(m[0].block_size, 16);
  EXPECT_EQ(m[0].num_gpu_blocks, 2313);
}

// vLLM with a KV connector (its CPU offloading) counts what it read back from there apart from
// the GPU's hits; an engine without one publishes no such series.
TEST(VllmMetricsReader, ReadsTheCpuOffloadingsCountersWhereThereAreAny) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(
      ReadVllmMetrics("vllm:prefix_cache_queries_total{engine=\"0\"} 1000\n"
                      "vllm:prefix_cache_hits_total{engine=\"0\"} 400\n"
                      "vllm:external_prefix_cache_queries_total{engine=\"0\"} 600\n"
                      "vllm:external_prefix_cache_hits_total{engine=\"0\"} 450\n"
                      "vllm:prefix_cache_queries_total{engine=\"1\"} 10\n",
                      2, true, &m, &error))
      << error;
  EXPECT_EQ(m[0].prefix_cache_hits, 400);
  EXPECT_EQ(m[0].external_prefix_cache_queries, 600);
  EXPECT_EQ(m[0].external_prefix_cache_hits, 450);
  EXPECT_LT(m[1].external_prefix_cache_queries, 0);  // not published
}

// vLLM prints every CacheConfig field as a label of vllm:cache_config_info, --kv-offloading-size
// among them: the GiB of host memory each engine keeps prompts in ("None" without offloading).
// One server taken as one replica has its engines' together.
TEST(VllmMetricsReader, ReadsTheHostMemoryEachEngineOffloadsTo) {
  const std::string text =
      "vllm:cache_config_info{block_size=\"16\",engine=\"0\",kv_offloading_size=\"16.0\","
      "num_gpu_blocks=\"200\"} 1.0\n"
      "vllm:cache_config_info{block_size=\"16\",engine=\"1\",kv_offloading_size=\"16.0\","
      "num_gpu_blocks=\"200\"} 1.0\n";
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(ReadVllmMetrics(text, 2, true, &m, &error)) << error;
  EXPECT_DOUBLE_EQ(m[0].kv_offloading_gib, 16);
  EXPECT_DOUBLE_EQ(m[1].kv_offloading_gib, 16);
  ASSERT_TRUE(ReadVllmMetrics(text, 1, false, &m, &error)) << error;
  EXPECT_DOUBLE_EQ(m[0].kv_offloading_gib, 32);

  for (const char* value : {"None", "0.0", "-4", "nan", "inf", "16 GiB", ""}) {
    ASSERT_TRUE(ReadVllmMetrics(std::string("vllm:cache_config_info{engine=\"0\","
                                            "kv_offloading_size=\"") +
                                    value + "\"} 1.0\n",
                                1, true, &m, &error))
        << error;
    EXPECT_EQ(m[0].kv_offloading_gib, 0) << value;
  }
}

// A hybrid model's blocks hold tokens of several KV cache groups: newer vLLM says the capacity in
// tokens (per data-parallel engine), which block_size × num_gpu_blocks overstates (found by
// review: DeepSeek-V4 publishes block_size 4). One server as one replica has its engines'.
TEST(VllmMetricsReader, TheCapacityInTokensWhenPublished) {
  const std::string text =
      "vllm:cache_config_info{block_size=\"528\",engine=\"0\",kv_cache_size_tokens=\"463459\","
      "num_gpu_blocks=\"2000\"} 1.0\n"
      "vllm:cache_config_info{block_size=\"528\",engine=\"1\",kv_cache_size_tokens=\"463459\","
      "num_gpu_blocks=\"2000\"} 1.0\n";
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(ReadVllmMetrics(text, 2, true, &m, &error)) << error;
  EXPECT_EQ(m[0].kv_cache_tokens(), 463459);
  EXPECT_EQ(m[1].kv_cache_tokens(), 463459);
  ASSERT_TRUE(ReadVllmMetrics(text, 1, false, &m, &error)) << error;
  EXPECT_EQ(m[0].kv_cache_tokens(), 2 * 463459);
  // Not published ("None" before the cache is set up, or an older vLLM): blocks × their size.
  ASSERT_TRUE(
      ReadVllmMetrics("vllm:cache_config_info{block_size=\"16\",engine=\"0\","
                      "kv_cache_size_tokens=\"None\",num_gpu_blocks=\"101\"} 1.0\n",
                      1, true, &m, &error))
      << error;
  EXPECT_EQ(m[0].kv_cache_tokens(), 1600);
}

TEST(VllmMetricsReader, OneServerIsOneReplicaAndOlderNamesCount) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(
      ReadVllmMetrics("vllm:gpu_cache_usage_perc{engine=\"0\"} 0.25\n"
                      "vllm:num_requests_running{engine=\"0\"} 2\n"
                      "vllm:num_requests_running{engine=\"1\"} 2\n",
                      1, false, &m, &error));
  EXPECT_EQ(m[0].running, 4);
  EXPECT_DOUBLE_EQ(m[0].kv_cache_usage, 0.25);
}

// vLLM sums num_gpu_blocks over a data-parallel server's engines (the engine handshake in
// vllm/v1/engine/utils.py) and writes that sum into every engine's vllm:cache_config_info.
TEST(VllmMetricsReader, AnEnginesCacheIsTheServersOverItsEngines) {
  constexpr std::string_view kFourEngines = R"(
vllm:cache_config_info{block_size="16",num_gpu_blocks="9252",engine="0",pid="11"} 1.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="9252",engine="0",pid="12"} 1.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="9252",engine="1"} 1.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="9252",engine="2"} 1.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="9252",engine="3"} 1.0
)";
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(ReadVllmMetrics(kFourEngines, 4, true, &m, &error)) << error;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(m[r].num_gpu_blocks, 2313) << r;
  // The same server as one replica (its own balancer places requests): the whole cache.
  ASSERT_TRUE(ReadVllmMetrics(kFourEngines, 1, false, &m, &error)) << error;
  EXPECT_EQ(m[0].num_gpu_blocks, 9252);
  // Two of the four configured: still a quarter each.
  ASSERT_TRUE(ReadVllmMetrics(kFourEngines, 2, true, &m, &error)) << error;
  EXPECT_EQ(m[1].num_gpu_blocks, 2313);
}

// vLLM prints its cache config's fields as labels, Python bools as "True" and "False"
// (--no-enable-prefix-caching: "False"). Older versions, and some newer, leave the field out.
TEST(VllmMetricsReader, ReadsWhetherPrefixCachingIsOn) {
  constexpr std::string_view kMixed = R"(
vllm:cache_config_info{block_size="16",enable_prefix_caching="True",num_gpu_blocks="9",engine="0"} 1.0
vllm:cache_config_info{block_size="16",enable_prefix_caching="False",num_gpu_blocks="9",engine="1"} 1.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="9",engine="2"} 1.0
)";
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(ReadVllmMetrics(kMixed, 3, true, &m, &error)) << error;
  EXPECT_EQ(m[0].prefix_caching, std::optional<bool>(true));
  EXPECT_EQ(m[1].prefix_caching, std::optional<bool>(false));
  EXPECT_EQ(m[2].prefix_caching, std::nullopt);
  // One server as one replica: off when any of its engines is.
  ASSERT_TRUE(ReadVllmMetrics(kMixed, 1, false, &m, &error)) << error;
  EXPECT_EQ(m[0].prefix_caching, std::optional<bool>(false));
  ASSERT_TRUE(ReadVllmMetrics(
      "vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"maybe\"} 1\n", 1, false, &m,
      &error));
  EXPECT_EQ(m[0].prefix_caching, std::nullopt);
}

// vLLM's sleep mode: vllm:engine_sleep_state{sleep_state="awake"} is 0 while asleep. A replica
// that is several engines is asleep while none of them is awake.
TEST(VllmMetricsReader, ReadsWhetherTheEngineIsAsleep) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  const std::string_view text =
      "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 0\n"
      "vllm:engine_sleep_state{model_name=\"m\",engine=\"0\",sleep_state=\"awake\"} 0.0\n"
      "vllm:engine_sleep_state{model_name=\"m\",engine=\"0\",sleep_state=\"weights_offloaded\"} "
      "1.0\n"
      "vllm:engine_sleep_state{model_name=\"m\",engine=\"1\",sleep_state=\"awake\"} 1.0\n";
  ASSERT_TRUE(ReadVllmMetrics(text, 2, true, &m, &error)) << error;
  EXPECT_EQ(m[0].asleep, std::optional<bool>(true));
  EXPECT_EQ(m[1].asleep, std::optional<bool>(false));
  ASSERT_TRUE(ReadVllmMetrics(text, 1, false, &m, &error)) << error;
  EXPECT_EQ(m[0].asleep, std::optional<bool>(false));  // one of its engines is awake
  ASSERT_TRUE(ReadVllmMetrics(kDataParallel, 2, true, &m, &error)) << error;
  EXPECT_EQ(m[0].asleep, std::nullopt);  // not published
}

TEST(VllmMetricsReader, CountsTheEnginesTheServerReports) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  int engines = -1;
  ASSERT_TRUE(ReadVllmMetrics(kDataParallel, 2, true, &m, &error, &engines)) << error;
  EXPECT_EQ(engines, 3);  // 0, 1 and 7: more than the two configured
  ASSERT_TRUE(ReadVllmMetrics("vllm:num_requests_running 2\n", 1, false, &m, &error, &engines));
  EXPECT_EQ(engines, 0);  // no engine label: nothing to compare
}

// A server running ranks 2 and 3 of a larger deployment (vLLM's hybrid or external load
// balancing) labels its engines by global rank; its rank header is local: engine 2 is replica 0.
TEST(VllmMetricsReader, EnginesOfAServerRunningLaterRanksCountFromItsFirst) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(
      ReadVllmMetrics("vllm:num_requests_running{engine=\"2\"} 5\n"
                      "vllm:num_requests_running{engine=\"3\"} 1\n"
                      "vllm:kv_cache_usage_perc{engine=\"3\"} 0.75\n",
                      2, true, &m, &error))
      << error;
  EXPECT_EQ(m[0].running, 5);
  EXPECT_EQ(m[1].running, 1);
  EXPECT_DOUBLE_EQ(m[1].kv_cache_usage, 0.75);
}

// Several API server processes may each publish an engine's gauges (label "pid"), some stale:
// the largest counts, not their sum or mean. vLLM 0.10 publishes the prefix-cache counters under
// both names: counted once.
TEST(VllmMetricsReader, GaugesPerProcessAndCountersUnderTwoNamesAreNotAddedUp) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(
      ReadVllmMetrics("vllm:kv_cache_usage_perc{engine=\"0\",pid=\"11\"} 0.8\n"
                      "vllm:kv_cache_usage_perc{engine=\"0\",pid=\"12\"} 0\n"
                      "vllm:num_requests_running{engine=\"0\",pid=\"11\"} 3\n"
                      "vllm:num_requests_running{engine=\"0\",pid=\"12\"} 3\n"
                      "vllm:prefix_cache_queries_total{engine=\"0\"} 100\n"
                      "vllm:gpu_prefix_cache_queries_total{engine=\"0\"} 100\n"
                      "vllm:prefix_cache_hits_total{engine=\"0\"} 40\n"
                      "vllm:gpu_prefix_cache_hits_total{engine=\"0\"} 40\n",
                      1, true, &m, &error))
      << error;
  EXPECT_DOUBLE_EQ(m[0].kv_cache_usage, 0.8);
  EXPECT_EQ(m[0].running, 3);
  EXPECT_EQ(m[0].prefix_cache_queries, 100);
  EXPECT_EQ(m[0].prefix_cache_hits, 40);
}

// Values no engine can have are not passed on: an infinite or NaN sample is left out (the admin
// API's JSON has no number for it), a count too large for an int is capped rather than wrapped
// round to zero (a swamped replica looked idle), a cache use over 1 is 1.
TEST(VllmMetricsReader, ImpossibleValuesAreLeftOutOrCapped) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(
      ReadVllmMetrics("vllm:num_requests_running{engine=\"0\"} 3000000000\n"
                      "vllm:num_requests_waiting{engine=\"0\"} 2147483648\n"
                      "vllm:kv_cache_usage_perc{engine=\"0\"} 7.5\n"
                      "vllm:num_requests_running{engine=\"1\"} -4\n"
                      "vllm:kv_cache_usage_perc{engine=\"1\"} +Inf\n"
                      "vllm:prefix_cache_queries_total{engine=\"1\"} +Inf\n"
                      "vllm:prefix_cache_hits_total{engine=\"1\"} NaN\n",
                      2, true, &m, &error))
      << error;
  EXPECT_EQ(m[0].running, 1000000);
  EXPECT_EQ(m[0].waiting, 1000000);
  EXPECT_DOUBLE_EQ(m[0].kv_cache_usage, 1.0);
  EXPECT_EQ(m[1].running, 0);
  EXPECT_DOUBLE_EQ(m[1].kv_cache_usage, 0.0);
  EXPECT_EQ(m[1].prefix_cache_queries, 0);
  EXPECT_EQ(m[1].prefix_cache_hits, 0);
}

// Found by fuzzing: sums and engine numbers that overflowed an int.
TEST(VllmMetricsReader, HugeSumsAndEngineNumbersDoNotOverflow) {
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "vllm:num_requests_running 1e9\n";
  std::vector<ScrapedMetrics> m;
  std::string error;
  ASSERT_TRUE(ReadVllmMetrics(many, 1, false, &m, &error)) << error;
  EXPECT_EQ(m[0].running, 1000000);
  ASSERT_TRUE(
      ReadVllmMetrics("vllm:num_requests_running{engine=\"5\"} 1\n"
                      "vllm:num_requests_running{engine=\"-2147483648\"} 1\n",
                      2, true, &m, &error));
  EXPECT_EQ(m[0].running, 1);  // engine 5, the server's first (a later rank's server)
  EXPECT_EQ(m[1].running, 0);  // no engine -2147483648 - 5
}

TEST(VllmMetricsReader, RejectsGarbage) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  EXPECT_FALSE(ReadVllmMetrics("<html>oops</html>\n", 1, false, &m, &error));
}

// vLLM started with --disable-log-stats still answers /metrics, with the Python process's series
// only: that is no load figure, not an idle replica.
TEST(VllmMetricsReader, ATextWithoutVllmSeriesIsNoReading) {
  std::vector<ScrapedMetrics> m;
  std::string error;
  EXPECT_FALSE(
      ReadVllmMetrics("# HELP python_gc_objects_collected_total Objects collected during gc\n"
                      "# TYPE python_gc_objects_collected_total counter\n"
                      "python_gc_objects_collected_total{generation=\"0\"} 1234.0\n"
                      "process_resident_memory_bytes 1.2e+09\n",
                      1, false, &m, &error));
  EXPECT_NE(error.find("--disable-log-stats"), std::string::npos) << error;
  EXPECT_FALSE(ReadVllmMetrics("", 1, false, &m, &error));
}

}  // namespace
}  // namespace warden
