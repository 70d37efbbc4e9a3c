#include "core/workload/trace.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <cmath>
#include <iterator>

namespace warden {
namespace {

constexpr int64_t kMostTokens = 100'000'000;

// A whole number in [0, most] from a JSON integer or a float with no fraction.
bool ReadCount(simdjson::dom::element e, int64_t most, int64_t* out) {
  if (int64_t i; e.get_int64().get(i) == simdjson::SUCCESS) {
    *out = i;
    return i >= 0 && i <= most;
  }
  if (uint64_t u; e.get_uint64().get(u) == simdjson::SUCCESS) {
    *out = static_cast<int64_t>(std::min<uint64_t>(u, most));
    return u <= static_cast<uint64_t>(most);
  }
  double d;
  if (e.get_double().get(d) != simdjson::SUCCESS || !(d >= 0 && d <= most) || d != std::floor(d))
    return false;
  *out = static_cast<int64_t>(d);
  return true;
}

bool ReadMilliseconds(simdjson::dom::element e, double* out) {
  double d;
  if (e.get_double().get(d) == simdjson::SUCCESS) {
    *out = d;
  } else if (int64_t i; e.get_int64().get(i) == simdjson::SUCCESS) {
    *out = static_cast<double>(i);
  } else if (uint64_t u; e.get_uint64().get(u) == simdjson::SUCCESS) {
    *out = static_cast<double>(u);
  } else {
    return false;
  }
  return *out >= 0 && std::isfinite(*out);
}

// The line's request, or an error naming the field.
std::string ReadRequest(simdjson::dom::element line, TraceRequest* r) {
  simdjson::dom::object object;
  if (line.get_object().get(object) != simdjson::SUCCESS) return "not a JSON object";
  simdjson::dom::element e;
  if (object["input_length"].get(e) != simdjson::SUCCESS)
    return "input_length: missing (a trace of texts, not token counts, cannot be replayed here)";
  int64_t count = 0;
  if (!ReadCount(e, kMostTokens, &count) || count < 1)
    return fmt::format("input_length: must be a whole number from 1 to {}", kMostTokens);
  r->input_length = static_cast<int>(count);
  if (object["output_length"].get(e) == simdjson::SUCCESS) {
    if (!ReadCount(e, kMostTokens, &count))
      return fmt::format("output_length: must be a whole number from 0 to {}", kMostTokens);
    r->output_length = static_cast<int>(count);
  }
  if (object["timestamp"].get(e) == simdjson::SUCCESS && !ReadMilliseconds(e, &r->timestamp_ms))
    return "timestamp: must be a number of milliseconds, at least 0";
  if (object["delay"].get(e) == simdjson::SUCCESS && !ReadMilliseconds(e, &r->delay_ms))
    return "delay: must be a number of milliseconds, at least 0";
  if (object["session_id"].get(e) == simdjson::SUCCESS) {
    std::string_view s;
    int64_t i;
    if (e.get_string().get(s) == simdjson::SUCCESS) {
      r->session_id = s;
    } else if (e.get_int64().get(i) == simdjson::SUCCESS) {
      r->session_id = std::to_string(i);
    } else if (!e.is_null()) {
      return "session_id: must be a string";
    }
  }
  if (object["hash_ids"].get(e) == simdjson::SUCCESS) {
    simdjson::dom::array ids;
    if (e.get_array().get(ids) != simdjson::SUCCESS) return "hash_ids: must be an array";
    for (simdjson::dom::element id : ids) {
      uint64_t u;
      if (id.get_uint64().get(u) != simdjson::SUCCESS)
        return "hash_ids: each must be a whole number, at least 0";
      r->hash_ids.push_back(u);
    }
  }
  return {};
}

}  // namespace

std::string TraceLine(const TraceRequest& r) {
  std::string out = "{";
  auto to = std::back_inserter(out);
  if (r.timestamp_ms >= 0) fmt::format_to(to, "\"timestamp\":{:.0f},", r.timestamp_ms);
  if (!r.session_id.empty()) {
    // Session ids are written by the gateway (hex digits): nothing to escape; others dropped.
    const bool plain = r.session_id.find_first_of("\"\\") == std::string::npos;
    if (plain) fmt::format_to(to, "\"session_id\":\"{}\",", r.session_id);
    if (plain && r.delay_ms >= 0) fmt::format_to(to, "\"delay\":{:.0f},", r.delay_ms);
  }
  fmt::format_to(to, "\"input_length\":{},\"output_length\":{},\"hash_ids\":[{}]}}\n",
                 r.input_length, r.output_length, fmt::join(r.hash_ids, ","));
  return out;
}

bool ParseTrace(std::string_view text, std::vector<TraceRequest>* requests, std::string* error,
                int* not_json) {
  simdjson::dom::parser parser;
  int number = 0;
  while (!text.empty()) {
    ++number;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    simdjson::dom::element element;
    if (const auto e = parser.parse(line.data(), line.size()).get(element);
        e != simdjson::SUCCESS) {
      // A number no count or time can be (1e400, 2^64) is the trace's fault, not a line cut
      // short: said, not left out (found by review).
      const bool bad_number = e == simdjson::NUMBER_ERROR || e == simdjson::NUMBER_OUT_OF_RANGE;
      if (not_json && !bad_number) {
        ++*not_json;
        continue;
      }
      *error =
          fmt::format("line {}: {} ({})", number, bad_number ? "a number out of range" : "not JSON",
                      simdjson::error_message(e));
      return false;
    }
    TraceRequest r;
    if (std::string e = ReadRequest(element, &r); !e.empty()) {
      *error = fmt::format("line {}: {}", number, e);
      return false;
    }
    requests->push_back(std::move(r));
  }
  return true;
}

}  // namespace warden
