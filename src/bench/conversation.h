// One synthetic session as a client sends it: the whole history on every turn, in the Anthropic
// Messages shape Claude Code uses (streaming, X-Claude-Code-Session-Id, metadata.user_id) or as an
// OpenAI chat completion.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/workload/workload.h"

namespace warden {

enum class BenchApi { kAnthropic, kOpenAi };

struct BenchRequest {
  std::string target;  // path
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class Conversation {
 public:
  // `system` is the shared system prompt (SessionScript::SystemPrompt), kept by the caller.
  // Without `session_ids` its requests carry no session id (no header, no metadata.user_id, no
  // "user"), as a plain SDK client's do. `variant`: SessionScript's.
  Conversation(const WorkloadOptions& workload, const std::string& system, uint64_t stage,
               uint64_t index, BenchApi api, std::string model, bool session_ids = true,
               uint64_t variant = 0);

  const SessionScript& script() const { return script_; }
  int turn() const { return turn_; }
  bool done() const { return turn_ >= script_.turns(); }

  // Anthropic requests: a system message after each user turn, kept in the history, as Claude
  // Code 2.1 sends one after every tool result ("<total_tokens>N tokens left</total_tokens>").
  void set_system_reminders(bool on) { system_reminders_ = on; }

  // The request of the current turn.
  BenchRequest NextRequest() const;
  // Records the assistant's reply to the current turn and moves to the next.
  void RecordReply(const std::string& text);

 private:
  // The current turn's user message, and its reminder if any, as JSON array elements.
  std::string UserMessages() const;

  SessionScript script_;
  const WorkloadOptions& workload_;
  const std::string& system_;
  BenchApi api_;
  std::string model_;
  bool session_ids_;
  bool system_reminders_ = false;
  std::string messages_;  // the JSON array's elements so far, without the brackets
  int turn_ = 0;
};

}  // namespace warden
