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

using simdjson::SUCCESS;

std::string AnthropicErrorBody(int status, std::string_view message) {
  std::string body = R"({"type":"error","error":{"type":")";
  body += AnthropicErrorType(status);
  body += R"(","message":)";
  AppendJsonString(&body, message);
  body += "}}";
  return body;
}

// A body that is no JSON object (a proxy's or uvicorn's plain "Internal Server Error", an HTML
// page): its text, trimmed and cut at kLongestMessage; what no JSON string can hold is not said.
std::string TextAsMessage(std::string_view text, int status) {
  constexpr size_t kLongestMessage = 1024;
  const size_t begin = text.find_first_not_of(" \t\r\n");
  text = begin == std::string_view::npos
             ? std::string_view()
             : text.substr(begin, text.find_last_not_of(" \t\r\n") + 1 - begin);
  const bool cut = text.size() > kLongestMessage;
  if (cut) {
    size_t end = kLongestMessage;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // UTF-8
    text = text.substr(0, end);
  }
  if (text.empty() || !simdjson::validate_utf8(text.data(), text.size()))
    return "the replica answered " + std::to_string(status) + " without a message";
  return cut ? std::string(text) + "..." : std::string(text);
}

// FastAPI's validation errors as one line: "body.messages: Field required; ...".
std::string ValidationMessage(simdjson::dom::array details) {
  std::string out;
  for (simdjson::dom::element d : details) {
    std::string_view msg;
    if (d["msg"].get(msg) != SUCCESS) continue;
    if (!out.empty()) out += "; ";
    simdjson::dom::array loc;
    if (d["loc"].get(loc) == SUCCESS) {
      std::string where;
      for (simdjson::dom::element part : loc) {
        if (!where.empty()) where += '.';
        std::string_view name;
        int64_t index;
        if (part.get(name) == SUCCESS)
          where += name;
        else if (part.get(index) == SUCCESS)
          where += std::to_string(index);
      }
      if (!where.empty()) out += where + ": ";
    }
    out += msg;
  }
  return out;
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
    case 504:  // the gateway's read_timeout_s, or a proxy's
      return "timeout_error";
  }
  return status < 500 ? "invalid_request_error" : "api_error";  // 405, 415, 431, ...; 502
}

std::optional<std::string> InAnthropicsShape(std::string_view error_body, int status) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(error_body.data(), error_body.size()).get(root) != simdjson::SUCCESS ||
      !root.is_object())
    return AnthropicErrorBody(status, TextAsMessage(error_body, status));
  std::string_view type, message;
  if (root["type"].get(type) == simdjson::SUCCESS && type == "error" &&
      root["error"]["type"].get(type) == simdjson::SUCCESS && IsAnthropicType(type))
    return std::nullopt;
  // Anthropic's or OpenAI's {"error":{"message":...}}, vLLM's older {"message":...}, the
  // {"error":"Unauthorized"} of vLLM's --api-key check, FastAPI's {"detail":"..."} or its
  // validation errors' {"detail":[{"loc":[...],"msg":...}, ...]}.
  if (root["error"]["message"].get(message) == SUCCESS || root["message"].get(message) == SUCCESS ||
      root["error"].get(message) == SUCCESS || root["detail"].get(message) == SUCCESS)
    return AnthropicErrorBody(status, message);
  simdjson::dom::array details;
  if (root["detail"].get(details) == SUCCESS) {
    std::string said = ValidationMessage(details);
    if (!said.empty()) return AnthropicErrorBody(status, said);
  }
  // An error object whose message is no string: the body's text is the message.
  simdjson::dom::object error;
  if (root["error"].get(error) == SUCCESS)
    return AnthropicErrorBody(status, TextAsMessage(error_body, status));
  return std::nullopt;
}

}  // namespace warden
