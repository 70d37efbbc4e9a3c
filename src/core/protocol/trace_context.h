// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header a client
// sends, so that the gateway's span of a request joins the client's trace, and the one it sends
// on, so that the engine's spans (vLLM's --otlp-traces-endpoint) join the gateway's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace warden {

struct TraceParent {
  std::string trace_id;  // 32 lowercase hex digits, not all zero
  std::string span_id;   // 16 lowercase hex digits, not all zero: the caller's span
  bool sampled = true;   // the caller records this trace (flag 01)
};

// The traceparent `value`; nothing if it is not valid (the request then starts a trace of its
// own, as the specification asks). A version above 00 is read for its first four fields.
std::optional<TraceParent> ParseTraceParent(std::string_view value);

// "00-<trace_id>-<span_id>-01" (or "-00" when not sampled).
std::string FormatTraceParent(std::string_view trace_id, std::string_view span_id, bool sampled);

// `path` as a span's name shows it: each segment that looks like an id (8 characters or more,
// a digit among them: "resp_68a9…", "file-abc123…") as {id}, so that a collector groups the
// spans of one route under one name; the span keeps the path itself as an attribute.
std::string RouteOfPath(std::string_view path);

// Random ids as lowercase hex (128 bits from two draws, or 64), never all zero as the
// specification forbids.
std::string TraceIdHex(uint64_t high, uint64_t low);
std::string SpanIdHex(uint64_t id);

}  // namespace warden
