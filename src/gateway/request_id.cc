#include "gateway/request_id.h"

#include <random>

namespace warden {
namespace {

// A bijection on 64-bit numbers (an odd multiplier, then xor-shifts): distinct counters stay
// distinct, and consecutive ones differ in every digit.
uint64_t Mix(uint64_t x) {
  x *= 0x9e3779b97f4a7c15ULL;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 32;
  return x;
}

void AppendHex16(uint64_t value, char* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i, value >>= 4) out[i] = kDigits[value & 0xf];
}

}  // namespace

bool UsableRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdLength) return false;
  for (const char c : id)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

RequestIdSource::RequestIdSource()
    : process_random_((uint64_t{std::random_device{}()} << 32) | std::random_device{}()) {}

std::string RequestIdSource::Next() {
  const uint64_t n = counter_.fetch_add(1, std::memory_order_relaxed);
  std::string id(32, '0');
  AppendHex16(process_random_, id.data());
  AppendHex16(Mix(n), id.data() + 16);
  return id;
}

}  // namespace warden
