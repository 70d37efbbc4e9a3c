#include "core/protocol/anthropic_error.h"

#include <simdjson.h>

#include <algorithm>
#include <array>

#include "util/json_escape.h"

namespace warden {
namespace {

constexpr std::array<std::string_view, 10> kAnthropicTypes = {
    "invalid_request_error", "authentication_error", "billing_error",    "permission_error",
    "not_found_error",       "request_too_large",    "rate_limit_error", "api_error",
    "overloaded_error",      "timeout_error"};

bool IsAnthropicType(std::string_view type) {
  return std::find(kAnthropicTypes.begin(), kAnthropicTypes.end(), type) != kAnthropicTypes.end();
}

}  // namespace

std::string_view AnthropicErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:  // no replica in service, as Anthropic says of its own
    case 529:
      return "overloaded_error";
  }
  return status < 500 ? "invalid_request_error" : "api_error";  // 405, 415, 431, ...; 502
}

std::optional<std::string> InAnthropicsShape(std::string_view error_body, int status) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(error_body.data(), error_body.size()).get(root) != simdjson::SUCCESS)
    return std::nullopt;
  std::string_view type, message;
  if (root["type"].get(type) == simdjson::SUCCESS && type == "error" &&
      root["error"]["type"].get(type) == simdjson::SUCCESS && IsAnthropicType(type))
    return std::nullopt;
  // Anthropic's or OpenAI's {"error":{"message":...}}, vLLM's older {"message":...}, FastAPI's
  // {"detail":"..."}.
  if (root["error"]["message"].get(message) != simdjson::SUCCESS &&
      root["message"].get(message) != simdjson::SUCCESS &&
      root["detail"].get(message) != simdjson::SUCCESS)
    return std::nullopt;
  std::string body = R"({"type":"error","error":{"type":")";
  body += AnthropicErrorType(status);
  body += R"(","message":)";
  AppendJsonString(&body, message);
  body += "}}";
  return body;
}

}  // namespace warden
