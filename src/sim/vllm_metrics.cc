#include "sim/vllm_metrics.h"

#include <fmt/format.h>

#include <string>

#include "util/prometheus.h"

namespace warden {
namespace {

// A config value as vLLM's cache_config_info prints it (Python's str): "16.0", "0.5"; "None" when
// it is not set.
std::string PythonFloat(double gib) {
  if (gib <= 0) return "None";
  std::string text = fmt::format("{}", gib);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

Labels EngineLabels(std::string_view model, int rank) {
  return {{"model_name", std::string(model)}, {"engine", std::to_string(rank)}};
}

}  // namespace

std::string VllmMetricsText(std::string_view model, std::span<const EngineView> engines) {
  PrometheusWriter w;
  struct Gauge {
    const char* name;
    const char* help;
    double (*value)(const Engine&);
  };
  const Gauge gauges[] = {
      {"vllm:num_requests_running", "Number of requests in model execution batches.",
       [](const Engine& e) { return double(e.num_running()); }},
      {"vllm:num_requests_waiting", "Number of requests waiting to be processed.",
       [](const Engine& e) { return double(e.num_waiting()); }},
      {"vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
       [](const Engine& e) { return e.kv_cache_usage(); }},
  };
  for (const Gauge& g : gauges) {
    w.Family(g.name, "gauge", g.help);
    for (const EngineView& v : engines)
      w.Sample(g.name, EngineLabels(model, v.rank), g.value(*v.engine));
  }

  struct Counter {
    const char* name;
    const char* help;
    int64_t EngineCounters::*field;
  };
  const Counter counters[] = {
      {"vllm:prefix_cache_queries_total",
       "Prefix cache queries, in terms of number of queried tokens.",
       &EngineCounters::prefix_cache_queries},
      {"vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
       &EngineCounters::prefix_cache_hits},
      {"vllm:prompt_tokens_total", "Number of prefill tokens processed.",
       &EngineCounters::prompt_tokens},
      {"vllm:generation_tokens_total", "Number of generation tokens processed.",
       &EngineCounters::generation_tokens},
      {"vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
       &EngineCounters::preemptions},
  };
  for (const Counter& c : counters) {
    w.Family(c.name, "counter", c.help);
    for (const EngineView& v : engines) {
      w.Sample(c.name, EngineLabels(model, v.rank), double(v.engine->counters().*(c.field)));
    }
  }

  // As vLLM with a KV connector (CPU offloading): what was looked up beyond the GPU's cache, and
  // read back from there.
  if (!engines.empty() && engines.front().engine->cpu_tier()) {
    const Counter external[] = {
        {"vllm:external_prefix_cache_queries_total",
         "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
         "of number of queried tokens.",
         &EngineCounters::external_prefix_cache_queries},
        {"vllm:external_prefix_cache_hits_total",
         "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
         "number of cached tokens.",
         &EngineCounters::external_prefix_cache_hits},
    };
    for (const Counter& c : external) {
      w.Family(c.name, "counter", c.help);
      for (const EngineView& v : engines) {
        w.Sample(c.name, EngineLabels(model, v.rank), double(v.engine->counters().*(c.field)));
      }
    }
  }

  w.Family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const EngineView& v : engines) {
    const EngineCounters& c = v.engine->counters();
    const std::pair<const char*, int64_t> reasons[] = {
        {"stop", c.requests_stopped}, {"length", c.requests_length}, {"abort", c.requests_aborted}};
    for (const auto& [reason, n] : reasons) {
      Labels l = EngineLabels(model, v.rank);
      l.emplace_back("finished_reason", reason);
      w.Sample("vllm:request_success_total", l, double(n));
    }
  }

  w.Family("vllm:time_to_first_token_seconds", "histogram",
           "Histogram of time to first token in seconds.");
  for (const EngineView& v : engines) {
    w.HistogramSamples("vllm:time_to_first_token_seconds", EngineLabels(model, v.rank),
                       v.engine->counters().ttft);
  }

  // As vLLM does: a data-parallel server's engines each report the sum of their blocks (the
  // front end adds up the engines' counts into the one cache config they all print).
  int64_t server_blocks = 0;
  for (const EngineView& v : engines) server_blocks += v.engine->profile().num_gpu_blocks;
  w.Family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  for (const EngineView& v : engines) {
    const EngineProfile& p = v.engine->profile();
    w.Sample("vllm:cache_config_info",
             {{"block_size", std::to_string(p.block_size)},
              {"cache_dtype", "auto"},
              {"enable_prefix_caching", p.enable_prefix_caching ? "True" : "False"},
              {"kv_offloading_backend", "native"},
              {"kv_offloading_size", PythonFloat(p.kv_offloading_gib)},
              {"num_cpu_blocks", "None"},
              {"num_gpu_blocks", std::to_string(server_blocks)},
              {"engine", std::to_string(v.rank)}},
             1);
  }
  // Level 0 (a pause) shows as all 0, as in vLLM.
  w.Family("vllm:engine_sleep_state", "gauge", "Engine sleep state; awake = 1 means awake.");
  for (const EngineView& v : engines) {
    for (const auto& [state, value] : {std::pair{"awake", v.sleep_level < 0},
                                       {"weights_offloaded", v.sleep_level == 1},
                                       {"discard_all", v.sleep_level == 2}}) {
      Labels l = EngineLabels(model, v.rank);
      l.emplace_back("sleep_state", state);
      w.Sample("vllm:engine_sleep_state", l, value);
    }
  }
  w.Family("warden_sim_late_seconds_total", "counter",
           "Simulated seconds the engine's steps ended late: the simulator fell behind real time "
           "at its --time-scale, and ran slower than the engine model says.");
  for (const EngineView& v : engines)
    w.Sample("warden_sim_late_seconds_total", EngineLabels(model, v.rank), v.late_s);
  return w.Take();
}

}  // namespace warden
