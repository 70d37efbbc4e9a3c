// libFuzzer target: what a replica streams or answers, read on the side as the gateway reads it
// (ResponseObserver), in the pieces the network might cut it into. Byte 0 picks the mode (an SSE
// stream or a whole body; the text kept or not), byte 1 how many cuts, then two bytes a cut.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/protocol/reply_content.h"
#include "core/protocol/response_observer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const size_t cuts = data[1] & 15;
  data += 2;
  size -= 2;
  if (size < cuts * 2) return 0;
  std::vector<size_t> at;
  for (size_t i = 0; i < cuts; ++i)
    at.push_back(size_t{data[2 * i]} | size_t{data[2 * i + 1]} << 8);
  data += cuts * 2;
  size -= cuts * 2;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (size_t& a : at) a = a % (body.size() + 1);
  std::sort(at.begin(), at.end());

  warden::ResponseObserver observer((mode & 1) != 0, (mode & 8) ? 64 : 4 << 20);
  warden::ReplyText text;
  std::vector<std::string> ids;
  if (mode & 2) observer.CaptureText(&text, (mode & 4) ? &ids : nullptr);
  size_t from = 0;
  for (const size_t a : at) {
    observer.Feed(body.substr(from, a - from));
    from = a;
  }
  observer.Feed(body.substr(from));
  observer.Finish();
  (void)observer.usage();
  return 0;
}
