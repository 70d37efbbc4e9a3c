#include "core/protocol/image_size.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "core/protocol/inline_data.h"

namespace warden {
namespace {

std::string Base64(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t bits = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) bits |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) bits |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[bits >> 18 & 63];
    out += kAlphabet[bits >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[bits >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[bits & 63] : '=';
  }
  return out;
}

std::string BigEndian(uint32_t value, int bytes) {
  std::string out;
  for (int k = bytes - 1; k >= 0; --k) out += static_cast<char>(value >> (8 * k) & 0xFF);
  return out;
}

std::string LittleEndian(uint32_t value, int bytes) {
  std::string out;
  for (int k = 0; k < bytes; ++k) out += static_cast<char>(value >> (8 * k) & 0xFF);
  return out;
}

// An image's first bytes and then some of its data (the reader never needs the rest).
std::string Png(uint32_t width, uint32_t height) {
  return std::string("\x89PNG\r\n\x1a\n", 8) + BigEndian(13, 4) + "IHDR" + BigEndian(width, 4) +
         BigEndian(height, 4) + std::string("\x08\x06\x00\x00\x00", 5) + std::string(200, 'x');
}

std::string Jpeg(uint32_t width, uint32_t height, size_t exif_bytes) {
  std::string jpeg("\xFF\xD8", 2);
  jpeg += std::string("\xFF\xE1", 2) + BigEndian(static_cast<uint32_t>(exif_bytes + 2), 2) +
          std::string(exif_bytes, '\xFF');  // metadata first, full of bytes that look like markers
  jpeg += std::string("\xFF\xFF\xC2", 3);   // a fill byte, then a progressive frame
  jpeg += BigEndian(17, 2) + '\x08' + BigEndian(height, 2) + BigEndian(width, 2);
  return jpeg + std::string(100, '\x01');
}

std::string Webp(std::string_view chunk, std::string_view header) {
  return "RIFF" + LittleEndian(1000, 4) + "WEBP" + std::string(chunk) + LittleEndian(900, 4) +
         std::string(header) + std::string(64, '\0');
}

std::optional<ImageSize> SizeOf(std::string_view image) {
  return ImageSizeOfBase64(Base64(image));
}

void ExpectSize(std::optional<ImageSize> size, long width, long height) {
  ASSERT_TRUE(size.has_value());
  EXPECT_EQ(size->width, width);
  EXPECT_EQ(size->height, height);
}

TEST(ImageSize, ReadsTheSizeOfEachFormatFromItsHeader) {
  ExpectSize(SizeOf(Png(1024, 768)), 1024, 768);
  ExpectSize(SizeOf(Jpeg(1920, 1080, 0)), 1920, 1080);
  // A frame header behind 40 KB of metadata: found by walking the segments' lengths.
  ExpectSize(SizeOf(Jpeg(800, 600, 40000)), 800, 600);
  ExpectSize(SizeOf("GIF89a" + LittleEndian(640, 2) + LittleEndian(480, 2) + std::string(50, 0)),
             640, 480);
  const std::string lossy =
      std::string("\x10\x02\x00\x9d\x01\x2a", 6) + LittleEndian(300, 2) + LittleEndian(200, 2);
  ExpectSize(SizeOf(Webp("VP8 ", lossy)), 300, 200);
  const uint32_t packed = (300 - 1) | (200 - 1) << 14;
  ExpectSize(SizeOf(Webp("VP8L", "\x2f" + LittleEndian(packed, 4))), 300, 200);
  ExpectSize(
      SizeOf(Webp("VP8X", std::string(4, '\0') + LittleEndian(4095, 3) + LittleEndian(2047, 3))),
      4096, 2048);
}

TEST(ImageSize, ReadsBase64WrittenWithJsonEscapes) {
  std::string text = Base64(Png(512, 256));
  // Escaped slashes (some encoders write "\/") and a line break every 76 characters.
  std::string escaped;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i > 0 && i % 76 == 0) escaped += "\\n";
    escaped += text[i] == '/' ? std::string("\\/") : std::string(1, text[i]);
  }
  ExpectSize(ImageSizeOfBase64(escaped), 512, 256);
  // Every character as a \u escape (.NET's encoder writes '+' so): found by review, each one
  // dropped shifted the bytes after it.
  std::string unicode;
  for (const char c : text) unicode += fmt::format("\\u{:04X}", static_cast<unsigned>(c));
  ExpectSize(ImageSizeOfBase64(unicode), 512, 256);
  EXPECT_FALSE(ImageSizeOfBase64("\\u20AC" + text).has_value());  // no base64 character
}

TEST(ImageSize, NoSizeForOtherDataOrAHeaderCutShort) {
  EXPECT_FALSE(SizeOf("%PDF-1.7\n" + std::string(300, 'x')).has_value());
  EXPECT_FALSE(ImageSizeOfBase64(Base64(Png(10, 10)).substr(0, 20)).has_value());
  EXPECT_FALSE(SizeOf(Png(0, 10)).has_value());
  EXPECT_FALSE(SizeOf(Jpeg(100, 100, 40000).substr(0, 30000)).has_value());
  EXPECT_FALSE(ImageSizeOfBase64(std::string(400, '!')).has_value());
  EXPECT_FALSE(ImageSizeOfBase64("").has_value());
}

TEST(ImageSize, VisionTokensFollowTheImagesArea) {
  EXPECT_EQ(VisionTokens({1024, 1024}), 37 * 37);
  EXPECT_EQ(VisionTokens({512, 512}), 18 * 18);
  EXPECT_EQ(VisionTokens({1920, 1080}), 69 * 39);  // a screenshot
  EXPECT_EQ(VisionTokens({10, 10}), 4);            // scaled up to the fewest pixels the model reads
  const long huge = VisionTokens({8000, 8000});    // scaled down to the most
  EXPECT_LE(huge, 16384);
  EXPECT_GE(huge, 16000);
  EXPECT_LE(VisionTokens({1, 1 << 20}), 16384);  // a shape the model refuses: still bounded
}

TEST(ImageSize, APromptsEstimateCountsEachImageByItsSize) {
  const std::string small = Base64(Png(56, 56) + std::string(3000, 'p'));
  const std::string screenshot = Base64(Png(1920, 1080) + std::string(3000, 'p'));
  const std::string pdf = Base64("%PDF-1.7\n" + std::string(3000, 'p'));
  const std::string body =
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":")"
      R"(data:image/png;base64,)" +
      small + R"("}},{"type":"image","source":{"type":"base64","data":")" + screenshot +
      R"("}},{"type":"document","source":{"type":"base64","data":")" + pdf + R"("}}]}]})";
  const long text = static_cast<long>(body.size() - small.size() - screenshot.size() - pdf.size());
  EXPECT_EQ(EstimateTokensWithInlineData(body),
            text / 4 + 4 + 69 * 39 + static_cast<long>(kInlineDataTokens));
}

}  // namespace
}  // namespace warden
