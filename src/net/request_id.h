// A request's id, as tracing proxies give one (Envoy, nginx's $request_id): the client's own
// X-Request-Id when it sent a usable one, else one the server makes. The gateway passes it to the
// replica (vLLM names the request after it, `chatcmpl-<id>`, in its answer and its logs), returns
// it to the client and writes it in the access log, so that one request can be followed from the
// client through the gateway to the engine.
#pragma once

#include <array>
#include <atomic>
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

// Makes ids no other request of this process shares, and unlikely to be any other process's: 32
// lowercase hexadecimal digits (as vLLM's own, a UUID's hex), a random half fixed per source and a
// half from a counter mixed so that neighbours do not look alike. Safe from any thread.
class RequestIdSource {
 public:
  static constexpr size_t kLength = 32;
  using Id = std::array<char, kLength>;

  // `process_random`: the fixed half; from the system's random source by default.
  RequestIdSource();
  explicit RequestIdSource(uint64_t process_random);

  Id Next();

 private:
  char fixed_half_[kLength / 2];
  std::atomic<uint64_t> counter_{1};  // (0 mixes to 0: the first id would end in zeros)
};

}  // namespace warden
