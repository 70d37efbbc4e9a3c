#include "core/workload/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/filler.h"
#include "util/split_mix.h"

namespace warden {
namespace {

uint64_t Mix(uint64_t x) {
  return SplitMix64(x);
}

int Jitter(uint64_t seed, int base, int jitter) {
  if (jitter <= 0) return base;
  const uint64_t spread = 2 * static_cast<uint64_t>(jitter) + 1;  // past INT_MAX for large ones
  return static_cast<int>(int64_t{base} - jitter + static_cast<int64_t>(Mix(seed) % spread));
}

}  // namespace

std::string ValidateWorkload(const WorkloadOptions& o) {
  // Sizes past any model's context: a prompt this long is text a session keeps in memory.
  constexpr int kMaxTokens = 10'000'000;
  if (o.system_tokens < 0 || o.system_tokens > kMaxTokens)
    return fmt::format("--system-tokens: must be 0 to {}, got {}", kMaxTokens, o.system_tokens);
  if (o.first_message_tokens < 1 || o.first_message_tokens > kMaxTokens) {
    return fmt::format("--first-tokens: must be 1 to {}, got {}", kMaxTokens,
                       o.first_message_tokens);
  }
  if (o.first_message_jitter < 0 || o.first_message_jitter >= o.first_message_tokens) {
    return fmt::format("--first-jitter: must be 0 to {}, got {}", o.first_message_tokens - 1,
                       o.first_message_jitter);
  }
  if (o.turn_tokens < 1 || o.turn_tokens > kMaxTokens)
    return fmt::format("--turn-tokens: must be 1 to {}, got {}", kMaxTokens, o.turn_tokens);
  if (o.turn_jitter < 0 || o.turn_jitter >= o.turn_tokens) {
    return fmt::format("--turn-jitter: must be 0 to {}, got {}", o.turn_tokens - 1, o.turn_jitter);
  }
  if (o.turns < 1 || o.turns > 100'000)
    return fmt::format("--turns: must be 1 to 100000, got {}", o.turns);
  if (o.max_output_tokens < 1 || o.max_output_tokens > kMaxTokens)
    return fmt::format("--max-tokens: must be 1 to {}, got {}", kMaxTokens, o.max_output_tokens);
  if (!(o.tool_seconds >= 0 && o.tool_seconds <= 3600))
    return fmt::format("--tool-seconds: must be 0 to 3600, got {}", o.tool_seconds);
  return {};
}

std::string WorkloadFlags(const WorkloadOptions& o) {
  const WorkloadOptions d;
  std::string flags;
  const auto add = [&](std::string_view flag, auto value, auto default_value) {
    if (value == default_value) return;
    if (!flags.empty()) flags += ' ';
    flags += fmt::format("{} {}", flag, value);
  };
  add("--system-tokens", o.system_tokens, d.system_tokens);
  add("--first-tokens", o.first_message_tokens, d.first_message_tokens);
  add("--first-jitter", o.first_message_jitter, d.first_message_jitter);
  add("--turn-tokens", o.turn_tokens, d.turn_tokens);
  add("--turn-jitter", o.turn_jitter, d.turn_jitter);
  add("--turns", o.turns, d.turns);
  add("--max-tokens", o.max_output_tokens, d.max_output_tokens);
  add("--tool-seconds", o.tool_seconds, d.tool_seconds);
  if (o.attribution_per_session != d.attribution_per_session)
    add("--attribution", std::string_view("per-session"), std::string_view("shared"));
  return flags;
}

double ToolPause(uint64_t seed, double mean) {
  if (mean <= 0) return 0;
  const double u = static_cast<double>(Mix(seed) >> 11) * 0x1.0p-53;  // in [0, 1)
  return std::min(-mean * std::log1p(-u), kMaxToolPauses * mean);
}

std::string FillerText(uint64_t seed, int n) {
  std::string s;
  s.reserve(static_cast<size_t>(n) * 7);
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += PromptWord(seed, static_cast<uint64_t>(i));
  }
  return s;
}

SessionScript::SessionScript(const WorkloadOptions& options, uint64_t stage, uint64_t index,
                             uint64_t variant)
    : options_(options),
      session_seed_(Mix(Mix(options.seed) ^ Mix(stage * 1000003 + 17) ^ Mix(index + 1))),
      text_salt_(variant == 0 ? 0 : Mix(variant * 0x9e3779b97f4a7c15ULL)) {
  const uint64_t a = Mix(session_seed_ ^ text_salt_), b = Mix(a);
  id_ = fmt::format("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", uint32_t(a), uint16_t(a >> 32),
                    uint16_t(a >> 48) & 0xfff, uint16_t(b) & 0xfff, b >> 16 & 0xffffffffffffULL);
}

uint64_t SessionScript::TurnSeed(int turn) const {
  return Mix(session_seed_ + 0x1000 * uint64_t(turn + 1));
}

int SessionScript::user_tokens(int turn) const {
  return turn == 0
             ? Jitter(TurnSeed(turn), options_.first_message_tokens, options_.first_message_jitter)
             : Jitter(TurnSeed(turn), options_.turn_tokens, options_.turn_jitter);
}

std::string SessionScript::UserText(int turn) const {
  return FillerText(TurnSeed(turn) ^ 0xabcdef ^ text_salt_, user_tokens(turn));
}

double SessionScript::ToolSecondsBefore(int turn) const {
  return ToolPause(TurnSeed(turn) ^ 0x70017ULL, options_.tool_seconds);
}

std::string SessionScript::AttributionLine() const {
  const uint64_t v = options_.attribution_per_session ? session_seed_ % 1000 : 0;
  return fmt::format("x-anthropic-billing-header: cc_version=2.1.{}; cc_entrypoint=cli;", 328 + v);
}

std::string SessionScript::SystemPrompt(const WorkloadOptions& options) {
  return FillerText(Mix(options.seed ^ 0x5157ULL), options.system_tokens);
}

}  // namespace warden
