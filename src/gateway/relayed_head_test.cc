#include "gateway/relayed_head.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

constexpr std::string_view kHead =
    "HTTP/1.1 500 Internal Server Error\r\n"
    "content-type: text/plain; charset=utf-8\r\n"
    "Content-Encoding:  gzip \r\n"
    "content-length: 42\r\n";

TEST(RelayedHead, FindsAFieldByItsNameInAnyCaseButNotTheStatusLine) {
  const auto [start, end] = FindHeadField(kHead, "content-encoding:");
  ASSERT_NE(start, std::string_view::npos);
  EXPECT_EQ(kHead.substr(start, end - start), "Content-Encoding:  gzip ");
  EXPECT_EQ(FindHeadField(kHead, "http/1.1").first, std::string_view::npos);
  EXPECT_EQ(FindHeadField(kHead, "x-missing:").first, std::string_view::npos);
  // A field whose name only begins like another's is not it.
  EXPECT_EQ(FindHeadField("HTTP/1.1 200 OK\r\ncontent-typed: x\r\n", "content-type:").first,
            std::string_view::npos);
}

TEST(RelayedHead, SaysTheBodysCodingsWithoutBlanksAndNoneForIdentity) {
  EXPECT_EQ(HeadBodyCodings(kHead), "gzip");
  EXPECT_EQ(HeadBodyCodings("HTTP/1.1 200 OK\r\ncontent-encoding: Identity\r\n"), "");
  EXPECT_EQ(HeadBodyCodings("HTTP/1.1 200 OK\r\ncontent-encoding: gzip, zstd\r\n"), "gzip, zstd");
  EXPECT_EQ(HeadBodyCodings("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"), "");
}

TEST(RelayedHead, RewritesTheHeadForABodySaidAgainAsJson) {
  std::string head(kHead);
  SayNotEncoded(&head);
  SayJson(&head);
  SayBadRequest(&head);
  EXPECT_EQ(head,
            "HTTP/1.1 400 Bad Request\r\n"
            "content-length: 42\r\n"
            "Content-Type: application/json\r\n");
  // A head with no such fields gains only the type.
  std::string plain = "HTTP/1.1 200 OK\r\n";
  SayNotEncoded(&plain);
  SayJson(&plain);
  EXPECT_EQ(plain, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n");
}

}  // namespace
}  // namespace warden
