// The engine model's flags `warden sim` and `warden lab` share (same names, same meaning): the
// hardware profile, and the vLLM settings both model.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace warden {

// Where each flag's value goes (each must outlive parsing).
struct EngineFlagTargets {
  std::string* profile;
  int* reply_tokens;
  double* api_latency_s;      // < 0: the profile's
  double* kv_offloading_gib;  // EngineProfile::kv_offloading_gib, per replica
  bool* reserve_full_prompt;  // EngineProfile::reserve_full_prompt
};

// Adds --profile, --reply-tokens, --api-latency, --kv-offloading-size and
// --no-scheduler-reserve-full-isl to `cmd`.
void AddEngineFlags(CLI::App* cmd, const EngineFlagTargets& to);

}  // namespace warden
