// The load test's synthetic Claude-Code-style sessions (SPEC §6), shared by `warden bench` (over
// HTTP) and `warden lab` (in simulated time) so both run the very same conversations.
//
// A session: a system prompt shared by all sessions, a first user message unique to the session,
// then more turns of new user text; at most `max_output_tokens` generated per turn. Sizes are in
// tokens of the simulator's tokenizer (one word = one token) and jittered, as the seed's were
// (its first message measured 7.2 K to 7.5 K tokens, turns "about" 400): identical sizes would put
// closed-loop sessions in lockstep, an artefact. Everything is a pure function of the options and
// the session's place (stage, index): the same seed gives the same sessions in every variant.
#pragma once

#include <cstdint>
#include <string>

namespace warden {

struct WorkloadOptions {
  int system_tokens = 3500;
  int first_message_tokens = 7300;
  int first_message_jitter = 150;  // uniform ± this many tokens
  int turn_tokens = 400;
  int turn_jitter = 40;
  int turns = 6;  // the first message and 5 more turns
  int max_output_tokens = 256;
  // Claude Code's attribution system block: the same for all sessions, or one per session (it
  // varies between versions; vLLM strips it before templating either way).
  bool attribution_per_session = false;
  // Mean seconds an agent's tools run between a reply and the request that follows it (reading
  // files, running commands): 0 sends the next request at once, as the seed's load test did. Each
  // pause is exponential with this mean, at most kMaxToolPauses of it, the same in every variant.
  double tool_seconds = 0;
  uint64_t seed = 1;
};

// The longest tool pause, in means (WorkloadOptions::tool_seconds).
inline constexpr double kMaxToolPauses = 10;

// An exponential pause of mean `mean` seconds drawn from `seed` (at most kMaxToolPauses means).
double ToolPause(uint64_t seed, double mean);

// An error naming the option and the reason, or empty.
std::string ValidateWorkload(const WorkloadOptions& options);

// The options that differ from the defaults, as flags ("--first-tokens 20000 --tool-seconds 5"),
// the seed left out: for a run's description.
std::string WorkloadFlags(const WorkloadOptions& options);

// One session: its id and the user text of each turn.
class SessionScript {
 public:
  // `stage` and `index` place the session: the index-th session started in a stage. `variant` > 0
  // keeps the session's sizes (its turns and their lengths) but gives it other words and another
  // id: the load test's variants then run the same workload without one finding its prompts in
  // the prefix cache another left behind.
  SessionScript(const WorkloadOptions& options, uint64_t stage, uint64_t index,
                uint64_t variant = 0);

  const std::string& id() const { return id_; }  // a UUID-shaped session id
  int turns() const { return options_.turns; }
  // Tokens of the user text of turn t (0: the first message).
  int user_tokens(int turn) const;
  // The user text of turn t.
  std::string UserText(int turn) const;
  // Seconds the session's tools run before turn t's request (t >= 1; WorkloadOptions::
  // tool_seconds), after the reply to turn t - 1.
  double ToolSecondsBefore(int turn) const;
  // Claude Code's attribution line for this session.
  std::string AttributionLine() const;

  // The system prompt all sessions share.
  static std::string SystemPrompt(const WorkloadOptions& options);

 private:
  uint64_t TurnSeed(int turn) const;

  WorkloadOptions options_;
  uint64_t session_seed_;
  uint64_t text_salt_;  // 0 for variant 0
  std::string id_;
};

// n words of filler text under `seed`, one token each.
std::string FillerText(uint64_t seed, int n);

}  // namespace warden
