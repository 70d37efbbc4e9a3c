// API keys a client must present: the gateway's own (its `api_keys`), or the simulator's (vLLM's
// --api-key). Only their SHA-256 digests are kept, and a key is looked up by its digest, so that
// the time a check takes says nothing of how much of a key was right.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace warden {

class ApiKeys {
 public:
  ApiKeys() = default;
  explicit ApiKeys(const std::vector<std::string>& keys);

  // Whether OpenSSL gives SHA-256 here (a configuration that loads no provider with it gives
  // none, and then no key can be checked: every key is refused).
  static bool Available();

  // No keys: nothing is asked of clients. (Keys given whose digest failed still count: every
  // key is then refused, never accepted.)
  bool empty() const { return count_ == 0; }
  // Which of the keys `key` is (its place in the list given), or -1.
  int Find(std::string_view key) const;
  bool Contains(std::string_view key) const { return Find(key) >= 0; }
  // Which key an Authorization field's value "Bearer <key>" carries, or -1.
  int FindBearer(std::string_view authorization) const { return Find(BearerToken(authorization)); }
  bool AcceptsBearer(std::string_view authorization) const {
    return FindBearer(authorization) >= 0;
  }

  // The token of an Authorization value with the Bearer scheme (in any case, RFC 9110 §11.1);
  // empty for another scheme or none.
  static std::string_view BearerToken(std::string_view authorization);

 private:
  using Digest = std::string;  // SHA-256, 32 bytes
  static Digest DigestOf(std::string_view key);
  size_t count_ = 0;
  std::unordered_map<Digest, int> index_;  // each key's digest, and its place in the list
};

// Whether a key is one a header can carry as it is: printable ASCII, no spaces. Returns an
// error, or empty.
std::string CheckApiKey(std::string_view key);

}  // namespace warden
