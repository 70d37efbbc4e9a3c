#include "net/content_coding.h"

#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

namespace warden {
namespace {

const std::string kJson = R"({"model":"m","messages":[{"role":"user","content":"hello there"}]})";

// `text` compressed by zlib with `window_bits` (16 + 15: gzip, 15: zlib's format, -15: raw).
std::string Deflated(const std::string& text, int window_bits) {
  z_stream s{};
  EXPECT_EQ(deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&s, text.size()) + 32, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  s.avail_in = static_cast<uInt>(text.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

std::string Gzipped(const std::string& text) {
  return Deflated(text, 16 + 15);
}

std::string Zstded(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

TEST(ContentCoding, DecodesEachCodingClientsSend) {
  for (const auto& [coding, body] : std::vector<std::pair<std::string, std::string>>{
           {"gzip", Gzipped(kJson)},
           {"x-gzip", Gzipped(kJson)},
           {"GZIP", Gzipped(kJson)},
           {"deflate", Deflated(kJson, 15)},
           {"deflate", Deflated(kJson, -15)},  // raw deflate data under the name, as some send
           {"zstd", Zstded(kJson)},
           {"identity", kJson}}) {
    std::string decoded = body;
    const DecodedBody result = DecodeContentCoding(coding, &decoded, 1 << 20);
    EXPECT_EQ(result.status, 200) << coding << ": " << result.error;
    EXPECT_EQ(decoded, kJson) << coding;
  }
}

TEST(ContentCoding, UndoesSeveralCodingsLastFirst) {
  std::string body = Zstded(Gzipped(kJson));  // gzip applied first, then zstd
  const DecodedBody result = DecodeContentCoding("gzip, identity,zstd", &body, 1 << 20);
  EXPECT_EQ(result.status, 200) << result.error;
  EXPECT_EQ(body, kJson);
}

TEST(ContentCoding, ReadsEveryGzipMemberAndZstdFrame) {
  std::string gzip = Gzipped(R"({"a":)") + Gzipped("1}");
  ASSERT_EQ(DecodeContentCoding("gzip", &gzip, 1 << 20).status, 200);
  EXPECT_EQ(gzip, R"({"a":1})");
  std::string zstd = Zstded(R"({"a":)") + Zstded("1}");
  ASSERT_EQ(DecodeContentCoding("zstd", &zstd, 1 << 20).status, 200);
  EXPECT_EQ(zstd, R"({"a":1})");
}

TEST(ContentCoding, DecodesBodiesLargerThanOneStep) {
  std::string large;
  for (int i = 0; large.size() < 600'000; ++i) large += "turn " + std::to_string(i) + " said; ";
  for (const std::string coding : {"gzip", "zstd"}) {
    std::string body = coding == "gzip" ? Gzipped(large) : Zstded(large);
    ASSERT_EQ(DecodeContentCoding(coding, &body, 1 << 20).status, 200) << coding;
    EXPECT_EQ(body, large) << coding;
  }
}

TEST(ContentCoding, RefusesUnknownCodingsWith415AndLeavesTheBody) {
  std::string body = "\x1b\x02";
  const DecodedBody br = DecodeContentCoding("br", &body, 1 << 20);
  EXPECT_EQ(br.status, 415);
  EXPECT_EQ(br.error,
            "Content-Encoding 'br' is not supported: the gateway decodes gzip, deflate and zstd");
  EXPECT_EQ(body, "\x1b\x02");
  EXPECT_EQ(DecodeContentCoding("gzip, gzip, gzip, gzip, gzip", &body, 1 << 20).status, 415);
}

TEST(ContentCoding, RefusesDataNotInItsCodingWith400) {
  const std::string gzip = Gzipped(kJson);
  const std::string zstd = Zstded(kJson);
  for (const auto& [coding, bad] : std::vector<std::pair<std::string, std::string>>{
           {"gzip", kJson},
           {"gzip", gzip.substr(0, gzip.size() - 5)},  // cut off
           {"gzip", gzip + "trailing"},
           {"zstd", zstd.substr(0, zstd.size() - 3)},
           {"zstd", kJson},
           {"deflate", "\xff\xff\xff\xff"},
           {"gzip", ""}}) {
    std::string body = bad;
    const DecodedBody result = DecodeContentCoding(coding, &body, 1 << 20);
    EXPECT_EQ(result.status, 400) << coding << " " << bad.size();
    EXPECT_EQ(result.error,
              "the body is not valid " + coding + " data, as its Content-Encoding says");
    EXPECT_EQ(body, bad);
  }
}

// A small body that decodes to a large one (a "zip bomb") stops at the limit.
TEST(ContentCoding, StopsAtTheLimitWith413) {
  const std::string zeros(8 << 20, '\0');
  for (const std::string coding : {"gzip", "zstd"}) {
    std::string body = coding == "gzip" ? Gzipped(zeros) : Zstded(zeros);
    EXPECT_LT(body.size(), 64u << 10) << coding;
    const DecodedBody result = DecodeContentCoding(coding, &body, 1 << 20);
    EXPECT_EQ(result.status, 413) << coding;
    EXPECT_EQ(result.error, "the request body, decoded (" + coding +
                                "), is over the gateway's limit of 1048576 bytes");
  }
  std::string at_limit = Gzipped(std::string(1 << 20, 'x'));
  EXPECT_EQ(DecodeContentCoding("gzip", &at_limit, 1 << 20).status, 200);
  EXPECT_EQ(at_limit.size(), 1u << 20);
}

}  // namespace
}  // namespace warden
