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

TEST(HttpDate, IsAnImfFixdate) {
  EXPECT_EQ(HttpDate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(HttpDate(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");  // RFC 9110's example
  HttpRequest request{http::verb::get, "/", 11};
  EXPECT_EQ(MakeResponse(request, http::status::ok, "x").count(http::field::date), 1u);
}

}  // namespace
}  // namespace warden
