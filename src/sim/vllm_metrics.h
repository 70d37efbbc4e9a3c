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
};

std::string VllmMetricsText(std::string_view model_name, std::span<const EngineView> engines);

}  // namespace warden
