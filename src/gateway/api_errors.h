// Errors the gateway answers itself, in the shape of the API the client speaks.
#pragma once

#include <string>
#include <string_view>

namespace warden {

enum class ErrorShape {
  kAnthropic,  // {"type":"error","error":{"type":...,"message":...}}  (/v1/messages*)
  kOpenAi,     // {"error":{"message":...,"type":...,"param":null,"code":...}}  (other paths)
  kAdmin,      // {"error":{"message":...}}  (/warden/..., the admin API's own)
};

// The shape for a request path.
ErrorShape ErrorShapeFor(std::string_view path);

// Whether a path is the admin API's (/warden/...), whose errors have a shape of their own.
inline bool IsAdminPath(std::string_view path) {
  return path == "/warden" || path.starts_with("/warden/");
}

// What the OpenAI shape's `code` says where the status alone does not: a 404 is for a model not
// served (`model_not_found`) unless it is for a path no server has (`null`, as OpenAI's API
// answers an invalid URL); a 503 is for no replica in service (`no_healthy_replica`) unless the
// gateway is stopping (`gateway_stopping`) or short of its own resources
// (`gateway_resources_exhausted`), while the replicas are fine.
enum class ErrorCode { kByStatus, kUnknownPath, kGatewayStopping, kGatewayResources };

// An error body for `status` (400, 401, 404, 413, 502, 503, ...).
std::string ErrorBody(ErrorShape shape, int status, std::string_view message,
                      ErrorCode code = ErrorCode::kByStatus);

// Text a client sent, fit to quote in a JSON message: bytes that are not UTF-8 become \xNN.
std::string ValidUtf8OrEscaped(std::string_view text);
// The same, cut after its first `most` bytes (and "... (N bytes)" said), so that an error does
// not echo a name of 100 KB whole.
std::string QuotedName(std::string_view text, size_t most = 256);

}  // namespace warden
