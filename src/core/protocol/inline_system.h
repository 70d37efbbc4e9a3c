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

#include <string>

namespace warden {

// Gives every message of the top-level "messages" array of `body` (an Anthropic Messages API
// request) whose role is "system" the role "user", in place, changing nothing else byte for byte;
// except those that lead the array: vLLM puts them into the system prompt on every turn, where they
// change nothing from turn to turn. Returns how many it changed: 0 when none, or when the body is
// not a JSON object with a "messages" array (left as it is then). The body's spare capacity past
// its size, when it leaves simdjson's padding, spares a copy.
int InlineSystemAsUser(std::string* body);

}  // namespace warden
