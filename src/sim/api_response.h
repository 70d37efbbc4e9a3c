// The simulator's responses in each API's wire format: whole JSON bodies and server-sent events,
// shaped like vLLM's. Pure: builds text, sends nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/engine/sequence.h"
#include "sim/api_request.h"

namespace warden {

struct ReplyUsage {
  int prompt_tokens = 0;
  int cached_tokens = 0;  // reported only when prompt-token details are on
  // Prompt tokens this request newly wrote to the prefix cache (its computed full blocks), which
  // vLLM reports with the cached ones.
  int created_cache_tokens = 0;
  int completion_tokens = 0;
  FinishReason finish = FinishReason::kNone;
};

struct ReplyIdentity {
  std::string id;                    // e.g. "chatcmpl-1f"
  std::string model;                 // served model name
  int64_t created = 0;               // Unix seconds
  bool include_usage = false;        // OpenAI streams: a final usage chunk
  bool continuous_usage = false;     // and the running usage in every chunk (with include_usage)
  bool prompt_token_details = true;  // vLLM's --enable-prompt-tokens-details
  // Anthropic and chat replies: a tool call after the text (SimRequest::tool_use_name, a test
  // hook).
  std::string tool_use_name = {};
  std::string tool_use_input = {};  // JSON object
};

// Formats one reply. Streaming: call StreamToken for each generated token in order, then StreamEnd
// once. Not streaming: call WholeBody once with the complete text.
class ReplyFormatter {
 public:
  virtual ~ReplyFormatter() = default;
  // SSE bytes for one token; `text` is what the token adds to the reply (empty for
  // end-of-sequence), `so_far` the usage with it (the prompt's tokens, read from and written to
  // the cache). `last`: the reply's last token, which OpenAI streams send with the finish reason,
  // in StreamEnd's first chunk, as vLLM does.
  virtual std::string StreamToken(std::string_view text, const ReplyUsage& so_far, bool last) = 0;
  // SSE bytes that end the stream.
  virtual std::string StreamEnd(const ReplyUsage& usage) = 0;
  virtual std::string WholeBody(std::string_view text, const ReplyUsage& usage) = 0;
};

std::unique_ptr<ReplyFormatter> MakeReplyFormatter(SimApi api, ReplyIdentity identity);

// Error bodies: OpenAI's {"error": {...}} and Anthropic's {"type": "error", "error": {...}}.
std::string OpenAiErrorBody(const SimError& error);
std::string AnthropicErrorBody(const SimError& error);

}  // namespace warden
