// Token ids and the special tokens of the simulated model's chat template.
#pragma once

#include <cstdint>

namespace warden {

// A token id of the simulated model. Word tokens are hashes of the word's text; special tokens sit
// in a reserved range so that no word can collide with them.
using TokenId = uint32_t;

inline constexpr TokenId kImStart = 1;  // "<|im_start|>"
inline constexpr TokenId kImEnd = 2;    // "<|im_end|>": also the end-of-sequence token
inline constexpr TokenId kNewline = 3;  // the newline the template puts after a role name
inline constexpr TokenId kFirstWordToken = 16;

}  // namespace warden
