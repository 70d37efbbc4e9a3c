#include "net/request_id.h"

#include <algorithm>
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

void WriteHex16(uint64_t value, char* out) {
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
    : RequestIdSource((uint64_t{std::random_device{}()} << 32) | std::random_device{}()) {}

RequestIdSource::RequestIdSource(uint64_t process_random) {
  WriteHex16(process_random, fixed_half_);
}

RequestIdSource::Id RequestIdSource::Next() {
  Id id;
  std::copy(std::begin(fixed_half_), std::end(fixed_half_), id.begin());
  WriteHex16(Mix(counter_.fetch_add(1, std::memory_order_relaxed)), id.data() + kLength / 2);
  return id;
}

}  // namespace warden
