// Reads what routing needs from a vLLM server's /metrics text, per engine.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/routing/model_router.h"

namespace warden {

// Fills one ScrapedMetrics per replica behind the server. `data_parallel`: the server's engines
// are the replicas (engine label r is replica r, out-of-range engines ignored; labels all past
// the replicas count from the smallest, as a server running later ranks of a larger deployment
// labels them); otherwise the server is one replica and its engines are summed. Gauges published
// once per API server process (label pid) count once, at their largest. Understands vLLM's older
// names (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*), used only when the current ones are
// absent. Returns false with an error when the text
// is not Prometheus exposition format, or has no vllm: series at all (read as all idle, a server
// started with --disable-log-stats would blind placement to its load). `engines`, if not null, gets
// how many engines the server reports (distinct `engine` labels; 0 when no series has one), so that
// a data_parallel_size that does not match the server can be told.
bool ReadVllmMetrics(std::string_view text, int num_replicas, bool data_parallel,
                     std::vector<ScrapedMetrics>* out, std::string* error, int* engines = nullptr);

}  // namespace warden
