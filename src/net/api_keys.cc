#include "net/api_keys.h"

#include <openssl/evp.h>

#include <memory>

#include "util/ascii_case.h"

namespace warden {

ApiKeys::ApiKeys(const std::vector<std::string>& keys) : count_(keys.size()) {
  for (size_t i = 0; i < keys.size(); ++i) {
    Digest d = DigestOf(keys[i]);
    if (!d.empty()) index_.try_emplace(std::move(d), static_cast<int>(i));
  }
}

bool ApiKeys::Available() {
  return !DigestOf("warden").empty();
}

ApiKeys::Digest ApiKeys::DigestOf(std::string_view key) {
  // The algorithm fetched once and a context kept per thread: EVP_Digest does both on every call,
  // three quarters of its time for a key.
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  thread_local const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(
      EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (!sha256 || !context || EVP_DigestInit_ex2(context.get(), sha256, nullptr) != 1 ||
      EVP_DigestUpdate(context.get(), key.data(), key.size()) != 1 ||
      EVP_DigestFinal_ex(context.get(), d, &size) != 1 || size != 32) {
    return {};  // no digest: matches nothing
  }
  return Digest(reinterpret_cast<const char*>(d), size);
}

int ApiKeys::Find(std::string_view key) const {
  if (key.empty()) return -1;
  // Looked up by digest: how long a lookup takes says nothing of how much of a key matched.
  const Digest d = DigestOf(key);
  if (d.empty()) return -1;
  const auto it = index_.find(d);
  return it == index_.end() ? -1 : it->second;
}

std::string_view ApiKeys::BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !IEquals(authorization.substr(0, kScheme.size()), kScheme) ||
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
