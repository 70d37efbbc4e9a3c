#include "net/body_storage_pool.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(BodyStoragePool, ABodyGivenBackIsTakenAgainWithoutAllocating) {
  BodyStoragePool pool(8, 1 << 20);
  std::string body = pool.Take(1000);
  EXPECT_GE(body.capacity(), 1000 + kBodyPadding);
  body.resize(1000);
  const char* storage = body.data();
  pool.GiveBack(std::move(body));
  EXPECT_EQ(pool.strings(), 1u);
  const std::string again = pool.Take(600);  // smaller: the same storage
  EXPECT_EQ(again.data(), storage);
  EXPECT_EQ(again.size(), 1000u);  // as it was given back: nothing to zero-fill
  EXPECT_EQ(pool.strings(), 0u);
  EXPECT_EQ(pool.bytes(), 0u);
}

TEST(BodyStoragePool, ATooSmallSpareIsReplaced) {
  BodyStoragePool pool(8, 1 << 20);
  pool.GiveBack(pool.Take(100));
  const std::string body = pool.Take(5000);
  EXPECT_EQ(body.size(), 0u);  // new: its room not yet written
  EXPECT_GE(body.capacity(), 5000 + kBodyPadding);
  EXPECT_EQ(pool.strings(), 0u);
}

TEST(BodyStoragePool, KeepsNoMoreThanItsLimits) {
  BodyStoragePool by_count(2, 1 << 20);
  for (int i = 0; i < 3; ++i) by_count.GiveBack(std::string(100, 'x'));
  EXPECT_EQ(by_count.strings(), 2u);

  BodyStoragePool by_bytes(8, 3000);
  std::string small = by_bytes.Take(1000), large = by_bytes.Take(2500);
  by_bytes.GiveBack(std::move(small));
  by_bytes.GiveBack(std::move(large));  // both would pass 3000 bytes
  EXPECT_EQ(by_bytes.strings(), 1u);
  EXPECT_LE(by_bytes.bytes(), 3000u);

  BodyStoragePool any(8, 1 << 20);
  any.GiveBack(std::string());  // no allocated room to keep
  EXPECT_EQ(any.strings(), 0u);
}

// A burst of bodies leaves spares; those nobody takes between two sweeps are freed, and those in
// use are kept.
TEST(BodyStoragePool, SparesUnusedBetweenTwoSweepsAreFreed) {
  BodyStoragePool pool(16, 1 << 20);
  std::vector<std::string> burst;
  for (int i = 0; i < 5; ++i) burst.push_back(pool.Take(2000));
  for (std::string& b : burst) pool.GiveBack(std::move(b));
  EXPECT_EQ(pool.strings(), 5u);

  pool.Sweep();  // the first sweep after the burst: all five were taken since the one before
  EXPECT_EQ(pool.strings(), 5u);
  for (int i = 0; i < 3; ++i) pool.GiveBack(pool.Take(1000));  // a steady load uses one
  pool.Sweep();
  EXPECT_EQ(pool.strings(), 1u);  // the one in use
  EXPECT_GE(pool.bytes(), 2000u);
  pool.Sweep();  // and then nobody takes it either
  EXPECT_EQ(pool.strings(), 0u);
  EXPECT_EQ(pool.bytes(), 0u);
}

}  // namespace
}  // namespace warden
