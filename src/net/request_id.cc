#include "net/request_id.h"

#include <sys/random.h>

#include <cstring>
#include <random>

namespace warden {
namespace {

// Random bytes, taken from the kernel a block at a time per thread (one system call per 256 ids).
class RandomBytes {
 public:
  void Take(uint8_t* out, size_t n) {
    if (used_ + n > sizeof(pool_)) Refill();
    std::memcpy(out, pool_ + used_, n);
    used_ += n;
  }

 private:
  void Refill() {
    size_t got = 0;
    while (got < sizeof(pool_)) {
      const ssize_t n = getrandom(pool_ + got, sizeof(pool_) - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (errno != EINTR) {
        break;
      }
    }
    std::random_device fallback;  // (a kernel without getrandom)
    for (; got < sizeof(pool_); ++got) pool_[got] = static_cast<uint8_t>(fallback());
    used_ = 0;
  }

  uint8_t pool_[4096];
  size_t used_ = sizeof(pool_);
};

}  // namespace

bool UsableRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdLength) return false;
  for (const char c : id)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

RequestIdSource::Id RequestIdSource::Next() {
  thread_local RandomBytes random;
  uint8_t bytes[kLength / 2];
  random.Take(bytes, sizeof(bytes));
  static constexpr char kDigits[] = "0123456789abcdef";
  Id id;
  for (size_t i = 0; i < sizeof(bytes); ++i) {
    id[2 * i] = kDigits[bytes[i] >> 4];
    id[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return id;
}

}  // namespace warden
