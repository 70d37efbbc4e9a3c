#include "core/tokenizer.h"

#include <xxhash.h>

namespace warden {
namespace {

bool IsSpace(unsigned char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool IsWordByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c >= 0x80;
}

// Calls emit(begin, length) for each token of text.
template <typename Emit>
void ForEachToken(std::string_view text, Emit&& emit) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (IsSpace(c)) {
      ++i;
    } else if (IsWordByte(c)) {
      size_t j = i + 1;
      while (j < n && IsWordByte(static_cast<unsigned char>(text[j]))) ++j;
      emit(i, j - i);
      i = j;
    } else {
      emit(i, 1);
      ++i;
    }
  }
}

}  // namespace

TokenId WordToken(std::string_view word) {
  const auto h = static_cast<TokenId>(XXH3_64bits(word.data(), word.size()));
  return h < kFirstWordToken ? h + kFirstWordToken : h;
}

void Tokenize(std::string_view text, std::vector<TokenId>* out) {
  ForEachToken(
      text, [&](size_t begin, size_t len) { out->push_back(WordToken(text.substr(begin, len))); });
}

size_t CountTokens(std::string_view text) {
  size_t count = 0;
  ForEachToken(text, [&](size_t, size_t) { ++count; });
  return count;
}

}  // namespace warden
