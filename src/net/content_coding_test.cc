#include "net/content_coding.h"

#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <memory>

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
    EXPECT_EQ(result.decoded, coding != "identity") << coding;
    EXPECT_EQ(decoded, kJson) << coding;
  }
}

TEST(ContentCoding, TakesOneCodingBesideIdentity) {
  std::string body = Gzipped(kJson);
  const DecodedBody result = DecodeContentCoding("identity, gzip,identity", &body, 1 << 20);
  EXPECT_EQ(result.status, 200) << result.error;
  EXPECT_EQ(body, kJson);
  std::string plain = kJson;
  EXPECT_EQ(DecodeContentCoding("identity, identity, identity, identity, identity", &plain, 1 << 20)
                .status,
            200);
  EXPECT_EQ(plain, kJson);
  // Compressed twice: each layer would multiply what a few bytes can become.
  const std::string twice = Zstded(Gzipped(kJson));
  body = twice;
  const DecodedBody layered = DecodeContentCoding("gzip, zstd", &body, 1 << 20);
  EXPECT_EQ(layered.status, 415);
  EXPECT_EQ(layered.error, "more than one Content-Encoding: the gateway decodes one");
  EXPECT_EQ(body, twice);
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
    EXPECT_TRUE(body == large) << coding;
  }
}

TEST(ContentCoding, RefusesUnknownCodingsWith415AndLeavesTheBody) {
  std::string body = "\x1b\x02";
  const DecodedBody br = DecodeContentCoding("br", &body, 1 << 20);
  EXPECT_EQ(br.status, 415);
  EXPECT_EQ(br.error,
            "Content-Encoding 'br' is not supported: the gateway decodes gzip, deflate and zstd");
  EXPECT_EQ(body, "\x1b\x02");
  EXPECT_EQ(DecodeContentCoding("gzip, br", &body, 1 << 20).error, br.error);
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
    EXPECT_TRUE(result.over_limit) << coding;
    EXPECT_EQ(result.error, "the request body, decoded (" + coding +
                                "), is over the gateway's limit of 1048576 bytes");
  }
  std::string at_limit = Gzipped(std::string(1 << 20, 'x'));
  EXPECT_EQ(DecodeContentCoding("gzip", &at_limit, 1 << 20).status, 200);
  EXPECT_EQ(at_limit.size(), 1u << 20);
}

// An agent's history repeats itself (the same tool output turn after turn): it may compress
// hundreds of times, and is decoded whole (the body limit bounds it).
TEST(ContentCoding, DecodesHistoriesThatRepeatThemselves) {
  const std::string output =
      R"({"type":"tool_result","content":"NAME READY STATUS\n)" + std::string(7000, 'p') + R"("},)";
  std::string history;
  for (int i = 0; i < 200; ++i) history += output;
  std::string body = Zstded(history);
  EXPECT_GT(history.size(), 200 * body.size()) << "compressed as much as such a history gets";
  ASSERT_EQ(DecodeContentCoding("zstd", &body, 32 << 20).status, 200);
  EXPECT_TRUE(body == history);
  EXPECT_LE(body.capacity(), history.size() + history.size() / 4 + (64 << 10));
}

// Clients send one gzip member or zstd frame; a body of many (empty ones cost time each) is not
// decoded.
TEST(ContentCoding, RefusesBodiesOfManyMembersOrFrames) {
  std::string gzip, zstd;
  for (int i = 0; i < 65; ++i) {
    gzip += Gzipped("");
    zstd += Zstded("");
  }
  const DecodedBody gzip_result = DecodeContentCoding("gzip", &gzip, 1 << 20);
  EXPECT_EQ(gzip_result.status, 400);
  EXPECT_EQ(gzip_result.error,
            "the body has more than 64 gzip members: a client compresses a body as one");
  EXPECT_EQ(DecodeContentCoding("zstd", &zstd, 1 << 20).status, 400);
  std::string sixty_four;
  for (int i = 0; i < 64; ++i) sixty_four += Zstded("{}");
  EXPECT_EQ(DecodeContentCoding("zstd", &sixty_four, 1 << 20).status, 200);
}

// A zstd frame that asks for a window beyond what the gateway gives (zstd --long).
TEST(ContentCoding, RefusesZstdWindowsOver16MiB) {
  const std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ASSERT_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_windowLog, 25)));
  std::string out(ZSTD_compressBound(kJson.size()) + 64, '\0');
  // Streamed, its size unknown at the start: the frame says its window.
  ZSTD_inBuffer in{kJson.data(), kJson.size(), 0};
  ZSTD_outBuffer frame{out.data(), out.size(), 0};
  ASSERT_FALSE(ZSTD_isError(ZSTD_compressStream2(cctx.get(), &frame, &in, ZSTD_e_continue)));
  ZSTD_inBuffer none{nullptr, 0, 0};
  ASSERT_EQ(ZSTD_compressStream2(cctx.get(), &frame, &none, ZSTD_e_end), 0u);
  out.resize(frame.pos);
  const DecodedBody result = DecodeContentCoding("zstd", &out, 32 << 20);
  EXPECT_EQ(result.status, 413);
  EXPECT_FALSE(result.over_limit);  // not a matter of the limit: no larger one would take it
  EXPECT_EQ(result.error,
            "the body's zstd frames need a window over 16 MiB, more than the gateway gives "
            "(compressed with --long or --ultra?)");
}

TEST(ContentCoding, OnlyOneKnownCodingIsWorkToDecode) {
  EXPECT_TRUE(DecodesBody("gzip"));
  EXPECT_TRUE(DecodesBody("identity, ZSTD"));
  EXPECT_TRUE(DecodesBody("x-gzip"));
  EXPECT_FALSE(DecodesBody("identity"));
  EXPECT_FALSE(DecodesBody("br"));
  EXPECT_FALSE(DecodesBody("gzip, br"));
  EXPECT_FALSE(DecodesBody("gzip, deflate"));
  EXPECT_FALSE(DecodesBody(""));
}

}  // namespace
}  // namespace warden
