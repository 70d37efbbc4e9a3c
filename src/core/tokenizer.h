// A deterministic stand-in for a real tokenizer: one token per word or punctuation mark.
//
// Only what routing depends on is kept: the same text always gives the same tokens, text that
// extends other text gives tokens that extend its tokens (at word boundaries), and the count is
// close to a real tokenizer's for English-like text. Stateless and thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "core/tokens.h"

namespace warden {

// Appends the tokens of `text` to `out`. Whitespace separates tokens and is not a token itself;
// every other non-alphanumeric byte is a token of its own; runs of letters, digits and bytes
// >= 0x80 form one token each.
void Tokenize(std::string_view text, std::vector<TokenId>* out);

// Number of tokens Tokenize would append, without producing them.
size_t CountTokens(std::string_view text);

// The id of one word (a run Tokenize would produce as a single token).
TokenId WordToken(std::string_view word);

}  // namespace warden
