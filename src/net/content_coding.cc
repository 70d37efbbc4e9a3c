#include "net/content_coding.h"

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include <boost/beast/core/string.hpp>
#include <climits>
#include <memory>
#include <vector>

#include "net/field_list.h"

namespace warden {
namespace {

enum class Coding { kIdentity, kGzip, kDeflate, kZstd, kUnknown };

// How many codings one body may carry: every one is undone in memory, each up to the limit.
constexpr size_t kMostCodings = 4;
// What one decoding call adds to the output at most.
constexpr size_t kChunk = 64 * 1024;
// The largest zstd window taken (16 MiB): a frame may ask the decoder for up to 128 MiB of memory
// by default; a client's compressor at its usual levels asks for 8 MiB at most.
constexpr int kZstdWindowLogMax = 24;

Coding CodingNamed(std::string_view name) {
  namespace beast = boost::beast;
  if (beast::iequals(name, "identity")) return Coding::kIdentity;
  if (beast::iequals(name, "gzip") || beast::iequals(name, "x-gzip")) return Coding::kGzip;
  if (beast::iequals(name, "deflate")) return Coding::kDeflate;
  if (beast::iequals(name, "zstd")) return Coding::kZstd;
  return Coding::kUnknown;
}

enum class Outcome { kDecoded, kCorrupt, kTooLarge };

// Grows `out` by up to kChunk bytes of room; returns where they start.
char* MoreRoom(std::string* out, size_t* room) {
  const size_t used = out->size();
  out->resize(used + kChunk);
  *room = kChunk;
  return out->data() + used;
}

// zlib's inflate with `window_bits` (16 + 15: gzip, 15: zlib's format, -15: raw deflate). A gzip
// body may be several members one after the other (RFC 1952 §2.2).
Outcome Inflate(std::string_view in, int window_bits, size_t limit, std::string* out) {
  if (in.size() > UINT_MAX) return Outcome::kTooLarge;
  z_stream stream{};
  if (inflateInit2(&stream, window_bits) != Z_OK) return Outcome::kCorrupt;
  const std::unique_ptr<z_stream, int (*)(z_stream*)> end(&stream, inflateEnd);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  stream.avail_in = static_cast<uInt>(in.size());
  out->clear();
  for (;;) {
    size_t room;
    stream.next_out = reinterpret_cast<Bytef*>(MoreRoom(out, &room));
    stream.avail_out = static_cast<uInt>(room);
    const int rc = inflate(&stream, Z_NO_FLUSH);
    out->resize(out->size() - stream.avail_out);
    if (out->size() > limit) return Outcome::kTooLarge;
    if (rc == Z_STREAM_END) {
      if (stream.avail_in == 0) return Outcome::kDecoded;
      if (window_bits != 16 + 15 || inflateReset(&stream) != Z_OK) return Outcome::kCorrupt;
      continue;  // the next gzip member
    }
    // Out of input before the stream's end: cut off.
    if (rc != Z_OK || (stream.avail_in == 0 && stream.avail_out > 0)) return Outcome::kCorrupt;
  }
}

Outcome Unzstd(std::string_view in, size_t limit, std::string* out) {
  const std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> context(ZSTD_createDCtx(),
                                                                   ZSTD_freeDCtx);
  if (!context ||
      ZSTD_isError(ZSTD_DCtx_setParameter(context.get(), ZSTD_d_windowLogMax, kZstdWindowLogMax)))
    return Outcome::kCorrupt;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  out->clear();
  for (;;) {
    size_t room;
    char* start = MoreRoom(out, &room);
    ZSTD_outBuffer output{start, room, 0};
    const size_t rc = ZSTD_decompressStream(context.get(), &output, &input);
    out->resize(out->size() - room + output.pos);
    if (ZSTD_isError(rc)) return Outcome::kCorrupt;
    if (out->size() > limit) return Outcome::kTooLarge;
    if (input.pos == input.size && rc == 0) return Outcome::kDecoded;  // the last frame's end
    // Out of input with a frame unfinished and nothing more held back: cut off.
    if (input.pos == input.size && output.pos < room) return Outcome::kCorrupt;
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

DecodedBody DecodeContentCoding(std::string_view codings, std::string* body, size_t limit) {
  std::vector<std::string_view> names;
  ForEachToken(codings, [&](std::string_view name) { names.push_back(name); });
  if (names.size() > kMostCodings)
    return {415, fmt::format("more than {} content codings", kMostCodings)};
  for (const std::string_view name : names) {
    if (CodingNamed(name) == Coding::kUnknown) {
      return {415, fmt::format("Content-Encoding '{}' is not supported: the gateway decodes "
                               "gzip, deflate and zstd",
                               name.substr(0, 64))};
    }
  }
  std::string decoded, next;
  std::string_view current = *body;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    const Coding coding = CodingNamed(*it);
    if (coding == Coding::kIdentity) continue;
    switch (Decode(coding, current, limit, &next)) {
      case Outcome::kCorrupt:
        return {400,
                fmt::format("the body is not valid {} data, as its Content-Encoding says", *it)};
      case Outcome::kTooLarge:
        return {413, fmt::format("the request body, decoded ({}), is over the gateway's limit of "
                                 "{} bytes",
                                 *it, limit)};
      case Outcome::kDecoded:
        break;
    }
    decoded.swap(next);
    current = decoded;
  }
  if (current.data() != body->data()) body->swap(decoded);
  return {};
}

}  // namespace warden
