// The gateway's spans, one per request it relays to a replica, sent to an OpenTelemetry collector
// over OTLP/HTTP in JSON (config otlp_traces_endpoint): where a turn went (replica, route), how
// long it was held and took, what the cache gave. The span joins the client's trace (its
// traceparent), and the engine's spans (vLLM's --otlp-traces-endpoint) join the span, so a slow
// turn can be followed from the client through the gateway to the engine.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "net/upstream.h"

namespace warden {

struct GatewaySpan {
  std::string trace_id;        // 32 hex digits
  std::string span_id;         // 16 hex digits: the gateway's, sent on in traceparent
  std::string parent_span_id;  // the client's span (empty: the span starts the trace)
  std::string name;            // "POST /v1/messages"
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  bool error = false;  // answered with a 5xx, or an answer that broke off
  std::vector<std::pair<std::string, std::string>> strings;
  std::vector<std::pair<std::string, int64_t>> ints;
  std::vector<std::pair<std::string, double>> doubles;
};

// The OTLP/JSON body (an ExportTraceServiceRequest) of `spans`, from service `service` (its
// resource's service.name), as server spans of scope "warden".
std::string OtlpTracesJson(std::span<const GatewaySpan> spans, std::string_view service);

// Queues spans from any thread and sends them in batches from one executor: every second, or at
// once when kBatch are queued. What the collector refuses or cannot take is dropped (spans are
// telemetry: the requests do not wait for them), and counted.
class TraceExporter {
 public:
  static constexpr size_t kBatch = 512;
  static constexpr size_t kMostQueued = 8192;  // beyond: dropped

  // `url`: the collector's OTLP/HTTP traces endpoint (its path, /v1/traces when it has none).
  // An https one needs `tls`.
  TraceExporter(boost::asio::any_io_executor executor, UpstreamUrl url,
                std::shared_ptr<boost::asio::ssl::context> tls, std::string service);
  TraceExporter(const TraceExporter&) = delete;
  TraceExporter& operator=(const TraceExporter&) = delete;

  void Add(GatewaySpan span);
  void Start();
  // Sends what is queued, then ends; Stopped() says when it has.
  void Stop();
  bool Stopped() const { return stopped_ && !running_; }

  uint64_t exported() const { return exported_; }
  uint64_t dropped() const { return dropped_; }  // queue full, or the collector did not take them
  const std::string& endpoint() const { return endpoint_; }

 private:
  boost::asio::awaitable<void> Loop();
  bool BatchWaiting();  // a whole batch is queued
  boost::asio::awaitable<void> Send(std::vector<GatewaySpan> batch);

  boost::asio::any_io_executor executor_;
  std::unique_ptr<UpstreamPool> pool_;
  std::string path_;
  std::string endpoint_;
  std::string service_;
  boost::asio::steady_timer timer_;
  std::mutex mu_;
  std::vector<GatewaySpan> queued_;  // guarded by mu_
  std::atomic<bool> stopped_{false};
  std::atomic<bool> running_{false};
  std::atomic<bool> woken_{false};
  std::atomic<uint64_t> exported_{0};
  std::atomic<uint64_t> dropped_{0};
  bool warned_ = false;  // of a collector that failed, once (the executor's thread only)
};

}  // namespace warden
