#include "os/heap_release.h"

#include <gtest/gtest.h>

#include <memory>

namespace warden {
namespace {

// util_tests runs on tcmalloc, as the gateway does: 64 MiB freed are held until released.
TEST(ReleaseFreeHeap, GivesBackWhatIsHeldFreeOverTheThreshold) {
  constexpr size_t kMiB = 1 << 20;
  ReleaseFreeHeap(0);  // whatever earlier tests left
  {
    auto block = std::make_unique<char[]>(64 * kMiB);
    for (size_t i = 0; i < 64 * kMiB; i += 4096) block[i] = 1;  // touched: really in memory
  }
  EXPECT_EQ(ReleaseFreeHeap(128 * kMiB), 0u);  // under the threshold: kept
  EXPECT_GE(ReleaseFreeHeap(16 * kMiB), 60 * kMiB);
  EXPECT_EQ(ReleaseFreeHeap(16 * kMiB), 0u);  // nothing left to give
}

}  // namespace
}  // namespace warden
