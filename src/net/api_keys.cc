#include "net/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <boost/beast/core/string.hpp>

namespace warden {

ApiKeys::ApiKeys(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) digests_.push_back(DigestOf(key));
}

ApiKeys::Digest ApiKeys::DigestOf(std::string_view key) {
  Digest d{};
  unsigned int size = 0;
  EVP_Digest(key.data(), key.size(), d.data(), &size, EVP_sha256(), nullptr);
  return d;
}

int ApiKeys::Find(std::string_view key) const {
  if (key.empty()) return -1;
  const Digest d = DigestOf(key);
  int found = -1;  // every key compared, whichever matches
  for (size_t i = 0; i < digests_.size(); ++i) {
    if (CRYPTO_memcmp(d.data(), digests_[i].data(), d.size()) == 0) found = static_cast<int>(i);
  }
  return found;
}

std::string_view ApiKeys::BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !boost::beast::iequals(authorization.substr(0, kScheme.size()), kScheme) ||
      authorization[kScheme.size()] != ' ') {
    return {};
  }
  authorization.remove_prefix(kScheme.size());
  while (!authorization.empty() && authorization.front() == ' ') authorization.remove_prefix(1);
  while (!authorization.empty() && authorization.back() == ' ') authorization.remove_suffix(1);
  return authorization;
}

std::string CheckApiKey(std::string_view key) {
  if (key.empty()) return "is empty";
  for (const char c : key) {
    if (c <= ' ' || c > '~') return "may hold printable ASCII only, without spaces";
  }
  return {};
}

}  // namespace warden
