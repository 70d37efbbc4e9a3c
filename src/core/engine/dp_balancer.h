// vLLM's data-parallel balancer (the API server's pick of an engine for each request).
//
// Each engine is scored waiting*4 + running; the lowest score wins, ties to the lowest index. A
// pick adds one to the picked engine's waiting count, so that picks between two refreshes spread
// out. Every refresh (100 ms in vLLM) replaces the counts with the engines' published ones — but in
// vLLM up to 0.26, dense (non-MoE) engines never published theirs (vLLM issue #48808), so the
// counts only grow with the picks and the balancer degrades to round-robin. Both behaviours are
// available.
#pragma once

#include <span>
#include <string_view>
#include <vector>

namespace warden {

struct EngineLoad {
  int waiting = 0;
  int running = 0;
};

class DpBalancer {
 public:
  enum class Mode {
    kStale,  // vLLM 0.26 with a dense model: published counts never arrive ("vllm-dp")
    kFresh,  // counts refreshed from the engines at every Refresh ("vllm-dp-fresh")
  };

  DpBalancer(int num_engines, Mode mode) : mode_(mode), counts_(num_engines) {}

  // The engine for the next request.
  int Pick();

  // The engines' current counts, published every refresh interval.
  void Refresh(std::span<const EngineLoad> published);

  Mode mode() const { return mode_; }
  const std::vector<EngineLoad>& counts() const { return counts_; }

 private:
  const Mode mode_;
  std::vector<EngineLoad> counts_;
};

// "vllm-dp" or "vllm-dp-fresh"; false for anything else.
bool ParseDpBalancerMode(std::string_view name, DpBalancer::Mode* mode);
std::string_view DpBalancerModeName(DpBalancer::Mode mode);

inline constexpr double kDpRefreshIntervalS = 0.1;

}  // namespace warden
