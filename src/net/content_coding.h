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
  // it names, 413 for a body that decodes to more than the limits below.
  int status = 200;
  std::string error;  // what is wrong, for the error's message
};

// How much larger than what was sent a decoded body may be: JSON compresses 5 to 20 times, a
// decompression bomb a thousand (a few hundred bytes held as megabytes until the answer ends).
constexpr size_t kMostCompressionRatio = 100;
// A decoded body may always be this large (a small body's ratio says little).
constexpr size_t kDecodedSizeFloor = size_t{1} << 20;

// Decodes `body` in place, undoing the coding a Content-Encoding field value (`codings`) names.
// Knows gzip (x-gzip), deflate (zlib's format, or raw deflate data as some clients send it) and
// zstd, and one of them at most (identity aside). The decoded body may be at most `limit` bytes,
// and at most kMostCompressionRatio times the sent one beyond kDecodedSizeFloor. On an error
// `body` is left as it was.
DecodedBody DecodeContentCoding(std::string_view codings, std::string* body, size_t limit);

}  // namespace warden
