#include "core/protocol/image_size.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace warden {
namespace {

constexpr std::array<int8_t, 256> kSextet = [] {
  std::array<int8_t, 256> table{};
  table.fill(-1);
  const std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < alphabet.size(); ++i)
    table[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
  return table;
}();

// The decoded bytes of base64 text, any one of them in constant time. Text with JSON escapes in it
// (an escaped slash, line breaks every 76 characters) is first copied without them.
class Base64Bytes {
 public:
  explicit Base64Bytes(std::string_view text) : chars_(text) {
    if (text.find('\\') != std::string_view::npos) {
      clean_ = WithoutEscapes(text);
      chars_ = clean_;
    }
  }

  // Byte `i`, or -1 past the end or in text that is not base64.
  int At(size_t i) const {
    const size_t group = i / 3 * 4;
    if (group + 4 > chars_.size()) return -1;
    int sextets[4];
    for (int k = 0; k < 4; ++k) {
      const char c = chars_[group + k];
      sextets[k] = c == '=' ? 0 : kSextet[static_cast<unsigned char>(c)];
      if (sextets[k] < 0) return -1;
    }
    const uint32_t bits =
        static_cast<uint32_t>(sextets[0]) << 18 | static_cast<uint32_t>(sextets[1]) << 12 |
        static_cast<uint32_t>(sextets[2]) << 6 | static_cast<uint32_t>(sextets[3]);
    return static_cast<int>(bits >> (16 - 8 * (i % 3)) & 0xFF);
  }

  // The `n`-byte big- or little-endian number at `i`, or -1.
  long BigEndian(size_t i, int n) const { return Number(i, n, true); }
  long LittleEndian(size_t i, int n) const { return Number(i, n, false); }

  bool Matches(size_t i, std::string_view bytes) const {
    for (size_t k = 0; k < bytes.size(); ++k)
      if (At(i + k) != static_cast<unsigned char>(bytes[k])) return false;
    return true;
  }

 private:
  static std::string WithoutEscapes(std::string_view text) {
    std::string clean;
    clean.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '\\' || i + 1 == text.size()) {
        clean.push_back(text[i]);
      } else if (text[i + 1] == 'u') {  // "\u002B" for '+', as some encoders write it
        unsigned code = 0;
        const std::string_view hex = text.substr(i + 2, 4);
        const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), code, 16);
        if (ec != std::errc() || end != hex.data() + hex.size() || hex.size() < 4 || code >= 0x80)
          return {};  // not base64 written another way: no size read
        if (code > ' ') clean.push_back(static_cast<char>(code));  // line breaks dropped
        i += 5;
      } else {
        if (text[i + 1] == '/') clean.push_back('/');  // "\n", "\r", "\t": line breaks, dropped
        ++i;
      }
    }
    return clean;
  }

  long Number(size_t i, int n, bool big_endian) const {
    long value = 0;
    for (int k = 0; k < n; ++k) {
      const int byte = At(i + (big_endian ? k : n - 1 - k));
      if (byte < 0) return -1;
      value = value << 8 | byte;
    }
    return value;
  }

  std::string_view chars_;
  std::string clean_;
};

std::optional<ImageSize> Checked(long width, long height) {
  constexpr long kLargest = 1 << 20;
  if (width <= 0 || height <= 0 || width > kLargest || height > kLargest) return std::nullopt;
  return ImageSize{width, height};
}

std::optional<ImageSize> PngSize(const Base64Bytes& b) {
  if (!b.Matches(0, "\x89PNG\r\n\x1a\n") || !b.Matches(12, "IHDR")) return std::nullopt;
  return Checked(b.BigEndian(16, 4), b.BigEndian(20, 4));
}

std::optional<ImageSize> GifSize(const Base64Bytes& b) {
  if (!b.Matches(0, "GIF8")) return std::nullopt;
  return Checked(b.LittleEndian(6, 2), b.LittleEndian(8, 2));
}

std::optional<ImageSize> WebpSize(const Base64Bytes& b) {
  if (!b.Matches(0, "RIFF") || !b.Matches(8, "WEBP")) return std::nullopt;
  if (b.Matches(12, "VP8 ") && b.Matches(23, "\x9d\x01\x2a"))  // lossy: a key frame's header
    return Checked(b.LittleEndian(26, 2) & 0x3FFF, b.LittleEndian(28, 2) & 0x3FFF);
  if (b.Matches(12, "VP8L") && b.At(20) == 0x2F) {  // lossless: 14 bits each, less one
    const long bits = b.LittleEndian(21, 4);
    if (bits < 0) return std::nullopt;
    return Checked((bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1);
  }
  if (b.Matches(12, "VP8X")) {  // extended: 24 bits each, less one
    const long width = b.LittleEndian(24, 3), height = b.LittleEndian(27, 3);
    if (width < 0 || height < 0) return std::nullopt;
    return Checked(width + 1, height + 1);
  }
  return std::nullopt;
}

// A start-of-frame marker (baseline, progressive, ...), which holds the size; not DHT (C4), JPG
// (C8) or DAC (CC), which share the range.
bool IsStartOfFrame(int marker) {
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

// Walks the segments before the frame's header (metadata such as EXIF can come first).
std::optional<ImageSize> JpegSize(const Base64Bytes& b) {
  if (b.At(0) != 0xFF || b.At(1) != 0xD8) return std::nullopt;
  constexpr int kMostSegments = 1000;
  size_t at = 2;
  for (int segment = 0; segment < kMostSegments; ++segment) {
    if (b.At(at) != 0xFF) return std::nullopt;
    int marker = b.At(at + 1);
    while (marker == 0xFF) marker = b.At(++at + 1);                           // fill bytes
    if (marker < 0 || marker == 0xD9 || marker == 0xDA) return std::nullopt;  // end, or the scan
    if (IsStartOfFrame(marker)) return Checked(b.BigEndian(at + 7, 2), b.BigEndian(at + 5, 2));
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // markers without a length
      at += 2;
      continue;
    }
    const long length = b.BigEndian(at + 2, 2);
    if (length < 2) return std::nullopt;
    at += 2 + static_cast<size_t>(length);
  }
  return std::nullopt;
}

}  // namespace

std::optional<ImageSize> ImageSizeOfBase64(std::string_view base64) {
  const Base64Bytes bytes(base64);
  for (const auto reader : {PngSize, JpegSize, GifSize, WebpSize})
    if (std::optional<ImageSize> size = reader(bytes)) return size;
  return std::nullopt;
}

long VisionTokens(ImageSize size) {
  constexpr double kTile = 28, kFewestPixels = 3136, kMostPixels = 12845056;
  const double h = static_cast<double>(size.height), w = static_cast<double>(size.width);
  double rows = std::max(1.0, std::round(h / kTile)),
         columns = std::max(1.0, std::round(w / kTile));
  if (rows * columns * kTile * kTile > kMostPixels) {
    const double scale = std::sqrt(h * w / kMostPixels);
    rows = std::max(1.0, std::floor(h / scale / kTile));
    columns = std::max(1.0, std::floor(w / scale / kTile));
  } else if (rows * columns * kTile * kTile < kFewestPixels) {
    const double scale = std::sqrt(kFewestPixels / (h * w));
    rows = std::ceil(h * scale / kTile);
    columns = std::ceil(w * scale / kTile);
  }
  // (An image hundreds of times longer than wide, which the model refuses, stays under the most.)
  return static_cast<long>(std::min(rows * columns, kMostPixels / (kTile * kTile)));
}

}  // namespace warden
