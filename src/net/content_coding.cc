#include "net/content_coding.h"

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <climits>
#include <memory>

#include "net/field_list.h"

namespace warden {
namespace {

enum class Coding { kIdentity, kGzip, kDeflate, kZstd, kUnknown };

// Room added to the output when it is full.
constexpr size_t kChunk = 64 * 1024;
// The largest zstd window taken (16 MiB): a frame may ask the decoder for up to 128 MiB of memory
// by default; a client's compressor at its usual levels asks for 8 MiB at most.
constexpr int kZstdWindowLogMax = 24;

// (See util/ascii_case.h on why not beast::iequals.)
Coding CodingNamed(std::string_view name) {
  if (EqualsLower(name, "identity")) return Coding::kIdentity;
  if (EqualsLower(name, "gzip") || EqualsLower(name, "x-gzip")) return Coding::kGzip;
  if (EqualsLower(name, "deflate")) return Coding::kDeflate;
  if (EqualsLower(name, "zstd")) return Coding::kZstd;
  return Coding::kUnknown;
}

enum class Outcome { kDecoded, kCorrupt, kTooLarge, kWindowTooLarge, kTooManyParts };

// Room left past a decoded body for the JSON reader (simdjson's padding), so that it need not copy.
constexpr size_t kReadPadding = 64;

// The output of one decoding: room is added only when what was given is full, and the string is
// cut to what was written at the end.
class Output {
 public:
  Output(std::string* out, size_t limit) : out_(out), limit_(limit) { out_->clear(); }
  ~Output() { out_->resize(used_); }

  // Room to write into: at least one byte.
  std::pair<char*, size_t> Room() {
    if (used_ == out_->size()) out_->resize(used_ + kChunk);
    return {out_->data() + used_, out_->size() - used_};
  }
  void Wrote(size_t n) { used_ += n; }
  bool OverLimit() const { return used_ > limit_; }

