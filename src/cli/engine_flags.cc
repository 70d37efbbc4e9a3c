#include "cli/engine_flags.h"

#include "cli/flag_checks.h"

namespace warden {

void AddEngineFlags(CLI::App* cmd, const EngineFlagTargets& to) {
  cmd->add_option("--profile", *to.profile,
                  "Hardware profile of every replica (warden sim --list-profiles)")
      ->capture_default_str();
  cmd->add_option("--reply-tokens", *to.reply_tokens,
                  "The model's natural reply length in tokens (max_tokens may cut it shorter)")
      ->capture_default_str();
  cmd->add_option("--api-latency", *to.api_latency_s,
                  "Seconds of network and API-server latency per request (default: the profile's)")
      ->check(NotNegative);
  cmd->add_option("--kv-offloading-size", *to.kv_offloading_gib,
                  "As vLLM's (native backend): GiB of CPU memory per replica that prompt blocks "
                  "are copied to as they are computed and read back from instead of recomputed "
                  "(default: none)");
  // (a callback, not a "!" flag, whose help CLI11 writes as "...-isl{false}")
  bool* reserve_full_prompt = to.reserve_full_prompt;
  cmd->add_flag_callback(
      "--no-scheduler-reserve-full-isl", [reserve_full_prompt] { *reserve_full_prompt = false; },
      "As vLLM's before scheduler_reserve_full_isl: let a waiting request in once its first "
      "chunk fits in the KV cache (default: only when its whole prompt does)");
}

}  // namespace warden
