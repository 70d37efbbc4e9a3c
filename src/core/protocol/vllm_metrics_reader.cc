#include "core/protocol/vllm_metrics_reader.h"

#include <charconv>
#include <set>

#include "util/prometheus.h"

namespace warden {
namespace {

int ParseInt(std::string_view s, int fallback) {
  int v;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size() ? v : fallback;
}

}  // namespace

bool ReadVllmMetrics(std::string_view text, int num_replicas, bool data_parallel,
                     std::vector<ScrapedMetrics>* out, std::string* error, int* engines) {
  std::vector<PrometheusSample> samples;
  if (!ParsePrometheusText(text, &samples, error)) return false;
  out->assign(num_replicas, ScrapedMetrics{});
  std::vector<int> kv_samples(num_replicas, 0);
  std::set<std::string_view> engine_labels;
  for (const PrometheusSample& s : samples) {
    if (!s.name.starts_with("vllm:")) continue;
    if (const std::string_view engine = s.label("engine"); !engine.empty())
      engine_labels.insert(engine);
    int replica = 0;
    if (data_parallel) {
      replica = ParseInt(s.label("engine"), -1);
      if (replica < 0 || replica >= num_replicas) continue;
    }
    ScrapedMetrics& m = (*out)[replica];
    const std::string_view name = std::string_view(s.name).substr(5);
    if (name == "num_requests_running") {
      m.running += static_cast<int>(s.value);
    } else if (name == "num_requests_waiting") {
      m.waiting += static_cast<int>(s.value);
    } else if (name == "kv_cache_usage_perc" || name == "gpu_cache_usage_perc") {
      m.kv_cache_usage += s.value;  // averaged below over the engines of the replica
      ++kv_samples[replica];
    } else if (name == "prefix_cache_queries_total" || name == "gpu_prefix_cache_queries_total") {
      m.prefix_cache_queries += s.value;
    } else if (name == "prefix_cache_hits_total" || name == "gpu_prefix_cache_hits_total") {
      m.prefix_cache_hits += s.value;
    } else if (name == "cache_config_info") {
      m.block_size = ParseInt(s.label("block_size"), m.block_size);
      m.num_gpu_blocks += ParseInt(s.label("num_gpu_blocks"), 0);
    }
  }
  for (int r = 0; r < num_replicas; ++r) {
    if (kv_samples[r] > 1) (*out)[r].kv_cache_usage /= kv_samples[r];
  }
  if (engines) *engines = static_cast<int>(engine_labels.size());
  return true;
}

}  // namespace warden
