// Claude Code's system messages inside an Anthropic request's "messages", given the role "user".
//
// Why: Claude Code appends a role:"system" message to the conversation after every tool result (a
// reminder: "<total_tokens>N tokens left</total_tokens>") and keeps the earlier ones in its
// history. Where the model's chat template refuses a system message after the first (Qwen 3.5's and
// later, among others), vLLM merges every such message into the leading system block: each turn
// then changes the prompt right after the system prompt, and nothing of the conversation is read
// from the prefix cache, whatever the routing (vLLM issue #53393). Given the role "user" where they
// stand, they keep each turn's prompt an extension of the last one's: the fix that issue proposes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace warden {

// `body` (an Anthropic Messages API request) with every message of its top-level "messages" array
// whose role is "system" given the role "user", and nothing else changed, byte for byte; nullopt
// when it has no such message or is not a JSON object with a "messages" array.
std::optional<std::string> InlineSystemAsUser(std::string_view body);

}  // namespace warden
