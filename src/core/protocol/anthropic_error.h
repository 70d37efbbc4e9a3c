// A replica's error on /v1/messages (and the paths under it), said in the shape of Anthropic's API.
//
// Why: vLLM answers its Anthropic endpoint's errors with its own type names
// ({"type":"error","error":{"type":"BadRequestError",...}}), or in OpenAI's shape on some paths.
// A client of Anthropic's API reads error.type for the kind of error; the gateway's own errors
// already use Anthropic's names.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace warden {

// Anthropic's error type for an HTTP status (invalid_request_error for 400, api_error for 500).
std::string_view AnthropicErrorType(int status);

// `error_body` as {"type":"error","error":{"type":<AnthropicErrorType(status)>,"message":...}}
// with the replica's message (a body that is no JSON object, plain text say, or whose "error"
// object holds no string message, is the message); nullopt when it is in that shape with one of
// Anthropic's types already, or is a JSON object with neither a message nor an "error" object in
// it (it is then passed on as it is).
std::optional<std::string> InAnthropicsShape(std::string_view error_body, int status);

}  // namespace warden
