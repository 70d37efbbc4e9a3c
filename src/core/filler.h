// The deterministic text the simulated model generates.
//
// A reply is a sequence of words drawn from a fixed list by a seed, so the same request always
// produces the same reply, different conversations produce different replies, and the reply's text
// tokenizes back to exactly the tokens that were generated (what makes a conversation's next turn
// hit the cached blocks of the previous reply).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/tokens.h"

namespace warden {

struct FillerWord {
  std::string_view text;
  TokenId token;
};

// The i-th word of the reply generated under `seed`.
FillerWord GeneratedWord(uint64_t seed, int i);

// A word for synthetic prompts (the load test's messages): the i-th word of the text under `seed`.
std::string_view PromptWord(uint64_t seed, uint64_t i);

}  // namespace warden
