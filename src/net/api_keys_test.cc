#include "net/api_keys.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(ApiKeys, AcceptsOnlyTheKeysItHolds) {
  const ApiKeys keys({"alpha-1", "beta-2"});
  EXPECT_FALSE(keys.empty());
  EXPECT_TRUE(keys.Contains("alpha-1"));
  EXPECT_TRUE(keys.Contains("beta-2"));
  EXPECT_EQ(keys.Find("alpha-1"), 0);
  EXPECT_EQ(keys.Find("beta-2"), 1);
  EXPECT_EQ(keys.FindBearer("Bearer beta-2"), 1);
  EXPECT_EQ(keys.Find("gamma-3"), -1);
  EXPECT_FALSE(keys.Contains("alpha-"));    // a prefix
  EXPECT_FALSE(keys.Contains("alpha-12"));  // a longer one
  EXPECT_FALSE(keys.Contains(""));
  EXPECT_TRUE(ApiKeys().empty());
  EXPECT_FALSE(ApiKeys().Contains("alpha-1"));
}

TEST(ApiKeys, ReadsABearerTokenWithTheSchemeInAnyCase) {
  const ApiKeys keys({"alpha-1"});
  EXPECT_TRUE(keys.AcceptsBearer("Bearer alpha-1"));
  EXPECT_TRUE(keys.AcceptsBearer("bearer alpha-1"));
  EXPECT_TRUE(keys.AcceptsBearer("BEARER   alpha-1 "));
  EXPECT_FALSE(keys.AcceptsBearer("alpha-1"));        // no scheme
  EXPECT_FALSE(keys.AcceptsBearer("Basic alpha-1"));  // another one
  EXPECT_FALSE(keys.AcceptsBearer("Beareralpha-1"));
  EXPECT_FALSE(keys.AcceptsBearer("Bearer "));
  EXPECT_FALSE(keys.AcceptsBearer(""));
  EXPECT_EQ(ApiKeys::BearerToken("Bearer  t0k "), "t0k");
  EXPECT_EQ(ApiKeys::BearerToken("Token t0k"), "");
}

TEST(ApiKeys, AKeyMustGoInAHeaderAsItIs) {
  EXPECT_EQ(CheckApiKey("sk-abc_123.XYZ"), "");
  EXPECT_NE(CheckApiKey(""), "");
  EXPECT_NE(CheckApiKey("two words"), "");
  EXPECT_NE(CheckApiKey("line\r\nbreak"), "");
  EXPECT_NE(CheckApiKey("caf\xc3\xa9"), "");
}

}  // namespace
}  // namespace warden
