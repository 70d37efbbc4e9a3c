// A request's id, as tracing proxies give one (Envoy, nginx's $request_id): the client's own
// X-Request-Id when it sent a usable one, else one the server makes. The gateway passes it to the
// replica (vLLM names the request after it, `chatcmpl-<id>`, in its answer and its logs), returns
// it to the client and writes it in the access log, so that one request can be followed from the
// client through the gateway to the engine.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace warden {

// The field that carries the id both ways.
inline constexpr std::string_view kRequestIdField = "x-request-id";
// The longest client id kept; a longer one is replaced.
inline constexpr size_t kMaxRequestIdLength = 200;

// Whether a client's X-Request-Id can stand as the request's id: 1 to kMaxRequestIdLength
// visible ASCII characters (no spaces, nothing a log line or a header would mangle).
bool UsableRequestId(std::string_view id);

// Makes ids: 32 lowercase hexadecimal digits (as vLLM's own, a UUID's hex) of 128 random bits
// from the kernel, so that no client can guess another's (a server may name what it stores after
// the id) and no two gateways make the same. Safe from any thread.
class RequestIdSource {
 public:
  static constexpr size_t kLength = 32;
  using Id = std::array<char, kLength>;

  Id Next();
};

}  // namespace warden
