#include "core/protocol/trace_context.h"

namespace warden {
namespace {

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(std::string_view s) {
  return s.find_first_not_of('0') == std::string_view::npos;
}

// Writes `value` as 16 lowercase hex digits at `out`.
void WriteHex(uint64_t value, char* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i, value >>= 4) out[i] = kDigits[value & 15];
}

}  // namespace

std::optional<TraceParent> ParseTraceParent(std::string_view value) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 characters.
  constexpr size_t kLength = 55;
  if (value.size() < kLength) return std::nullopt;
  const std::string_view version = value.substr(0, 2);
  if (!IsLowerHex(version) || version == "ff") return std::nullopt;
  // Version 00 is exactly that long; a later one may add fields after a dash.
  if (version == "00" ? value.size() != kLength : value.size() > kLength && value[kLength] != '-')
    return std::nullopt;
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  const std::string_view trace_id = value.substr(3, 32), span_id = value.substr(36, 16),
                         flags = value.substr(53, 2);
  if (!IsLowerHex(trace_id) || !IsLowerHex(span_id) || !IsLowerHex(flags) || AllZero(trace_id) ||
      AllZero(span_id))
    return std::nullopt;
  const int flag_bits = std::stoi(std::string(flags), nullptr, 16);
  return TraceParent{std::string(trace_id), std::string(span_id), (flag_bits & 1) != 0};
}

std::string RouteOfPath(std::string_view path) {
  std::string route;
  route.reserve(path.size());
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start + 1);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view segment = path.substr(start, end - start);  // with its leading '/'
    const bool has_digit = segment.find_first_of("0123456789") != std::string_view::npos;
    if (segment.size() > 8 && segment.front() == '/' && has_digit) {
      route.append("/{id}");
    } else {
      route.append(segment);
    }
    start = end;
  }
  return route;
}

std::string FormatTraceParent(std::string_view trace_id, std::string_view span_id, bool sampled) {
  std::string out;
  out.reserve(55);
  out.append("00-").append(trace_id).append("-").append(span_id).append(sampled ? "-01" : "-00");
  return out;
}

// (Without a format string: ids are made for every request traced.)
std::string TraceIdHex(uint64_t high, uint64_t low) {
  if (high == 0 && low == 0) low = 1;
  std::string out(32, '0');
  WriteHex(high, out.data());
  WriteHex(low, out.data() + 16);
  return out;
}

std::string SpanIdHex(uint64_t id) {
  std::string out(16, '0');
  WriteHex(id == 0 ? 1 : id, out.data());
  return out;
}

}  // namespace warden
