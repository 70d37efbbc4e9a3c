// The simulator's reading of OpenAI (chat, completions, responses) and Anthropic request bodies:
// everything it needs to run the request on a simulated engine (the rendered prompt tokens, the
// output limit, streaming options). Pure: no I/O.
#pragma once

#include <string>
#include <string_view>
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
};

// A request the API refuses: HTTP status, vLLM's error type name and a message.
struct SimError {
  int status = 400;
  std::string type = "BadRequestError";
  std::string message;
};

// Parses `body` for `api`. Returns false and fills `error` when the body is not a valid request.
bool ParseSimRequest(SimApi api, std::string_view body, SimRequest* request, SimError* error);

}  // namespace warden
