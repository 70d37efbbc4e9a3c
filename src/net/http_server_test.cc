#include "net/http_server.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(TargetPath, TakesThePathOfOriginAndAbsoluteFormTargets) {
  EXPECT_EQ(TargetPath("/v1/messages?beta=true"), "/v1/messages");
  EXPECT_EQ(TargetPath("http://gateway:8080/v1/messages?beta=true"), "/v1/messages");
  EXPECT_EQ(OriginForm("http://gateway:8080/v1/messages?beta=true"), "/v1/messages?beta=true");
  EXPECT_EQ(OriginForm("https://gateway"), "/");
  EXPECT_EQ(OriginForm("http://gateway?beta=true"), "?beta=true");
  EXPECT_EQ(TargetPath("http://gateway?beta=true"), "");
  EXPECT_EQ(OriginForm("*"), "*");
  EXPECT_EQ(OriginForm("v1/x?u=http://a/b"), "v1/x?u=http://a/b");  // not a URL: as it is
}

}  // namespace
}  // namespace warden
