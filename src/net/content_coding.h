// Decoding a request body sent with a Content-Encoding (RFC 9110 §8.4). Some clients compress
// what they upload (gzip, or zstd as the Codex CLI does towards OpenAI), and vLLM's API server
// decodes no request coding: the gateway decodes the body of a request it reads (the model API's
// JSON), so that it can route it, and sends the replica the plain body.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace warden {

// What decoding a body came to.
struct DecodedBody {
  // 200 when decoded (or when there was nothing to decode); else the status to answer with: 415
  // for a coding the gateway does not know (or several), 400 for data that is not in the coding
  // it names, 413 for a body that decodes to more than the limit.
  int status = 200;
  std::string error;        // what is wrong, for the error's message
  bool decoded = false;     // the body was coded, and is now plain (not so for identity alone)
  bool over_limit = false;  // the 413 is for a body that decodes to more than the limit
};

// The most gzip members or zstd frames a body may have: clients send one, and each costs its
// decoder's setup (millions of empty ones would hold the thread for a while).
constexpr int kMostCodedParts = 64;

// Decodes `body` in place, undoing the coding a Content-Encoding field value (`codings`) names.
// Knows gzip (x-gzip), deflate (zlib's format, or raw deflate data as some clients send it) and
// zstd, and one of them at most (identity aside). The decoded body may be at most `limit` bytes
// (what a few compressed bytes may become in all is the caller's to bound). On an error `body` is
// left as it was.
DecodedBody DecodeContentCoding(std::string_view codings, std::string* body, size_t limit);

// Whether DecodeContentCoding would decode a body with `codings`: one coding it knows besides
// identity, the case that takes time (anything else it answers at once: identity, or a 415).
bool DecodesBody(std::string_view codings);

}  // namespace warden
