// Renders a conversation into the simulated model's prompt tokens, ChatML style (Qwen's template):
//
//   <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n
//   <|im_start|>assistant\n{reply}<|im_end|>\n ... <|im_start|>assistant\n
//
// The rendering is append-only: the prompt of turn t+1 starts with the prompt of turn t followed by
// the reply it generated, exactly as with a real template, which is what makes prefix caching work
// across turns. Stateless and thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "core/tokens.h"

namespace warden {

enum class Role { kSystem, kUser, kAssistant, kTool };

std::string_view RoleName(Role role);

// Appends "<|im_start|>{role}\n" to `out`: the start of a message whose content follows.
void BeginMessage(Role role, std::vector<TokenId>* out);

// Appends "<|im_end|>\n": the end of a message.
void EndMessage(std::vector<TokenId>* out);

// Appends a whole message: BeginMessage, the tokens of `text`, EndMessage.
void AppendMessage(Role role, std::string_view text, std::vector<TokenId>* out);

// Appends "<|im_start|>assistant\n": the generation prompt the reply continues.
void AppendGenerationPrompt(std::vector<TokenId>* out);

// True for Claude Code's attribution line ("x-anthropic-billing-header: cc_version=…"), the first
// system block, which vLLM drops before templating so it does not break caching across sessions.
bool IsAttributionBlock(std::string_view text);

}  // namespace warden
