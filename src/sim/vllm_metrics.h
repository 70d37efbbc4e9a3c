// vLLM's /metrics for simulated engines: the same names, types and labels as vLLM's V1 loggers.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/engine/engine.h"

namespace warden {

struct EngineView {
  const Engine* engine;
  int rank;  // the `engine` label
  // Simulated seconds its steps ended later than the engine model says (the process fell behind
  // real time at its time scale): warden_sim_late_seconds_total, beside vLLM's series.
  double late_s = 0;
  int sleep_level = -1;  // sleep mode's level (0, 1 or 2), -1 awake: vllm:engine_sleep_state
};

std::string VllmMetricsText(std::string_view model_name, std::span<const EngineView> engines);

}  // namespace warden
