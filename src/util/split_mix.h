// SplitMix64 (Steele, Lea and Flood): a cheap, well-mixed 64-bit function, for reproducible
// pseudo-random choices made from a seed and an index rather than from a generator's state.
#pragma once

#include <cstdint>

namespace warden {

// The generator's step: its n-th output from state s is SplitMix64(s + n * kSplitMixGamma).
inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output for state `x` (the state advanced by one step, then mixed).
inline uint64_t SplitMix64(uint64_t x) {
  x += kSplitMixGamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace warden
