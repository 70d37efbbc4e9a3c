#include "core/protocol/vllm_metrics_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "util/prometheus.h"

namespace warden {
namespace {

int ParseInt(std::string_view s, int fallback) {
  int v;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size() ? v : fallback;
}

// A label holding a positive Python float ("16.0"); 0 for anything else ("None": not set).
double PositiveFloat(std::string_view s) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(v) && v > 0 ? v : 0;
}

// A label holding a Python bool as vLLM prints its config ("True", "False"); empty if it is not
// one.
std::optional<bool> PythonBool(std::string_view s) {
  if (s == "True" || s == "true") return true;
  if (s == "False" || s == "false") return false;
  return std::nullopt;
}

// One replica's gauges as one API server process reports them: summed over the replica's engines
// (the KV-cache use averaged).
struct Gauges {
  int running = 0;
  int waiting = 0;
  double kv_sum = 0, old_kv_sum = 0;  // vllm:kv_cache_usage_perc; vllm:gpu_cache_usage_perc
  int kv_samples = 0, old_kv_samples = 0;

  double kv() const {
    if (kv_samples > 0) return kv_sum / kv_samples;
    return old_kv_samples > 0 ? old_kv_sum / old_kv_samples : 0;
  }
};

// One replica's prefix-cache counters, under vLLM's current and older names.
struct PrefixCounters {
  double queries = 0, hits = 0;
  double external_queries = -1, external_hits = 0;  // a KV connector's (CPU offloading)
  double old_queries = 0, old_hits = 0;
  // The current names were seen: the older ones (vLLM 0.10 has both) are not used.
  bool current = false;
};

// Maps a data-parallel server's engine labels to replica indexes. The labels are global ranks:
// a server that runs ranks 2 and 3 of a larger deployment (vLLM's hybrid or external load
// balancing) labels its engines 2 and 3, while the rank header it reads is local (0 and 1). So
// labels are taken from 0 when they fit, and else counted from the smallest.
int EngineOffset(const std::vector<PrometheusSample>& samples, int num_replicas) {
  int lowest = -1, highest = -1;
  for (const PrometheusSample& s : samples) {
    if (!s.name.starts_with("vllm:")) continue;
    const int engine = ParseInt(s.label("engine"), -1);
    if (engine < 0) continue;
    lowest = lowest < 0 ? engine : std::min(lowest, engine);
    highest = std::max(highest, engine);
  }
  return highest >= num_replicas && lowest > 0 ? lowest : 0;
}

// A gauge of requests as an int: more than any engine holds (a million) is taken as a million,
// not wrapped round to a negative or zero count that would make a swamped replica look idle.
constexpr int kMostRequests = 1000000;
int RequestCount(double value) {
  return static_cast<int>(std::min<double>(value, kMostRequests));
}

// `count` + `value`, the sum of a replica's series, held to a million like one of them.
void AddRequests(int* count, double value) {
  *count = std::min(*count + RequestCount(value), kMostRequests);
}

}  // namespace

