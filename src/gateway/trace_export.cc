#include "gateway/trace_export.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/json.hpp>

#include "net/upstream_get.h"

namespace warden {
namespace {

namespace json = boost::json;

constexpr std::chrono::seconds kExportInterval{1};
constexpr std::chrono::milliseconds kExportTimeout{5000};
constexpr int kServerSpan = 2;   // SpanKind SPAN_KIND_SERVER
constexpr int kStatusError = 2;  // StatusCode STATUS_CODE_ERROR

json::object Attribute(std::string_view key, json::object value) {
  return {{"key", key}, {"value", std::move(value)}};
}

json::object SpanJson(const GatewaySpan& s) {
  json::array attributes;
  for (const auto& [key, value] : s.strings)
    attributes.push_back(Attribute(key, {{"stringValue", value}}));
  for (const auto& [key, value] : s.ints)
    attributes.push_back(Attribute(key, {{"intValue", std::to_string(value)}}));
  for (const auto& [key, value] : s.doubles)
    attributes.push_back(Attribute(key, {{"doubleValue", value}}));
  json::object span{{"traceId", s.trace_id},
                    {"spanId", s.span_id},
                    {"name", s.name},
                    {"kind", kServerSpan},
                    // (64-bit integers as decimal strings, as protobuf's JSON mapping has them)
                    {"startTimeUnixNano", std::to_string(s.start_unix_ns)},
                    {"endTimeUnixNano", std::to_string(s.end_unix_ns)},
                    {"attributes", std::move(attributes)}};
  if (!s.parent_span_id.empty()) span["parentSpanId"] = s.parent_span_id;
  if (s.error) span["status"] = json::object{{"code", kStatusError}};
  return span;
}

}  // namespace

std::string OtlpTracesJson(std::span<const GatewaySpan> spans, std::string_view service) {
  json::array list;
  for (const GatewaySpan& s : spans) list.push_back(SpanJson(s));
  json::object resource{
      {"attributes", json::array{Attribute("service.name", {{"stringValue", service}})}}};
  json::object scope_spans{{"scope", json::object{{"name", "warden"}}}, {"spans", std::move(list)}};
  json::object resource_spans{{"resource", std::move(resource)},
                              {"scopeSpans", json::array{std::move(scope_spans)}}};
  return json::serialize(json::object{{"resourceSpans", json::array{std::move(resource_spans)}}});
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
  boost::asio::co_spawn(executor_, Loop(), [this](std::exception_ptr) { running_ = false; });
}

void TraceExporter::Stop() {
  boost::asio::post(executor_, [this] {
    stopped_ = true;
    timer_.cancel();
  });
}

boost::asio::awaitable<void> TraceExporter::Loop() {
  for (;;) {
    const bool last = stopped_;
    if (!last) {
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
