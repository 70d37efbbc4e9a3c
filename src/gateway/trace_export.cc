#include "gateway/trace_export.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <cmath>
#include <iterator>

#include "net/upstream_get.h"
#include "util/append_number.h"
#include "util/json_escape.h"

namespace warden {
namespace {

using namespace std::string_view_literals;

constexpr std::chrono::seconds kExportInterval{1};
constexpr std::chrono::milliseconds kExportTimeout{5000};
constexpr int kServerSpan = 2;   // SpanKind SPAN_KIND_SERVER
constexpr int kStatusError = 2;  // StatusCode STATUS_CODE_ERROR

// {"key":"<key>","value":{"<type>": (the keys are the gateway's own: nothing to escape)
void AppendAttributeStart(std::string* out, std::string_view key, std::string_view type) {
  out->append(R"({"key":")"sv)
      .append(key)
      .append(R"(","value":{")"sv)
      .append(type)
      .append(R"(":)"sv);
}

void AppendDouble(std::string* out, double value) {
  char digits[32];
  const auto end =
      std::to_chars(digits, digits + sizeof(digits), std::isfinite(value) ? value : 0.0).ptr;
  out->append(digits, static_cast<size_t>(end - digits));
}

// Written as text rather than through a JSON tree, and without format strings: a span per
// request, so its cost is every request's (measured in docs/gateway-design.md, "Traces").
void AppendSpan(std::string* out, const GatewaySpan& s) {
  out->append(R"({"traceId":")"sv).append(s.trace_id);
  out->append(R"(","spanId":")"sv).append(s.span_id).push_back('"');
  if (!s.parent_span_id.empty()) {
    out->append(R"(,"parentSpanId":")"sv).append(s.parent_span_id).push_back('"');
  }
  out->append(R"(,"name":)"sv);
  AppendJsonString(out, s.name);
  out->append(R"(,"kind":)"sv);
  AppendNumber(out, kServerSpan);
  // (64-bit integers as decimal strings, as protobuf's JSON mapping has them)
  out->append(R"(,"startTimeUnixNano":")"sv);
  AppendNumber(out, s.start_unix_ns);
  out->append(R"(","endTimeUnixNano":")"sv);
  AppendNumber(out, s.end_unix_ns);
  out->append(R"(","attributes":[)"sv);
  bool first = true;
  const auto next = [&] {
    if (!std::exchange(first, false)) out->push_back(',');
  };
  for (const auto& [key, value] : s.strings) {
    next();
    AppendAttributeStart(out, key, "stringValue");
    AppendJsonString(out, value);
    out->append("}}"sv);
  }
  for (const auto& [key, value] : s.ints) {
    next();
    AppendAttributeStart(out, key, "intValue");
    out->push_back('"');
    AppendNumber(out, value);
    out->append("\"}}"sv);
  }
  for (const auto& [key, value] : s.doubles) {
    next();
    AppendAttributeStart(out, key, "doubleValue");
    AppendDouble(out, value);
    out->append("}}"sv);
  }
  out->push_back(']');
  if (s.error) {
    out->append(R"(,"status":{"code":)"sv);
    AppendNumber(out, kStatusError);
    out->push_back('}');
  }
  out->push_back('}');
}

}  // namespace

std::string OtlpTracesJson(std::span<const GatewaySpan> spans, std::string_view service) {
  std::string out;
  out.reserve(256 + spans.size() * 1024);  // (a span with every attribute takes about 900 bytes)
  out.append(R"({"resourceSpans":[{"resource":{"attributes":[)"sv);
  AppendAttributeStart(&out, "service.name", "stringValue");
  AppendJsonString(&out, service);
  out.append(R"(}}]},"scopeSpans":[{"scope":{"name":"warden"},"spans":[)"sv);
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendSpan(&out, spans[i]);
  }
  out.append("]}]}]}"sv);
  return out;
}

TraceExporter::TraceExporter(boost::asio::any_io_executor executor, UpstreamUrl url,
                             std::shared_ptr<boost::asio::ssl::context> tls, std::string service)
    : executor_(executor),
      path_(url.base_path.empty() ? "/v1/traces" : ""),
      endpoint_(url.ToString() + path_),
      service_(std::move(service)),
      timer_(executor) {
  pool_ = std::make_unique<UpstreamPool>(std::vector<boost::asio::any_io_executor>{executor},
                                         std::move(url), /*max_idle=*/0, std::move(tls));
}

void TraceExporter::Add(GatewaySpan span) {
  bool full = false;
  {
    std::lock_guard lock(mu_);
    if (queued_.size() >= kMostQueued) {
      ++dropped_;
      return;
    }
    queued_.push_back(std::move(span));
    full = queued_.size() >= kBatch;
  }
  if (full && !woken_.exchange(true)) boost::asio::post(executor_, [this] { timer_.cancel(); });
}

void TraceExporter::Start() {
  running_ = true;
  boost::asio::co_spawn(executor_, Loop(), [this](std::exception_ptr e) {
    running_ = false;
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& what) {
      spdlog::error("traces: the exporter stopped ({}): no span is sent from now on", what.what());
    }
  });
}

void TraceExporter::Stop() {
  boost::asio::post(executor_, [this] {
    stopped_ = true;
    timer_.cancel();
  });
}

bool TraceExporter::BatchWaiting() {
  std::lock_guard lock(mu_);
  return queued_.size() >= kBatch;
}

boost::asio::awaitable<void> TraceExporter::Loop() {
  for (;;) {
    const bool last = stopped_;
    // (A batch that filled while the last was sent goes at once: the wake Add posted then found
    // no wait to end.)
    if (!last && !BatchWaiting()) {
      timer_.expires_after(kExportInterval);
      co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    woken_ = false;
    std::vector<GatewaySpan> batch;
    {
      std::lock_guard lock(mu_);
      batch.swap(queued_);
    }
    while (!batch.empty()) {
      const size_t n = std::min(batch.size(), kBatch);
      std::vector<GatewaySpan> part(std::make_move_iterator(batch.begin()),
                                    std::make_move_iterator(batch.begin() + n));
      batch.erase(batch.begin(), batch.begin() + n);
      co_await Send(std::move(part));
    }
    if (last) co_return;
  }
}

boost::asio::awaitable<void> TraceExporter::Send(std::vector<GatewaySpan> batch) {
  const UpstreamGetResult answer = co_await UpstreamCall(
      *pool_, 0, boost::beast::http::verb::post, path_, OtlpTracesJson(batch, service_),
      kExportTimeout, {}, 1 << 20, kExportTimeout);
  if (answer.status / 100 == 2) {
    exported_ += batch.size();
    co_return;
  }
  dropped_ += batch.size();
  if (warned_) co_return;
  warned_ = true;
  spdlog::warn(
      "traces: the collector at {} did not take {} span{} ({}): dropped, as later ones it does "
      "not take will be (warden_trace_spans_total{{exported=\"false\"}} counts them)",
      endpoint_, batch.size(), batch.size() == 1 ? "" : "s",
      answer.status > 0 ? "HTTP " + std::to_string(answer.status)
                        : (answer.error.empty() ? "no answer" : answer.error));
}

}  // namespace warden
