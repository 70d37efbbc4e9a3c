// vLLM's "prompt longer than the context" error, said the way Anthropic's API says it.
//
// Why: vLLM refuses a prompt that does not fit the model's context in OpenAI's words ("This
// model's maximum context length is M tokens. However, ..." up to 0.2x; "You passed N input
// tokens and requested K output tokens. However, the model's context length is only M tokens,
// ..." since), on /v1/messages too. Anthropic's API
// says "prompt is too long: N tokens > M maximum", or "input length and `max_tokens` exceed
// context limit: N + K > M" when the reply's room is what is missing, and Claude Code reads those
// to compact the conversation or to ask for a shorter reply. Told vLLM's words, it gives up on the
// session instead, turn after turn.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace warden {

// The figures of a context error: the context length, the prompt's tokens and, when the error
// gives it, the reply tokens asked for (-1 if not).
struct ContextOverflow {
  long max_context = 0;
  long prompt_tokens = 0;
  long output_tokens = -1;
  // The prompt has at least prompt_tokens (vLLM since 0.2x stops counting one token past the room
  // left: every prompt too long is said to be that; or it counted characters, or nothing).
  bool prompt_at_least = false;
};

// Reads the figures from vLLM's error message (the wordings of vLLM 0.4 to now); nullopt if the
// message is not a context error.
std::optional<ContextOverflow> ParseContextOverflow(std::string_view message);

// The Anthropic error body for a replica's error body on /v1/messages (its message at
// error.message, or message), in Anthropic's wording with the replica's own after it; nullopt if it
// is not a context error, or the figures do not show an overflow. `estimated_prompt_tokens` (from
// the request's size; -1: none) stands for a prompt whose count the error gives as a lower bound,
// when larger: told only that, Claude Code would shorten its reply a thousand tokens at a time.
// `counted`: the figure is the replica's own count (its count_tokens), not an estimate.
std::optional<std::string> AnthropicContextError(std::string_view error_body,
                                                 long estimated_prompt_tokens = -1,
                                                 bool counted = false);

// Whether `error_body` is a context error whose prompt count is only a lower bound: then the
// prompt's real size is worth asking the replica for (AnthropicContextError's
// `estimated_prompt_tokens`).
bool PromptCountedInPart(std::string_view error_body);

}  // namespace warden
