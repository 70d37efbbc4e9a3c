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
};

std::string VllmMetricsText(std::string_view model_name, std::span<const EngineView> engines);

}  // namespace warden
