#include "cli/workload_flags.h"

#include <charconv>
#include <cstdint>
#include <string>

namespace warden {

void AddWorkloadFlags(CLI::App* cmd, WorkloadOptions* w, std::string* attribution) {
  cmd->add_option("--seed", w->seed,
                  "Seed of the synthetic sessions: the same seed gives the same sizes (the bench's "
                  "words and "
                  "session ids are new each run, so that no run finds the last one's in a cache)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            uint64_t value = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
            return ec == std::errc() && end == text.data() + text.size()
                       ? std::string()
                       : "must be a whole number from 0 to 18446744073709551615";
          },
          "SEED"));
  cmd->add_option("--system-tokens", w->system_tokens,
                  "Tokens of the system prompt all sessions share")
      ->capture_default_str();
  cmd->add_option("--first-tokens", w->first_message_tokens, "Tokens of a session's first message")
      ->capture_default_str();
  cmd->add_option("--first-jitter", w->first_message_jitter,
                  "± jitter of the first message, tokens")
      ->capture_default_str();
  cmd->add_option("--turn-tokens", w->turn_tokens, "New tokens per later turn")
      ->capture_default_str();
  cmd->add_option("--turn-jitter", w->turn_jitter, "± jitter of a later turn, tokens")
      ->capture_default_str();
  cmd->add_option("--turns", w->turns, "Turns per session (the first message included)")
      ->capture_default_str();
  cmd->add_option("--max-tokens", w->max_output_tokens, "Most output tokens per turn")
      ->capture_default_str();
  cmd->add_option("--tool-seconds", w->tool_seconds,
                  "Mean seconds an agent's tools run between a reply and the session's next "
                  "request (exponential, at most 10 means; 0: at once)")
      ->capture_default_str();
  cmd->add_option("--attribution", *attribution,
                  "Claude Code's attribution block: shared (one for all sessions) or per-session")
      ->capture_default_str();
}

std::string ApplyAttribution(const std::string& attribution, WorkloadOptions* w) {
  if (attribution == "shared") {
    w->attribution_per_session = false;
  } else if (attribution == "per-session") {
    w->attribution_per_session = true;
  } else {
    return "--attribution: must be shared or per-session, got '" + attribution + "'";
  }
  return {};
}

}  // namespace warden
