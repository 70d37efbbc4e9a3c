// The simulator's reading of OpenAI (chat, completions, responses) and Anthropic request bodies:
// everything it needs to run the request on a simulated engine (the rendered prompt tokens, the
// output limit, streaming options). Pure: no I/O.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tokens.h"

namespace warden {

enum class SimApi { kChatCompletions, kCompletions, kMessages, kCountTokens, kResponses };

struct SimRequest {
  std::string model;  // empty when the body names none
  std::vector<TokenId> prompt;
  bool stream = false;
  bool include_usage = false;     // OpenAI stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM's extension)
  int max_tokens = -1;            // -1 when the body gives no limit
  bool ignore_eos = false;        // vLLM's extension: generate exactly max_tokens
  // vLLM's extension on chat completions, completions and the Responses API: the request's place
  // in the queue of an engine run with --scheduling-policy priority (lower goes first). Not read on
  // Anthropic's Messages API, whose vLLM request (AnthropicMessagesRequest) has no such field.
  int priority = 0;
  // Responses API: the stored response it continues (empty: none; else `prompt` holds the new
  // input alone, for the stored conversation to go before it), and whether its own is stored
  // (OpenAI's default).
  std::string previous_response_id;
  bool store = true;
  // A test hook (Anthropic's Messages API and OpenAI's chat completions): a last user message
  // whose text holds kSimToolUseMarker followed by {"name": ..., "input": {...}}, naming a tool the
  // request offers in "tools", is answered with that tool call after the generated text
  // (stop_reason "tool_use"; finish_reason "tool_calls", the input as the call's arguments), so
  // that a real agent's tools, such as Claude Code's subagents, can run against simulated
  // replicas. The tool's name, and its input as JSON text; empty when not asked for.
  std::string tool_use_name;
  std::string tool_use_input;
  // It offers tools and lets the model choose (tool_choice absent or "auto"; Anthropic's
  // {"type": "auto"}): vLLM serves it only with --enable-auto-tool-choice and a tool parser.
  bool auto_tool_choice = false;
};

inline constexpr std::string_view kSimToolUseMarker = "warden-sim-tool-use:";

// A request the API refuses: HTTP status, vLLM's error type name and a message.
struct SimError {
  SimError(int status = 400, std::string type = "BadRequestError", std::string message = {},
           std::string param = {})
      : status(status),
        type(std::move(type)),
        message(std::move(message)),
        param(std::move(param)) {}
  int status;
  std::string type;
  std::string message;
  std::string param;  // the request's field at fault, as vLLM's VLLMValidationError names it
};

// How the simulated server renders what varies between vLLM's chat templates.
struct SimRenderOptions {
  // Anthropic system messages inside "messages" all join the system prompt, as vLLM renders them
  // for a chat template that refuses a system message after the first (Qwen 3.5's and later);
  // else only the leading ones do, and the others are system turns where they stand.
  bool merge_inline_system = false;
};

// Parses `body` for `api`. Returns false and fills `error` when the body is not a valid request.
bool ParseSimRequest(SimApi api, std::string_view body, SimRequest* request, SimError* error,
                     const SimRenderOptions& render = {});

}  // namespace warden
