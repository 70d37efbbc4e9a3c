#include "gateway/api_errors.h"

#include <fmt/format.h>
#include <simdjson.h>

#include "core/protocol/anthropic_error.h"
#include "util/json_escape.h"

namespace warden {
namespace {

std::string_view OpenAiType(int status) {
  if (status == 401) return "authentication_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return status == 503 ? "service_unavailable" : "server_error";
  return "invalid_request_error";
}

std::string_view OpenAiCode(int status, ErrorCode code) {
  switch (code) {
    case ErrorCode::kUnknownPath:
      return "null";
    case ErrorCode::kGatewayStopping:
      return "\"gateway_stopping\"";
    case ErrorCode::kGatewayResources:
      return "\"gateway_resources_exhausted\"";
    case ErrorCode::kByStatus:
      break;
  }
  switch (status) {
    case 401:
      return "\"invalid_api_key\"";
    case 404:
      return "\"model_not_found\"";
    case 413:
      return "\"request_too_large\"";
    case 429:
      return "\"rate_limit_exceeded\"";
    case 503:
      return "\"no_healthy_replica\"";
    default:
      return "null";
  }
}

}  // namespace

ErrorShape ErrorShapeFor(std::string_view path) {
  return path.starts_with("/v1/messages") ? ErrorShape::kAnthropic : ErrorShape::kOpenAi;
}

std::string ErrorBody(ErrorShape shape, int status, std::string_view message, ErrorCode code) {
  if (shape == ErrorShape::kAdmin)
    return fmt::format(R"({{"error":{{"message":{}}}}})", JsonString(message));
  if (shape == ErrorShape::kAnthropic) {
    return fmt::format(R"({{"type":"error","error":{{"type":"{}","message":{}}}}})",
                       AnthropicErrorType(status), JsonString(message));
  }
  return fmt::format(R"({{"error":{{"message":{},"type":"{}","param":null,"code":{}}}}})",
                     JsonString(message), OpenAiType(status), OpenAiCode(status, code));
}

std::string QuotedName(std::string_view text, size_t most) {
  if (text.size() <= most) return ValidUtf8OrEscaped(text);
  while (most > 0 && (static_cast<unsigned char>(text[most]) & 0xC0) == 0x80) --most;  // UTF-8
  return ValidUtf8OrEscaped(text.substr(0, most)) + fmt::format("... ({} bytes)", text.size());
}

std::string ValidUtf8OrEscaped(std::string_view text) {
  if (simdjson::validate_utf8(text.data(), text.size())) return std::string(text);
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

}  // namespace warden
