// vLLM's data-parallel balancer: how one of vLLM's API servers picks an engine for a request.
//
// Each engine is scored waiting*4 + running; the lowest score wins. The scan starts at a rotating
// index (vLLM 0.26, PR #47420), so ties go round. A pick adds the number of API servers to the
// picked engine's waiting count (each of them stands for all when it guesses), so that picks
// between two broadcasts spread out. Each broadcast of vLLM's DP coordinator
// replaces those counts with the ones it holds. The engines report theirs at every step and the
// coordinator broadcasts them within 100 ms — except that in vLLM up to 0.26, dense (non-MoE)
// engines never reported (vLLM issue #48808, fixed by PR #49204 in 0.28): the coordinator holds
// zeros and broadcasts them every 5 s, when nothing changed. The counts then grow only with the
// picks: round-robin, blind to load.
//
// `vllm serve --data-parallel-size N` runs N API servers (0.26's default), each with a balancer
// of its own, starting its rotation at its own index; a connection is served by one of them.
#pragma once

#include <span>
#include <string_view>
#include <vector>

namespace warden {

struct EngineLoad {
  int waiting = 0;
  int running = 0;
  bool operator==(const EngineLoad&) const = default;
};

// When vLLM's DP coordinator publishes the engines' counts (vllm/v1/engine/coordinator.py): 100 ms
// after its last publication if they changed since, else 5 s after it. Between publications each
// balancer's own picks add up; a publication of unchanged counts would wipe them.
class DpCoordinator {
 public:
  static constexpr double kChangedInterval = 0.1;
  static constexpr double kUnchangedInterval = 5.0;

  // Whether the coordinator, looking at the engines' `counts` at `now` (seconds; looked at no
  // more often than every kChangedInterval), publishes them.
  bool Publishes(std::span<const EngineLoad> counts, double now);

 private:
  std::vector<EngineLoad> published_;
  double published_at_ = 0;
  bool ever_ = false;
};

class DpBalancer {
 public:
  enum class Mode {
    kStale,  // vLLM 0.26 with a dense model: zeros every 5 s ("vllm-dp")
    kFresh,  // the engines' counts every 100 ms ("vllm-dp-fresh")
  };

  // `start`: the engine its rotation starts at (API server i of N: i * num_engines / N);
  // `api_servers`: N, what a pick adds to the picked engine's waiting count.
  DpBalancer(int num_engines, Mode mode, int start = 0, int api_servers = 1)
      : mode_(mode),
        counts_(num_engines),
        start_(num_engines > 0 ? start % num_engines : 0),
        api_servers_(api_servers) {}

  // The engine for the next request, among those `usable` allows (all when it is empty); -1 when
  // none is.
  int Pick(const std::vector<bool>& usable = {});

  // The coordinator's broadcast, given the engines' current counts: in kStale mode they never
  // reached it, so the balancer's counts become zeros.
  void Broadcast(std::span<const EngineLoad> engines);

  // How often the coordinator may broadcast: every 100 ms while counts change (DpCoordinator),
  // every 5 s otherwise (zeros in kStale mode, which never change).
  double broadcast_interval_s() const {
    return mode_ == Mode::kFresh ? DpCoordinator::kChangedInterval
                                 : DpCoordinator::kUnchangedInterval;
  }

  Mode mode() const { return mode_; }
  const std::vector<EngineLoad>& counts() const { return counts_; }

 private:
  Mode mode_;
  std::vector<EngineLoad> counts_;
  int start_;
  int api_servers_;
};

// "vllm-dp" or "vllm-dp-fresh"; false for anything else.
bool ParseDpBalancerMode(std::string_view name, DpBalancer::Mode* mode);
std::string_view DpBalancerModeName(DpBalancer::Mode mode);

}  // namespace warden