 private:
  std::string* out_;
  size_t limit_;
  size_t used_ = 0;
};

// zlib's inflate with `window_bits` (16 + 15: gzip, 15: zlib's format, -15: raw deflate). A gzip
// body may be several members one after the other (RFC 1952 §2.2).
Outcome Inflate(std::string_view in, int window_bits, size_t limit, std::string* out) {
  z_stream stream{};
  if (inflateInit2(&stream, window_bits) != Z_OK) return Outcome::kCorrupt;
  const std::unique_ptr<z_stream, int (*)(z_stream*)> end(&stream, inflateEnd);
  Output output(out, limit);
  int members = 0;
  for (;;) {
    if (stream.avail_in == 0 && !in.empty()) {  // fed in pieces zlib's counts can hold
      const size_t piece = std::min<size_t>(in.size(), UINT_MAX);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
      stream.avail_in = static_cast<uInt>(piece);
      in.remove_prefix(piece);
    }
    const auto [room, size] = output.Room();
    const uInt given = static_cast<uInt>(std::min<size_t>(size, UINT_MAX));
    stream.next_out = reinterpret_cast<Bytef*>(room);
    stream.avail_out = given;
    const int rc = inflate(&stream, Z_NO_FLUSH);
    output.Wrote(given - stream.avail_out);
    if (output.OverLimit()) return Outcome::kTooLarge;
    const bool input_left = stream.avail_in > 0 || !in.empty();
    if (rc == Z_STREAM_END) {
      if (!input_left) return Outcome::kDecoded;
      if (window_bits != 16 + 15 || inflateReset(&stream) != Z_OK) return Outcome::kCorrupt;
      if (++members >= kMostCodedParts) return Outcome::kTooManyParts;
      continue;  // the next gzip member
    }
    // Out of input before the stream's end: cut off.
    if (rc != Z_OK || (!input_left && stream.avail_out > 0)) return Outcome::kCorrupt;
  }
}

Outcome Unzstd(std::string_view in, size_t limit, std::string* out) {
  const std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> context(ZSTD_createDCtx(),
                                                                   ZSTD_freeDCtx);
  if (!context ||
      ZSTD_isError(ZSTD_DCtx_setParameter(context.get(), ZSTD_d_windowLogMax, kZstdWindowLogMax)))
    return Outcome::kCorrupt;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  Output output(out, limit);
  int frames = 0;
  for (;;) {
    const auto [room, size] = output.Room();
    ZSTD_outBuffer buffer{room, size, 0};
    const size_t rc = ZSTD_decompressStream(context.get(), &buffer, &input);
    output.Wrote(buffer.pos);
    if (ZSTD_isError(rc)) {
      return ZSTD_getErrorCode(rc) == ZSTD_error_frameParameter_windowTooLarge
                 ? Outcome::kWindowTooLarge
                 : Outcome::kCorrupt;
    }
    if (output.OverLimit()) return Outcome::kTooLarge;
    if (rc == 0 && input.pos == input.size) return Outcome::kDecoded;  // the last frame's end
    if (rc == 0 && ++frames >= kMostCodedParts) return Outcome::kTooManyParts;
    // Out of input with a frame unfinished and nothing more held back: cut off.
    if (input.pos == input.size && buffer.pos < buffer.size) return Outcome::kCorrupt;
  }
}

Outcome Decode(Coding coding, std::string_view in, size_t limit, std::string* out) {
  switch (coding) {
    case Coding::kGzip:
      return Inflate(in, 16 + 15, limit, out);
    case Coding::kDeflate: {
      // RFC 9110 §8.4.1.2: zlib's format; some clients send raw deflate data under the name.
      const Outcome zlib = Inflate(in, 15, limit, out);
      return zlib == Outcome::kCorrupt ? Inflate(in, -15, limit, out) : zlib;
    }
    case Coding::kZstd:
      return Unzstd(in, limit, out);
    case Coding::kIdentity:
    case Coding::kUnknown:
      break;
  }
  out->assign(in);
  return Outcome::kDecoded;
}

}  // namespace

bool DecodesBody(std::string_view codings) {
  int known = 0, unknown = 0;
  ForEachToken(codings, [&](std::string_view token) {
    const Coding coding = CodingNamed(token);
    if (coding == Coding::kUnknown) ++unknown;
    if (coding != Coding::kIdentity && coding != Coding::kUnknown) ++known;
  });
  return known == 1 && unknown == 0;
}

DecodedBody DecodeContentCoding(std::string_view codings, std::string* body, size_t limit) {
  std::string_view name, unknown;  // the coding that is not identity; one the gateway lacks
  int codings_applied = 0;
  ForEachToken(codings, [&](std::string_view token) {
    const Coding coding = CodingNamed(token);
    if (coding == Coding::kIdentity) return;
    ++codings_applied;
    name = token;
    if (coding == Coding::kUnknown && unknown.empty()) unknown = token;
  });
  if (!unknown.empty()) {
    return {415, fmt::format("Content-Encoding '{}' is not supported: the gateway decodes gzip, "
                             "deflate and zstd",
                             unknown.substr(0, 64))};
  }
  // No client compresses twice; each layer would multiply what a small body can become.
  if (codings_applied > 1) return {415, "more than one Content-Encoding: the gateway decodes one"};
  if (codings_applied == 0) return {};
  std::string decoded;
  switch (Decode(CodingNamed(name), *body, limit, &decoded)) {
    case Outcome::kDecoded:
      if (decoded.capacity() > decoded.size() + decoded.size() / 4 + kChunk) {
        // Grown by doubling: up to twice what it holds, for as long as the request lasts.
        std::string exact;
        exact.reserve(decoded.size() + kReadPadding);
        exact.append(decoded);
        decoded.swap(exact);
      }
      body->swap(decoded);
      return {.status = 200, .error = {}, .decoded = true};
    case Outcome::kTooManyParts:
      return {400,
              fmt::format("the body has more than {} {}: a client compresses a body as one",
                          kMostCodedParts,
                          CodingNamed(name) == Coding::kZstd ? "zstd frames" : "gzip members")};
    case Outcome::kCorrupt:
      return {400,
              fmt::format("the body is not valid {} data, as its Content-Encoding says", name)};
    case Outcome::kWindowTooLarge:
      return {413, fmt::format("the body's zstd frames need a window over {} MiB, more than the "
                               "gateway gives (compressed with --long or --ultra?)",
                               (size_t{1} << kZstdWindowLogMax) >> 20)};
    case Outcome::kTooLarge:
      break;
  }
  return {413,
          fmt::format("the request body, decoded ({}), is over the gateway's limit of {} bytes",
                      name, limit),
          false, /*over_limit=*/true};
}

}  // namespace warden
