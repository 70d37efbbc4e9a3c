// libFuzzer target: a compressed request body as the gateway decodes it (DecodeContentCoding).
// The input's first line is the Content-Encoding value, the rest the body. Whatever comes, the
// answer is one of the documented statuses; a body refused is left as it was, and a decoded one
// stays within the limit.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/content_coding.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t line_end = input.find('\n');
  const std::string_view codings = input.substr(0, line_end);
  const std::string sent(line_end == std::string_view::npos ? std::string_view()
                                                            : input.substr(line_end + 1));
  constexpr size_t kLimit = 4 << 20;
  std::string body = sent;
  const warden::DecodedBody result = warden::DecodeContentCoding(codings, &body, kLimit);
  switch (result.status) {
    case 200:
      if (body.size() > kLimit) __builtin_trap();
      if (!result.error.empty()) __builtin_trap();
      break;
    case 400:
    case 413:
    case 415:
      if (body != sent || result.error.empty()) __builtin_trap();
      break;
    default:
      __builtin_trap();
  }
  return 0;
}
