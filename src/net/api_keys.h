// API keys a client must present: the gateway's own (its `api_keys`), or the simulator's (vLLM's
// --api-key). Only digests are kept, and a key is compared in time independent of where it
// differs from the ones held.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

class ApiKeys {
 public:
  ApiKeys() = default;
  explicit ApiKeys(const std::vector<std::string>& keys);

  // No keys: nothing is asked of clients.
  bool empty() const { return digests_.empty(); }
  // Whether `key` is one of the keys.
  bool Contains(std::string_view key) const;
  // Whether an Authorization field's value is "Bearer <one of the keys>".
  bool AcceptsBearer(std::string_view authorization) const {
    return Contains(BearerToken(authorization));
  }

  // The token of an Authorization value with the Bearer scheme (in any case, RFC 9110 §11.1);
  // empty for another scheme or none.
  static std::string_view BearerToken(std::string_view authorization);

 private:
  using Digest = std::array<unsigned char, 32>;  // SHA-256
  static Digest DigestOf(std::string_view key);
  std::vector<Digest> digests_;
};

// Whether a key is one a header can carry as it is: printable ASCII, no spaces. Returns an
// error, or empty.
std::string CheckApiKey(std::string_view key);

}  // namespace warden