bool ReadVllmMetrics(std::string_view text, int num_replicas, bool data_parallel,
                     std::vector<ScrapedMetrics>* out, std::string* error, int* engines) {
  std::vector<PrometheusSample> samples;
  if (!ParsePrometheusText(text, &samples, error)) return false;
  if (std::none_of(samples.begin(), samples.end(),
                   [](const PrometheusSample& s) { return s.name.starts_with("vllm:"); })) {
    *error = "no vllm: series (a vLLM started with --disable-log-stats publishes none)";
    return false;
  }
  out->assign(num_replicas, ScrapedMetrics{});
  // With several API server processes, vLLM's gauges may come once per process (label "pid"),
  // some of them stale: the largest is taken rather than their sum.
  std::vector<std::map<std::string_view, Gauges>> gauges(num_replicas);
  std::vector<PrefixCounters> prefix(num_replicas);
  std::set<std::string_view> engine_labels;
  // vllm:cache_config_info: vLLM sums num_gpu_blocks over a data-parallel server's engines and
  // gives every engine's series that sum; series per process repeat it. So the largest is the
  // server's, and an engine's is that over the engines reporting it.
  int server_blocks = 0;
  std::set<std::string_view> config_engines;
  std::vector<bool> has_config(num_replicas, false);
  const int offset = data_parallel ? EngineOffset(samples, num_replicas) : 0;
  for (const PrometheusSample& s : samples) {
    if (!s.name.starts_with("vllm:")) continue;
    // A count cannot be negative, infinite or NaN: such a sample says nothing (and would reach
    // the admin API's JSON, which has no number for them).
    if (!std::isfinite(s.value) || s.value < 0) continue;
    if (const std::string_view engine = s.label("engine"); !engine.empty())
      engine_labels.insert(engine);
    if (s.name == "vllm:cache_config_info") {  // every engine's, in range here or not
      server_blocks = std::max(server_blocks, ParseInt(s.label("num_gpu_blocks"), 0));
      config_engines.insert(s.label("engine"));
    }
    int replica = 0;
    if (data_parallel) {
      const int engine = ParseInt(s.label("engine"), -1);
      if (engine < offset || engine - offset >= num_replicas) continue;
      replica = engine - offset;
    }
    ScrapedMetrics& m = (*out)[replica];
    Gauges& g = gauges[replica][s.label("pid")];
    PrefixCounters& p = prefix[replica];
    const std::string_view name = std::string_view(s.name).substr(5);
    if (name == "num_requests_running") {
      AddRequests(&g.running, s.value);
    } else if (name == "num_requests_waiting") {
      AddRequests(&g.waiting, s.value);
    } else if (name == "kv_cache_usage_perc") {
      g.kv_sum += std::min(s.value, 1.0);  // a share of the cache
      ++g.kv_samples;
    } else if (name == "gpu_cache_usage_perc") {
      g.old_kv_sum += std::min(s.value, 1.0);
      ++g.old_kv_samples;
    } else if (name == "prefix_cache_queries_total") {
      p.queries += s.value;
      p.current = true;
    } else if (name == "prefix_cache_hits_total") {
      p.hits += s.value;
      p.current = true;
    } else if (name == "external_prefix_cache_queries_total") {
      p.external_queries = std::max(0.0, p.external_queries) + s.value;
    } else if (name == "external_prefix_cache_hits_total") {
      p.external_hits += s.value;
    } else if (name == "gpu_prefix_cache_queries_total") {
      p.old_queries += s.value;
    } else if (name == "gpu_prefix_cache_hits_total") {
      p.old_hits += s.value;
    } else if (name == "prompt_tokens_total" || name == "generation_tokens_total" ||
               name == "iteration_tokens_total_count") {
      m.engine_work = std::max(0.0, m.engine_work) + s.value;
    } else if (name == "engine_sleep_state" && s.label("sleep_state") == "awake") {
      m.asleep = m.asleep.value_or(true) && s.value == 0;  // asleep while no engine is awake
    } else if (name == "cache_config_info") {
      m.block_size = ParseInt(s.label("block_size"), m.block_size);
      if (const std::optional<bool> on = PythonBool(s.label("enable_prefix_caching")))
        m.prefix_caching = m.prefix_caching.value_or(true) && *on;  // off if any engine is off
      m.kv_offloading_gib = PositiveFloat(s.label("kv_offloading_size"));  // each engine's own
      m.kv_size_tokens = static_cast<int64_t>(
          std::min(1e12, PositiveFloat(s.label("kv_cache_size_tokens"))));  // (no overflow)
      has_config[replica] = true;
    }
  }
  const int engine_blocks = server_blocks / std::max<int>(1, config_engines.size());
  for (int r = 0; r < num_replicas; ++r) {
    ScrapedMetrics& m = (*out)[r];
    if (has_config[r]) m.num_gpu_blocks = data_parallel ? engine_blocks : server_blocks;
    // One server as one replica: its engines' host memory and cache together.
    if (!data_parallel) {
      m.kv_offloading_gib *= std::max<size_t>(1, config_engines.size());
      m.kv_size_tokens *= static_cast<int64_t>(std::max<size_t>(1, config_engines.size()));
    }
    for (const auto& [pid, g] : gauges[r]) {
      m.running = std::max(m.running, g.running);
      m.waiting = std::max(m.waiting, g.waiting);
      m.kv_cache_usage = std::max(m.kv_cache_usage, g.kv());
    }
    const PrefixCounters& p = prefix[r];
    m.prefix_cache_queries = p.current ? p.queries : p.old_queries;
    m.prefix_cache_hits = p.current ? p.hits : p.old_hits;
    m.external_prefix_cache_queries = p.external_queries;
    m.external_prefix_cache_hits = p.external_queries >= 0 ? p.external_hits : 0;
  }
  if (engines) *engines = static_cast<int>(engine_labels.size());
  return true;
}

}  // namespace warden
