// A prompt's tokens as a replica counts them, for a context error in which the engine counted the
// prompt only in part (vLLM stops one token past the room left): the size Claude Code is told then
// decides whether it shortens its reply or compacts its conversation, and the request's bytes
// guess it only roughly.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <string>

#include "gateway/model_state.h"

namespace warden {

// The input tokens replica `replica` of `model` counts in the Anthropic Messages request `body`,
// from its /v1/messages/count_tokens (vLLM's, the simulator's); 0 when it does not answer with one
// within `timeout`.
boost::asio::awaitable<long> CountPromptTokens(const ModelState& model, int shard, int replica,
                                               std::string body, std::chrono::milliseconds timeout);

// The input_tokens of a count_tokens answer; 0 if it has none.
long InputTokensOf(std::string_view count_tokens_answer);

}  // namespace warden
