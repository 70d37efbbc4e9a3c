// The gateway's own /metrics (Prometheus text), and the scrape loop that feeds the routers.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <optional>
#include <utility>

#include "core/protocol/vllm_metrics_reader.h"
#include "gateway/gateway.h"
#include "gateway/health_verdict.h"
#include "gateway/idle_sleep_watch.h"
#include "gateway/peer_sync.h"
#include "gateway/seq_limit_watch.h"
#include "gateway/stall_watch.h"
#include "net/upstream_get.h"
#include "os/system_time.h"
#include "util/prometheus.h"
#include "util/steady_seconds.h"

namespace warden {

namespace {

// One replica's figures for /metrics (or the engine balancer's, in a data-parallel layout).
struct MetricRow {
  Labels labels;
  ReplicaLoad load;
  ReplicaCounters counters;
  int64_t scrape_errors;
  int held = 0;
  int reserved = 0;
  // The requests vLLM's own balancer placed (affinity off in a data-parallel layout): counted,
  // but no replica (no health, conversations or engine figures).
  bool engine = false;
  bool healthy = true;        // its health checks'
  bool draining = false;      // taken out of service through the admin API
  bool asleep = false;        // its engine sleeps (vLLM's sleep mode), as last scraped
  int64_t held_too_long = 0;  // let in by admission_max_hold_s
};
using MetricRows = std::vector<std::pair<std::string, std::vector<MetricRow>>>;  // per model

// One model's session table and turn counts for /metrics.
struct ModelMetricRow {
  Labels labels;
  size_t sessions, active;
  int64_t follow_ups, stayed;
  uint64_t evicted, evicted_active;
  int64_t to_draining;
  // The routing settings in effect (a PATCH or SIGHUP changes them), so that a change in the
  // placements can be lined up with the change that made it.
  bool affinity;
  int overflow_limit;
  bool overflow_limit_auto;
  std::string policy, admission;
};

// A counter with one sample per replica row.
void WriteRowCounter(PrometheusWriter& w, const MetricRows& per_model, const char* family,
                     const char* help, int64_t ReplicaCounters::*counter) {
  w.Family(family, "counter", help);
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows) w.Sample(family, row.labels, double(row.counters.*counter));
  }
}

void WriteRouteFamily(PrometheusWriter& w, const MetricRows& per_model) {
  w.Family("warden_requests_total", "counter",
           "Requests a replica answered or failed, by model, replica and route.");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows) {
      if (row.engine) {  // placed by vLLM's balancer: route "engine", as its x-warden-route says
        Labels l = row.labels;
        l.emplace_back("route", "engine");
        w.Sample("warden_requests_total", l, double(row.counters.balanced));
        continue;
      }
      const std::pair<const char*, int64_t> routes[] = {{"new", row.counters.new_conversations},
                                                        {"sticky", row.counters.sticky},
                                                        {"overflow", row.counters.overflow},
                                                        {"rehome", row.counters.rehomed},
                                                        {"balanced", row.counters.balanced}};
      for (const auto& [route, n] : routes) {
        Labels l = row.labels;
        l.emplace_back("route", route);
        w.Sample("warden_requests_total", l, double(n));
      }
    }
  }
}

// The replicas' counters.
void WriteReplicaCounters(PrometheusWriter& w, const MetricRows& per_model) {
  WriteRowCounter(
      w, per_model, "warden_requests_failed_total",
      "Requests that got no answer from the replica, no valid HTTP one, or one that broke "
      "off.",
      &ReplicaCounters::failed);
  WriteRowCounter(w, per_model, "warden_replica_error_answers_total",
                  "Requests the replica answered with a server error (5xx) or 429, relayed or sent "
                  "to another replica.",
                  &ReplicaCounters::error_answers);
  WriteRowCounter(
      w, per_model, "warden_output_tokens_total",
      "Tokens the replica generated, as the usage of its whole 2xx generation answers reported "
      "them.",
      &ReplicaCounters::output_tokens);
  WriteRowCounter(
      w, per_model, "warden_replica_client_error_answers_total",
      "Requests the replica answered with a client error (4xx but 429: a prompt past its "
      "context, a path it does not serve), relayed.",
      &ReplicaCounters::client_error_answers);
}

// The replicas' gauges.
void WriteReplicaGauges(PrometheusWriter& w, const MetricRows& per_model) {
  w.Family("warden_requests_in_flight", "gauge",
           "Requests routed to a replica and not finished (those admission holds for it "
           "included: they count against its overflow limit too).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      w.Sample("warden_requests_in_flight", row.labels, row.load.in_flight);
  }
  w.Family("warden_requests_held", "gauge",
           "Requests admission holds at the gateway for the replica (admission: fifo, recent:K or "
           "reserve:N).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine) w.Sample("warden_requests_held", row.labels, row.held);
  }
  w.Family("warden_admission_reservations", "gauge",
           "Conversations whose room on the replica admission keeps for their next turn "
           "(admission: reserve:N).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine) w.Sample("warden_admission_reservations", row.labels, row.reserved);
  }
  w.Family("warden_admission_held_too_long_total", "counter",
           "Requests admission held for admission_max_hold_s and let in to the replica whatever "
           "its room (admission could not keep up; their clients would have given up).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine)
        w.Sample("warden_admission_held_too_long_total", row.labels, row.held_too_long);
  }
  w.Family("warden_replica_healthy", "gauge",
           "1 when the replica is in service: it answers its health check and its engine is "
           "awake (or idle_sleep keeps sleeping replicas in service; see warden_replica_asleep).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine) w.Sample("warden_replica_healthy", row.labels, row.healthy ? 1 : 0);
  }
  w.Family("warden_replica_draining", "gauge",
           "1 when the replica is taken out of service through the admin API (draining).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine) w.Sample("warden_replica_draining", row.labels, row.draining ? 1 : 0);
  }
  w.Family("warden_replica_asleep", "gauge",
           "1 when the replica's engine sleeps (vLLM's sleep mode, vllm:engine_sleep_state; last "
           "scrape): out of service for that, not down, unless idle_sleep keeps it in service.");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine) w.Sample("warden_replica_asleep", row.labels, row.asleep ? 1 : 0);
  }
  w.Family("warden_replica_running", "gauge",
           "Requests the replica's engine is running (vllm:num_requests_running, last scrape; "
           "absent while the replica is out of service, warden_replica_healthy 0).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine && row.healthy)
        w.Sample("warden_replica_running", row.labels, row.load.running);
  }
  w.Family("warden_replica_waiting", "gauge",
           "Requests waiting in the replica's engine (vllm:num_requests_waiting, last scrape; "
           "absent while the replica is out of service, warden_replica_healthy 0).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine && row.healthy)
        w.Sample("warden_replica_waiting", row.labels, row.load.waiting);
  }
  w.Family("warden_replica_kv_cache_usage", "gauge",
           "Share of the replica's KV cache in use, 0 to 1 (vllm:kv_cache_usage_perc, last "
           "scrape; absent while the replica is out of service, warden_replica_healthy 0).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine && row.healthy)
        w.Sample("warden_replica_kv_cache_usage", row.labels, row.load.kv_cache_usage);
  }
  w.Family("warden_active_conversations", "gauge", "Active conversations homed on the replica.");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine)
        w.Sample("warden_active_conversations", row.labels, row.load.active_conversations);
  }
}

// The replicas' prompt tokens (cached and computed, history), and their counters and time to first
// token that go with them.
void WriteReplicaTokens(PrometheusWriter& w, const MetricRows& per_model) {
  w.Family("warden_prompt_tokens_total", "counter",
           "Prompt tokens by whether the engine read them from its prefix cache (cached) or "
           "computed them.");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows) {
      Labels cached = row.labels, computed = row.labels;
      cached.emplace_back("kind", "cached");
      computed.emplace_back("kind", "computed");
      w.Sample("warden_prompt_tokens_total", cached, double(row.counters.cached_prompt_tokens));
      w.Sample("warden_prompt_tokens_total", computed, double(row.counters.computed_prompt_tokens));
    }
  }
  WriteRowCounter(w, per_model, "warden_usage_unknown_total",
                  "Finished requests whose usage the engine did not report.",
                  &ReplicaCounters::usage_unknown);
  WriteRowCounter(w, per_model, "warden_cut_without_usage_total",
                  "Generation requests cut short (their client left, their replica broke off) "
                  "before any usage came: their prompt tokens are counted in neither kind.",
                  &ReplicaCounters::cut_without_usage);
  WriteRowCounter(
      w, per_model, "warden_cache_unreported_total",
      "Finished requests whose prompt tokens the engine reported without the cached share "
      "(counted as computed): none cached (vLLM leaves out a 0), or not reported at all.",
      &ReplicaCounters::cache_unreported);
  WriteRowCounter(w, per_model, "warden_returning_turns_total",
                  "Turns back on the replica their conversation's previous turn ended on, with a "
                  "longer prompt.",
                  &ReplicaCounters::returning_turns);
  w.Family("warden_history_tokens_total", "counter",
           "Of returning turns, the previous turn's prompt tokens (full KV blocks), by whether the "
           "engine read them from its prefix cache (cached) or computed them again: far from all "
           "cached with room in the cache, the prompt's head changes from turn to turn.");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows) {
      Labels cached = row.labels, computed = row.labels;
      cached.emplace_back("kind", "cached");
      computed.emplace_back("kind", "computed");
      w.Sample("warden_history_tokens_total", cached, double(row.counters.history_cached_tokens));
      w.Sample("warden_history_tokens_total", computed,
               double(row.counters.history_tokens - row.counters.history_cached_tokens));
    }
  }
  w.Family("warden_time_to_first_token_seconds", "histogram",
           "Time from the request's arrival at the gateway to the first generated token relayed.");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      w.HistogramSamples("warden_time_to_first_token_seconds", row.labels, row.counters.ttft);
  }
  w.Family("warden_request_duration_seconds", "histogram",
           "Time from a generation request's arrival at the gateway to its response's end, of "
           "those answered whole (2xx).");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      w.HistogramSamples("warden_request_duration_seconds", row.labels, row.counters.duration);
  }
  w.Family("warden_scrape_errors_total", "counter",
           "Failed health checks or metric scrapes of the replica.");
  for (const auto& [name, rows] : per_model) {
    for (const MetricRow& row : rows)
      if (!row.engine)
        w.Sample("warden_scrape_errors_total", row.labels, double(row.scrape_errors));
  }
}

void WriteSessionFamilies(PrometheusWriter& w, const std::vector<ModelMetricRow>& model_rows) {
  w.Family("warden_sessions", "gauge", "Conversations the model's router remembers.");
  for (const ModelMetricRow& m : model_rows)
    w.Sample("warden_sessions", m.labels, double(m.sessions));
  w.Family("warden_active_sessions", "gauge", "Conversations seen within the idle timeout.");
  for (const ModelMetricRow& m : model_rows)
    w.Sample("warden_active_sessions", m.labels, double(m.active));
  w.Family("warden_sessions_evicted_total", "counter",
           "Conversations forgotten to keep the session table within session.max_entries.");
  for (const ModelMetricRow& m : model_rows)
    w.Sample("warden_sessions_evicted_total", m.labels, double(m.evicted));
  w.Family("warden_active_sessions_evicted_total", "counter",
           "Of those, conversations still active: the table is too small (session.max_entries).");
  for (const ModelMetricRow& m : model_rows)
    w.Sample("warden_active_sessions_evicted_total", m.labels, double(m.evicted_active));
  w.Family("warden_follow_up_turns_total", "counter", "Turns after a conversation's first.");
  for (const ModelMetricRow& m : model_rows)
    w.Sample("warden_follow_up_turns_total", m.labels, double(m.follow_ups));
  w.Family("warden_stayed_turns_total", "counter",
           "Follow-up turns served by the same replica as the conversation's previous turn.");
  for (const ModelMetricRow& m : model_rows)
    w.Sample("warden_stayed_turns_total", m.labels, double(m.stayed));
  w.Family("warden_affinity", "gauge",
           "1 while the model's session affinity is on (config, PATCH or SIGHUP), else 0.");
  for (const ModelMetricRow& m : model_rows)
    w.Sample("warden_affinity", m.labels, m.affinity ? 1 : 0);
  w.Family(
      "warden_overflow_limit", "gauge",
      "The model's overflow limit in effect; labelled auto=\"true\" when it is max_num_seqs/4.");
  for (const ModelMetricRow& m : model_rows) {
    Labels labels = m.labels;
    labels.emplace_back("auto", m.overflow_limit_auto ? "true" : "false");
    w.Sample("warden_overflow_limit", labels, m.overflow_limit);
  }
  w.Family("warden_routing_info", "gauge",
           "1, labelled with the model's routing policy and admission mode in effect.");
  for (const ModelMetricRow& m : model_rows) {
    Labels labels = m.labels;
    labels.emplace_back("policy", m.policy);
    labels.emplace_back("admission", m.admission);
    w.Sample("warden_routing_info", labels, 1);
  }
  w.Family("warden_routed_to_draining_total", "counter",
           "Requests sent to a draining replica because the replicas in service were down.");
  for (const ModelMetricRow& m : model_rows)
    w.Sample("warden_routed_to_draining_total", m.labels, double(m.to_draining));
}

// The figures of every model's replicas, and of each model's sessions in `model_rows`.
MetricRows CollectMetricRows(const std::vector<std::unique_ptr<ModelState>>& models,
                             std::vector<ModelMetricRow>* model_rows) {
  MetricRows per_model;
  for (const auto& model : models) {
    std::vector<MetricRow> rows;
    const std::string admission = model->admission();  // (under the lock WithRouter takes)
    model->WithRouter([&](ModelRouter& r) {
      for (int i = 0; i < r.num_replicas(); ++i) {
        rows.push_back({{{"model", model->name()}, {"replica", std::to_string(i)}},
                        r.load(i),
                        r.counters(i),
                        0,
                        r.admission().held(i),
                        r.admission().reserved(i),
                        /*engine=*/false,
                        r.healthy(i),
                        r.draining(i),
                        r.scraped(i).asleep.value_or(false)});
        rows.back().held_too_long = r.admission().held_too_long(i);
      }
      // Placed by the engine's balancer: shown from the start where it can happen (a series
      // that appears at its first request loses it to rate()).
      if (model->config().data_parallel() || r.delegated().requests > 0 ||
          r.delegated().failed > 0) {
        ReplicaLoad load;
        load.in_flight = r.delegated_in_flight();
        rows.push_back({{{"model", model->name()}, {"replica", "engine"}},
                        load,
                        r.delegated(),
                        0,
                        0,
                        0,
                        /*engine=*/true});
      }
      model_rows->push_back({{{"model", model->name()}},
                             r.sessions().conversations(),
                             r.sessions().active(),
                             r.follow_up_turns(),
                             r.stayed_turns(),
                             r.sessions().evicted(),
                             r.sessions().evicted_active(),
                             r.routed_to_draining(),
                             r.settings().affinity,
                             r.settings().overflow_limit,
                             r.overflow_limit_auto(),
                             std::string(r.policy().name()),
                             admission});
      return 0;
    });
    for (int i = 0; i < model->num_replicas(); ++i) rows[i].scrape_errors = model->scrape_errors(i);
    per_model.emplace_back(model->name(), std::move(rows));
  }

  return per_model;
}

}  // namespace

std::string Gateway::MetricsText() {
  PrometheusWriter w;
  std::vector<ModelMetricRow> model_rows;
  const MetricRows per_model = CollectMetricRows(models_, &model_rows);
  // Which build serves (after a hand-over to an upgraded binary, say).
  w.Family("warden_build_info", "gauge", "1, labelled with the gateway's version.");
  w.Sample("warden_build_info", {{"version", WARDEN_VERSION}}, 1);
  WriteRouteFamily(w, per_model);
  w.Family("warden_requests_by_key_source_total", "counter",
           "Generation requests by where their session key came from (none: placed by load).");
  for (auto& model : models_) {
    for (size_t s = 0; s < kKeySourceCount; ++s) {
      const auto source = static_cast<KeySource>(s);
      w.Sample("warden_requests_by_key_source_total",
               {{"model", model->name()}, {"source", std::string(KeySourceName(source))}},
               double(model->key_source_count(source)));
    }
  }
  w.Family("warden_inline_system_rewrites_total", "counter",
           "Anthropic requests passed on with their inline system messages as user messages.");
  for (auto& model : models_) {
    w.Sample("warden_inline_system_rewrites_total", {{"model", model->name()}},
             double(model->inline_system_rewrites()));
  }
  WriteReplicaCounters(w, per_model);
  WriteReplicaGauges(w, per_model);
  WriteReplicaTokens(w, per_model);
  WriteSessionFamilies(w, model_rows);
  WriteGatewayFamilies(w);
  WriteClientFamilies(w);
  peer_sync_->WriteMetrics(w);
  return w.Take();
}

void Gateway::WriteGatewayFamilies(PrometheusWriter& w) {
  if (!config_.state_file.empty()) {
    w.Family("warden_state_file_saves_total", "counter",
             "Saves of the state file (conversations' homes): written, failed, or refused (a "
             "gateway started after this one had written the file).");
    w.Sample("warden_state_file_saves_total", {{"result", "written"}}, double(state_saves_));
    w.Sample("warden_state_file_saves_total", {{"result", "failed"}}, double(state_save_failures_));
    w.Sample("warden_state_file_saves_total", {{"result", "refused"}},
             double(state_save_refusals_));
    w.Family("warden_state_file_saved_timestamp_seconds", "gauge",
             "Unix time of the state file's latest written save (at start, the save of the "
             "file restored; 0: none yet).");
    w.Sample("warden_state_file_saved_timestamp_seconds", {}, state_saved_at_.load());
    w.Family("warden_state_file_restored_conversations", "gauge",
             "Conversations whose homes the state file gave back at start.");
    w.Sample("warden_state_file_restored_conversations", {}, double(state_restored_));
  }
  w.Family("warden_local_connect_failures_total", "counter",
           "Requests answered 503 because the gateway could not open a connection to a replica "
           "for want of its own resources (file descriptors, memory, local ports).");
  w.Sample("warden_local_connect_failures_total", {}, double(local_failures_.load()));
  w.Family("warden_compressed_bodies_refused_total", "counter",
           "Compressed request bodies answered 503 unread: too many waiting to be decoded "
           "(queue), or the decoded bodies held at once at their most (memory).");
  w.Sample("warden_compressed_bodies_refused_total", {{"reason", "queue"}},
           double(decode_refusals_queue_.load()));
  w.Sample("warden_compressed_bodies_refused_total", {{"reason", "memory"}},
           double(decode_refusals_memory_.load()));
  w.Family("warden_requests_resent_total", "counter",
           "Requests sent again on a new connection because the kept-alive one they went out on "
           "closed within 0.5 s with no byte of answer (taken for the replica's idle timeout).");
  w.Sample("warden_requests_resent_total", {}, double(resent_.load()));
  w.Family("warden_streams_kept_alive_total", "counter",
           "Generation streams whose first event had not come in stream_keepalive_s: their head "
           "went out with a keepalive, and more followed until it came.");
  w.Sample("warden_streams_kept_alive_total", {}, double(streams_kept_alive_.load()));
  w.Family("warden_read_timeouts_total", "counter",
           "Replicas that sent nothing for read_timeout_s: before the response head (answered "
           "504), or in its body (the response cut).");
  w.Sample("warden_read_timeouts_total", {{"where", "head"}}, double(head_timeouts_.load()));
  w.Sample("warden_read_timeouts_total", {{"where", "body"}}, double(body_timeouts_.load()));
  int64_t shed = 0;
  for (const auto& server : http_) shed += server->connections_shed();
  w.Family("warden_connections_shed_total", "counter",
           "Client connections closed to make room at max_connections: those that had waited "
           "longest for a request (half a head held open, say).");
  w.Sample("warden_connections_shed_total", {}, double(shed));
  if (!config_.tls_cert_file.empty()) {
    int64_t failures = 0;
    for (const auto& server : http_) failures += server->tls_handshake_failures();
    w.Family("warden_tls_handshake_failures_total", "counter",
             "Client connections whose TLS handshake failed (plain http to this https listener, "
             "a certificate the client does not trust, a scanner).");
    w.Sample("warden_tls_handshake_failures_total", {}, double(failures));
  }
  if (traffic_log_) {
    w.Family("warden_traffic_log_lines_total", "counter",
             "Requests written to the traffic log (traffic_log), by whether the write failed "
             "(a full disk, say).");
    w.Sample("warden_traffic_log_lines_total", {{"written", "true"}},
             double(traffic_log_->lines()));
    w.Sample("warden_traffic_log_lines_total", {{"written", "false"}},
             double(traffic_log_->failed_writes()));
  }
  if (traces_) {
    w.Family("warden_trace_spans_total", "counter",
             "Spans of relayed requests (otlp_traces_endpoint), by whether the collector took "
             "them: not when it refused them, did not answer, or the queue was full.");
    w.Sample("warden_trace_spans_total", {{"exported", "true"}}, double(traces_->exported()));
    w.Sample("warden_trace_spans_total", {{"exported", "false"}}, double(traces_->dropped()));
  }
  w.Family("warden_error_answers_total", "counter",
           "Errors the gateway answered itself on the model API, by status: malformed requests "
           "(400), unknown models or paths (404), bodies over the limit (413), no replica in "
           "service (503), ... A replica's own errors are counted per replica.");
  // The usual ones from the start (a series that appears at its first error loses that one to
  // rate()), the others once they occur.
  constexpr std::array kAlwaysShown = {400, 401, 404, 413, 429, 503};
  for (int status = StatusCounts::kFirst; status <= StatusCounts::kLast; ++status) {
    const int64_t n = own_error_answers_.count(status);
    if (n > 0 || std::find(kAlwaysShown.begin(), kAlwaysShown.end(), status) != kAlwaysShown.end())
      w.Sample("warden_error_answers_total", {{"status", std::to_string(status)}}, double(n));
  }
}

void Gateway::WriteClientFamilies(PrometheusWriter& w) {
  const std::shared_ptr<const ClientTable> clients = Clients();
  if (!clients->empty()) {
    w.Family("warden_unauthorized_requests_total", "counter",
             "Requests to the model API refused (401) for want of one of the gateway's API keys.");
    w.Sample("warden_unauthorized_requests_total", {}, double(unauthorized_.load()));
    w.Family("warden_client_requests_total", "counter",
             "Requests to the model API, by the client key they came with (its name).");
    for (const ClientTable::Client& client : clients->clients()) {
      w.Sample("warden_client_requests_total", {{"client", client.name}},
               double(client.counts->requests.load()));
    }
    w.Family("warden_client_prompt_tokens_total", "counter",
             "Prompt tokens of the client key's requests, as the replicas reported them: read from "
             "the prefix cache (cached) or computed.");
    for (const ClientTable::Client& client : clients->clients()) {
      const int64_t cached = client.counts->cached_tokens.load();
      const int64_t computed = client.counts->computed_tokens.load();
      w.Sample("warden_client_prompt_tokens_total", {{"client", client.name}, {"kind", "cached"}},
               double(cached));
      w.Sample("warden_client_prompt_tokens_total", {{"client", client.name}, {"kind", "computed"}},
               double(computed));
    }
    w.Family("warden_client_in_flight", "gauge",
             "The client key's requests on their way to the replicas now.");
    for (const ClientTable::Client& client : clients->clients()) {
      w.Sample("warden_client_in_flight", {{"client", client.name}},
               double(client.counts->in_flight.load()));
    }
    w.Family("warden_client_limited_total", "counter",
             "The client key's requests answered 429: its max_in_flight were in progress.");
    for (const ClientTable::Client& client : clients->clients()) {
      w.Sample("warden_client_limited_total", {{"client", client.name}},
               double(client.counts->limited.load()));
    }
    w.Family("warden_client_budget_limited_total", "counter",
             "The client key's requests answered 429: its tokens_per_minute were used up.");
    for (const ClientTable::Client& client : clients->clients()) {
      w.Sample("warden_client_budget_limited_total", {{"client", client.name}},
               double(client.counts->budget_limited.load()));
    }
    w.Family("warden_client_budget_tokens", "gauge",
             "Tokens left in the client key's tokens_per_minute budget (negative: owed); keys "
             "with a budget only.");
    for (const ClientTable::Client& client : clients->clients()) {
      if (client.tokens_per_minute == 0) continue;
      w.Sample("warden_client_budget_tokens", {{"client", client.name}},
               client.counts->budget.Left(Now()));
    }
    w.Family("warden_client_output_tokens_total", "counter",
             "Output tokens of the client key's requests, as the replicas reported them.");
    for (const ClientTable::Client& client : clients->clients()) {
      w.Sample("warden_client_output_tokens_total", {{"client", client.name}},
               double(client.counts->output_tokens.load()));
    }
  }
}

namespace {

// A server whose engines do not match the configured layout: the gateway cannot pin the ranks it
// counts on (too many configured: vLLM refuses the extra ranks' requests, 400, or inside a 200
// stream an error event), or spreads conversations
// over fewer replicas than there are (vLLM's own balancer places them inside the server).
void WarnEngineCount(const std::string& model, const std::string& url, int engines, int configured,
                     bool single_url) {
  if (single_url) {
    spdlog::warn(
        "model {}: {} reports {} data-parallel engine(s) in /metrics, and the config has {}{}: "
        "set data_parallel_size: {} for this url",
        model, url, engines, configured,
        engines < configured ? " (the ranks it does not have count as unhealthy)" : "", engines);
  } else {
    spdlog::warn(
        "model {}: {} reports {} data-parallel engines in /metrics: the gateway sees it as one "
        "replica and vLLM's balancer places requests among its engines; for affinity to each "
        "engine, run one server per GPU, or give this server alone with data_parallel_size: {}",
        model, url, engines, engines);
  }
}

}  // namespace

namespace {

// How often a server's /v1/models is read again, for the LoRA adapters it loads or unloads.
constexpr std::chrono::seconds kServedModelsRefresh{30};
// ... and sooner after an answer that was not such a list.
constexpr std::chrono::seconds kServedModelsRetry{5};

// The context length of the served model `name`, or of the only one served; 0 when not said.
int64_t MaxModelLen(const std::vector<ListedModel>& served, std::string_view name) {
  for (const ListedModel& m : served) {
    if (m.id == name || served.size() == 1) return m.max_model_len;
  }
  return 0;
}

// What a replica's /v1/models says that the operator must know at once: it wants a key the
// gateway does not send, or it serves no model by the configured name (vLLM answers 404 to every
// request then; its default served name is the model's path, e.g. Qwen/Qwen3-4B).
// Returns whether it warned.
bool WarnOfServedModels(std::string_view name, const std::string& url, int status,
                        const std::vector<ListedModel>& served, bool sends_key) {
  if (status == 401) {
    spdlog::warn("model {}: {} asks for an API key (401 on /v1/models): {}", name, url,
                 sends_key ? "it refused the replica_api_key configured"
                           : "set the model's replica_api_key to its vLLM --api-key");
    return true;
  }
  if (status != 200 || served.empty()) return false;
  if (std::any_of(served.begin(), served.end(), [&](const ListedModel& m) { return m.id == name; }))
    return false;
  std::string ids;
  for (const ListedModel& m : served) ids += (ids.empty() ? "'" : ", '") + m.id + "'";
  spdlog::warn(
      "model {}: {} serves {}, not '{}': it will answer every request with 404; name the model "
      "as vLLM serves it (its --served-model-name), and give clients' names as aliases",
      name, url, ids, name);
  return true;
}

// A replica whose counts show vLLM's --max-num-seqs is not the configured max_num_seqs.
void WarnOfSeqLimit(const ModelState& model, int replica, const ScrapedMetrics& m,
                    const SeqLimitWatch::Finding& finding) {
  const int configured = model.max_num_seqs();
  if (finding.above) {
    spdlog::warn(
        "model {}: replica {} runs {} requests, more than max_num_seqs {}: set max_num_seqs to "
        "its vLLM's --max-num-seqs (the overflow limit, when auto, is a quarter of it)",
        model.name(), replica, finding.running, configured);
    return;
  }
  spdlog::warn(
      "model {}: replica {} has had {} request(s) running and {} waiting, with {:.0f} % of its KV "
      "cache in use, in {} scrapes in a row: its vLLM may run --max-num-seqs {}, not the {} "
      "configured; if so, set max_num_seqs: {} (the overflow limit, when auto, is a quarter of "
      "it). A prompt larger than the free part of the KV cache (vLLM admits a request only when "
      "its whole prompt fits) or a long prompt's prefill can hold requests back the same way",
      model.name(), replica, finding.running, m.waiting, 100 * m.kv_cache_usage,
      SeqLimitWatch::kScrapesToBelieve, finding.running, configured, finding.running);
}

}  // namespace

namespace {

// Says that a server runs without vLLM's prefix cache, if it does; returns whether it did. Every
// turn there computes its whole prompt, wherever the gateway sends it.
bool WarnIfNoPrefixCache(const std::string& model, const std::string& url,
                         const std::vector<ScrapedMetrics>& scraped) {
  const bool off = std::any_of(scraped.begin(), scraped.end(), [](const ScrapedMetrics& m) {
    return m.prefix_caching == std::optional<bool>(false);
  });
  if (!off) return false;
  spdlog::warn(
      "model {}: {} runs without a prefix cache (its /metrics say "
      "enable_prefix_caching=\"False\"): "
      "every turn there computes its whole prompt, and keeping conversations on one replica "
      "gains nothing; start vLLM without --no-enable-prefix-caching",
      model, url);
  return true;
}

// What a server says of the prompt tokens it read from its prefix cache, on one API.
struct CacheReport {
  int status = 0;         // the first answer's that was not 200; 200 when all were
  bool reported = false;  // a later answer said how many
  std::string refusal;    // the body of the answer that was not 200
};

// The same prompt three times, one output token each, on one engine, so that the later ones read
// the first's blocks: on OpenAI's completions (`messages` false; vLLM's
// --enable-prompt-tokens-details gives usage.prompt_tokens_details) or Anthropic's messages
// (usage.cache_read_input_tokens, which vLLM gave only from mid-2026). vLLM leaves the count out
// when nothing was read, so the prompt is of several of the engine's blocks (`block_size`), and
// only later answers all without it say no. Status 0 when a 200 had no usage.
asio::awaitable<CacheReport> ReportsCachedTokens(UpstreamPool& pool, int rank,
                                                 const std::string& model,
                                                 const std::string& authorization,
                                                 std::chrono::milliseconds timeout, int block_size,
                                                 bool messages) {
  std::string prompt = "warden --check-replicas asks whether this server reports cached tokens:";
  for (int i = 0; i < std::max(40, block_size); ++i)
    fmt::format_to(std::back_inserter(prompt), " word{}", i);
  boost::json::object request{{"model", model}, {"max_tokens", 1}};
  if (messages) {
    request["messages"] =
        boost::json::array{boost::json::object{{"role", "user"}, {"content", prompt}}};
  } else {
    request["prompt"] = prompt;
  }
  const std::string body = boost::json::serialize(request);
  const std::string path = messages ? "/v1/messages" : "/v1/completions";
  const std::string_view field = messages ? "cache_read_input_tokens" : "prompt_tokens_details";
  CacheReport report;
  for (int i = 0; i < 3; ++i) {
    const UpstreamGetResult answer =
        co_await UpstreamCall(pool, 0, http::verb::post, path, body, timeout, authorization,
                              16 << 20, std::chrono::milliseconds::max(), rank);
    report.status = answer.status;
    if (answer.status != 200) {
      report.refusal = answer.body;
      co_return report;
    }
    boost::system::error_code ec;
    const boost::json::value doc = boost::json::parse(answer.body, ec);
    const boost::json::value* usage = ec ? nullptr : doc.find_pointer("/usage", ec);
    if (!usage || !usage->is_object()) {
      report.status = 0;
      co_return report;
    }
    if (i > 0 && usage->as_object().contains(field)) report.reported = true;
  }
  co_return report;
}

// Whether the server answers Anthropic's /v1/messages, which Claude Code speaks: vLLM's API
// server has it since late 2025 (before, only a separate entrypoint did), and says there how
// many prompt tokens it read from its cache since mid-2026. Logs what is missing (a warning: a
// server for OpenAI's clients alone needs no Messages API). `completions_report`: whether
// completions said it.
asio::awaitable<void> CheckMessagesApi(UpstreamPool& pool, int rank, const std::string& model,
                                       const std::string& url, const std::string& authorization,
                                       std::chrono::milliseconds timeout, int block_size,
                                       bool completions_report) {
  const CacheReport messages =
      co_await ReportsCachedTokens(pool, rank, model, authorization, timeout, block_size, true);
  // No such route: FastAPI's own {"detail": ...}, not vLLM's error for a model it lacks.
  const bool no_route = (messages.status == 404 || messages.status == 405) &&
                        messages.refusal.find("\"detail\"") != std::string::npos;
  if (no_route) {
    spdlog::warn(
        "model {}: {} has no /v1/messages (HTTP {}): Claude Code and other Anthropic clients "
        "cannot use it; vLLM's API server has Anthropic's Messages API since version 0.11.1",
        model, url, messages.status);
  } else if (messages.status == 200 && !messages.reported && completions_report) {
    spdlog::warn(
        "model {}: {} does not say on /v1/messages how many prompt tokens it read from its "
        "prefix cache (usage.cache_read_input_tokens; vLLM gives it from mid-2026): Claude "
        "Code's turns are counted as computed, the routing is not affected",
        model, url);
  } else if (messages.status != 200) {
    spdlog::info("model {}: {} did not answer a one-token message on /v1/messages ({})", model, url,
                 messages.status == 0 ? "no usage" : fmt::format("HTTP {}", messages.status));
  }
}

// Notes a server's health for the panel's chart: its replicas down (unless a request that found
// them unreachable had noted them all already) or back (after this loop's own "down", or a
// request's). `present`: its ranks there at this check and the last; `down_before`: how many of
// them were out of service before this check set them.
void NoteHealthChange(ModelState& model, size_t server, bool healthy, bool turned, bool in_doubt,
                      size_t down_before, size_t present, const std::string& problem) {
  std::string what;
  if (healthy && !in_doubt && (turned || down_before > 0)) {
    what = " healthy again";
  } else if (!healthy && turned && down_before < present) {
    what = " down: " + problem;
  }
  if (!what.empty()) {
    model.changes().Note(SystemUnixTime(), model.ReplicasOfServer(server, 0, present) + what,
                         "health checks");
  }
}

// Notes and logs a data-parallel server's ranks leaving service or coming back because its
// engine count changed (it restarted with another --data-parallel-size): ranks it does not have
// take no requests.
void NoteRanksPresent(ModelState& model, size_t server, size_t before, size_t present,
                      int engines) {
  if (present == before) return;
  const bool fewer = present < before;
  const std::string ranks =
      model.ReplicasOfServer(server, std::min(before, present), std::max(before, present));
  const std::string what = fmt::format("{} {}: the server has {} data-parallel engine(s)", ranks,
                                       fewer ? "out of service" : "back in service", engines);
  model.changes().Note(SystemUnixTime(), what, "health checks");
  if (fewer) {
    spdlog::warn("model {}: {}", model.name(), what);
  } else {
    spdlog::info("model {}: {}", model.name(), what);
  }
}

// A `warden sim` server says so in its model's /v1/models card: the admin API and the panel say
// it too, and the log as it starts saying so, as they do for the demo's own replicas. A server
// replaced by a vLLM at the same address says nothing any more, and is taken for real again.
void NoteIfSimulated(ModelState& model, size_t server, const std::string& url,
                     const std::vector<ListedModel>& served, std::string* said) {
  std::string simulated;
  for (const ListedModel& m : served)
    if (m.id == model.name()) simulated = m.simulated;
  if (simulated == *said) return;
  *said = simulated;
  model.SetSimulated(server, simulated);
  if (!simulated.empty() && simulated != model.config().simulated) {
    spdlog::warn("model {}: {} is SIMULATED ({}): no GPU, no model, replies are filler text",
                 model.name(), url, simulated);
  }
}

// Says once that the model's session table forgot a conversation still active (it is too small
// for the conversations going on, whose next turns are then placed afresh); returns whether it did.
bool WarnIfSessionTableFull(ModelState& model) {
  const auto [evicted, bound] = model.WithRouter([](ModelRouter& r) {
    return std::pair(r.sessions().evicted_active(), r.sessions().max_entries());
  });
  if (evicted == 0) return false;
  spdlog::warn(
      "model {}: the session table is full ({} conversations now) and forgets conversations still "
      "active, whose next turns are placed afresh: raise the model's max_sessions or "
      "session.max_entries (warden_active_sessions_evicted_total counts them)",
      model.name(), bound);
  return true;
}

// Why a server is out of service: its health check's failure, or its engines' sleep.
std::string ProblemOf(const UpstreamGetResult& health, bool healthy, bool stays_asleep,
                      bool slept_by_hand) {
  if (!healthy) return HealthProblem(health);
  if (slept_by_hand) return "asleep, put to sleep through the gateway (POST /wake_up wakes it)";
  if (stays_asleep) {
    return fmt::format(
        "asleep, and {} s with requests it did not wake for (put to sleep by hand? POST /wake_up "
        "wakes it)",
        IdleSleepWatch::kWakeGrace.count());
  }
  return "asleep (vllm:engine_sleep_state: POST /wake_up wakes it; if vLLM sleeps when idle, "
         "--sleep-idle-ttl, set idle_sleep: on)";
}

// What one round of a server's scrape found.
struct ScrapeRound {
  bool healthy = false;   // answered its health check, or late but given the benefit of doubt
  bool in_doubt = false;  // healthy without an answer: the router's health is left as it is
  bool serving = false;   // healthy and not asleep out of service
  bool have_metrics = false;
  bool unreadable_metrics = false;  // /metrics answered with no figure (none is kept from before)
  std::vector<ScrapedMetrics> scraped;  // with have_metrics: one per replica of the server
};

// Sets the router's view of the server's `present` replicas (of `replicas`) from `round`; returns
// how many of the first `steady` (those present at the last scrape too) were out of service
// before.
size_t ApplyScrape(ModelState& model, const std::vector<int>& replicas, size_t present,
                   size_t steady, const ScrapeRound& round, double now) {
  size_t down_before = 0;
  model.WithRouterReleasing([&](ModelRouter& r, std::vector<uint64_t>* released) {
    for (size_t i = 0; i < steady; ++i) down_before += r.healthy(replicas[i]) ? 0 : 1;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!round.in_doubt) r.SetHealthy(replicas[i], round.serving && i < present);
      // (What a reservation kept room for there is gone, or will be once it is back.)
      if (!r.healthy(replicas[i])) r.admission().GiveUpReservations(replicas[i], released);
      if (round.have_metrics) r.UpdateScrape(replicas[i], round.scraped[i], released);
      if (!round.have_metrics && (!round.healthy || round.unreadable_metrics))
        r.ForgetSleep(replicas[i]);
      if (round.unreadable_metrics) {  // no load figure kept; the hit rate's counters stay as read
        ScrapedMetrics none;
        none.prefix_cache_queries = r.scraped(replicas[i]).prefix_cache_queries;
        none.prefix_cache_hits = r.scraped(replicas[i]).prefix_cache_hits;
        none.external_prefix_cache_queries = r.scraped(replicas[i]).external_prefix_cache_queries;
        none.external_prefix_cache_hits = r.scraped(replicas[i]).external_prefix_cache_hits;
        r.UpdateScrape(replicas[i], none, released);
      }
    }
    // What the admin API and /metrics show of conversations going idle, with no request to
    // route (which would expire them too).
    r.ExpireIdle(now);
  });
  return down_before;
}

// Whether any of `replicas` has requests in flight.
bool Holding(ModelState& model, const std::vector<int>& replicas) {
  return model.WithRouter([&](ModelRouter& r) {
    return std::any_of(replicas.begin(), replicas.end(),
                       [&](int i) { return r.load(i).in_flight > 0; });
  });
}

// Whether any of `replicas` has requests sent to it (in flight, and not held by admission at the
// gateway: those it has not seen).
bool HoldingSent(ModelState& model, const std::vector<int>& replicas) {
  return model.WithRouter([&](ModelRouter& r) {
    return std::any_of(replicas.begin(), replicas.end(),
                       [&](int i) { return r.load(i).in_flight > r.admission().held(i); });
  });
}

// When a response head last came from any of `replicas` (a server's).
std::chrono::steady_clock::time_point LastAnswer(const ModelState& model,
                                                 const std::vector<int>& replicas) {
  std::chrono::steady_clock::time_point last{};
  for (int r : replicas) last = std::max(last, model.answered_at(r));
  return last;
}

// What a scrape read of a server's work done (StallWatch), nullopt when it read none: the
// engines' work counters, with their prefix-cache lookups and KV-cache use, which move as a prompt
// is read in chunks before its first token counts.
std::optional<double> EngineWork(const ScrapeRound& round) {
  if (!round.have_metrics) return std::nullopt;
  double work = 0;
  bool published = false;
  for (const ScrapedMetrics& m : round.scraped) {
    published = published || m.engine_work >= 0;
    work += std::max(0.0, m.engine_work) + m.prefix_cache_queries + m.kv_cache_usage;
  }
  if (!published) return std::nullopt;
  return work;
}

std::chrono::steady_clock::duration StallLimit(double seconds) {
  return SteadySeconds(seconds);
}

}  // namespace

// When a server's /v1/models is read next, and what its scrape loop keeps of it between reads.
struct ServedModelsWatch {
  bool asked = false;  // once it answered: its context length and served-model warnings
  std::chrono::steady_clock::time_point next_ask = std::chrono::steady_clock::now();
  std::string simulated;  // what the server says simulates it (NoteIfSimulated)
  // Whether its last list named the model (unknown until a list is read): a server restarted
  // under another name is said in the log as at start.
  std::optional<bool> serves_model;
  // A load or unload of adapters on the server is under way (ReconcileAdapters).
  std::shared_ptr<bool> reloading = std::make_shared<bool>(false);
};

asio::awaitable<void> Gateway::ReadServedModels(ModelState& model, size_t pool_index,
                                                ServedModelsWatch& watch,
                                                std::chrono::milliseconds timeout) {
  if (std::chrono::steady_clock::now() < watch.next_ask) co_return;
  UpstreamPool& pool = *model.pools()[pool_index];
  const UpstreamGetResult models = co_await UpstreamCall(pool, 0, http::verb::get, "/v1/models", {},
                                                         timeout, model.replica_authorization());
  const std::optional<std::vector<ListedModel>> listed =
      models.status == 200 ? ReadModelList(models.body) : std::nullopt;
  const std::vector<ListedModel> served = listed.value_or(std::vector<ListedModel>{});
  // A body that lists nothing readable leaves the names as they were, and is asked again soon.
  watch.next_ask =
      std::chrono::steady_clock::now() + (listed ? kServedModelsRefresh : kServedModelsRetry);
  if (listed) model.served_names().Set(pool_index, NamesOf(served));
  if (listed && !served.empty()) {
    const bool serves = std::any_of(served.begin(), served.end(),
                                    [&](const ListedModel& m) { return m.id == model.name(); });
    if (!serves && watch.serves_model != false && watch.asked) {  // (the first read's: below)
      WarnOfServedModels(model.name(), pool.url().ToString(), models.status, served, false);
    } else if (watch.serves_model == false && serves) {
      spdlog::info("model {}: {} serves '{}' again", model.name(), pool.url().ToString(),
                   model.name());
    }
    watch.serves_model = serves;
  }
  if (listed) NoteIfSimulated(model, pool_index, pool.url().ToString(), served, &watch.simulated);
  // The adapters loaded through the gateway stay on every server until unloaded through it: one a
  // server lacks (it restarted, or was down when they were loaded) is loaded on it again. Apart:
  // a load may take minutes, and the scrapes go on meanwhile; until it is done, the adapter's
  // requests go to the other servers.
  // Likewise, an adapter unloaded through the gateway while the server did not answer is
  // unloaded from it if it still has it.
  if (listed && !*watch.reloading && model.AdaptersToReconcile(pool_index, NamesOf(served))) {
    *watch.reloading = true;
    const auto executor = co_await asio::this_coro::executor;
    asio::co_spawn(executor, ReconcileAdapters(model, pool_index, NamesOf(served), watch.reloading),
                   asio::detached);
  }
  // Once: an engine that does not say will not say later. (A server that did not answer, gone
  // between its health check and this, is asked again.)
  if (!watch.asked && models.status != 0) {
    watch.asked = true;
    const int64_t context = MaxModelLen(served, model.name());
    if (model.max_model_len() == 0) model.set_max_model_len(context);
    model.set_server_model_len(pool_index, context);
    WarnOfServedModels(model.name(), pool.url().ToString(), models.status, served,
                       !model.replica_authorization().empty());
  }
}

// One server's scrape loop (ScrapeLoop): what its rounds keep from one to the next, and the steps
// of a round.
struct Gateway::ServerScrape {
  ServerScrape(Gateway& gateway, ModelState& model, size_t pool_index)
      : gateway(gateway),
        model(model),
        pool_index(pool_index),
        pool(*model.pools()[pool_index]),
        replicas(model.ReplicasOf(pool_index)),
        data_parallel(model.config().data_parallel()),
        configured_engines(data_parallel ? static_cast<int>(replicas.size()) : 1),
        seq_limits(replicas.size(), SeqLimitWatch(model.max_num_seqs())),
        present_before(replicas.size()),
        warned_full(pool_index != 0) {}

  // The settings a round reads afresh (a SIGHUP may change them).
  void BeginRound();
  // Reads the server's /metrics into `round`; returns the engines it counts (0: none said).
  asio::awaitable<int> ReadMetrics(ScrapeRound* round);
  struct Sleep {
    bool out = false;      // asleep and out of service
    bool stays = false;    // an idle sleep that holds requests for long (IdleSleepWatch)
    bool by_hand = false;  // asked for by hand (POST /sleep)
  };
  // Whether the server's engines sleep out of service, from what `round` read.
  Sleep JudgeSleep(const ScrapeRound& round, uint64_t round_number);
  // Whether the server holds requests with no answer while its engine counts no work.
  bool JudgeStall(const ScrapeRound& round, bool answered);
  // The server's problem as the panel and the log say it, set on the model when it is out of
  // service; cleared when it serves, unless its health is in doubt.
  void NoteProblem(const ScrapeRound& round, const std::string& problem);
  // Says a change of the server's service (healthy again, or unhealthy); returns whether it
  // changed.
  bool NoteTurn(const ScrapeRound& round, const std::string& problem);
  // The server's ranks present with `engines` counted (a data-parallel server may run fewer than
  // configured); `*steady`: those present at the last round too.
  size_t NoteEngines(int engines, size_t* steady);
  // The warnings read from the metrics: no prefix cache, a max_num_seqs lower than configured.
  void WarnFromMetrics(const ScrapeRound& round);

  Gateway& gateway;
  ModelState& model;
  const size_t pool_index;
  UpstreamPool& pool;
  const std::vector<int> replicas;
  const bool data_parallel;
  const int configured_engines;
  std::chrono::milliseconds timeout{0};
  std::vector<SeqLimitWatch> seq_limits;
  int engines_read = 0;   // the last engine count a scrape read (0: none yet)
  size_t present_before;  // of its ranks, those the last count had
  bool was_healthy = true;
  bool asleep = false;  // its engines said they sleep, at the last scrape that read them
  IdleSleepWatch sleep_watch;
  StallWatch stall_watch;
  int failed_checks = 0;  // in a row, answered or not
  ServedModelsWatch served_models;
  bool warned_full;  // of a session table too small: once, by one loop
  bool warned_no_prefix_cache = false;
  bool warned_unreadable_metrics = false;  // a /metrics answered but not vLLM's: said once
};

void Gateway::ServerScrape::BeginRound() {
  const auto interval =
      std::chrono::milliseconds(static_cast<int64_t>(model.scrape_interval_s() * 1000));
  timeout = std::max(std::chrono::milliseconds(500), interval);
  if (seq_limits.front().configured() != model.max_num_seqs())
    seq_limits.assign(replicas.size(), SeqLimitWatch(model.max_num_seqs()));
  if (!warned_full) warned_full = WarnIfSessionTableFull(model);
}

asio::awaitable<int> Gateway::ServerScrape::ReadMetrics(ScrapeRound* round) {
  const UpstreamGetResult metrics = co_await UpstreamCall(pool, 0, http::verb::get, "/metrics", {},
                                                          timeout, model.replica_authorization());
  std::string error;
  int engines = 0;
  round->have_metrics =
      metrics.status == 200 && ReadVllmMetrics(metrics.body, static_cast<int>(replicas.size()),
                                               data_parallel, &round->scraped, &error, &engines);
  round->unreadable_metrics = metrics.status == 200 && !round->have_metrics;
  if (round->unreadable_metrics && !warned_unreadable_metrics) {
    warned_unreadable_metrics = true;
    spdlog::warn(
        "model {}: {}/metrics cannot be read: {}; placement sees only the requests this gateway "
        "sends there, not the engine's queue or KV cache (warden_scrape_errors_total counts the "
        "scrapes)",
        model.name(), pool.url().ToString(), error);
  }
  co_return engines;
}

Gateway::ServerScrape::Sleep Gateway::ServerScrape::JudgeSleep(const ScrapeRound& round,
                                                               uint64_t round_number) {
  // A server whose engines sleep (vLLM's sleep mode) holds neither weights nor cache: out of
  // service, as if down, until they wake.
  // (Kept as last read while /health or /metrics is late; a server that is down, or answers
  // with metrics no longer readable, may have restarted awake.)
  if (round.have_metrics) {
    asleep = std::any_of(round.scraped.begin(), round.scraped.end(),
                         [](const ScrapedMetrics& m) { return m.asleep.value_or(false); });
  } else if (!round.healthy || round.unreadable_metrics) {
    asleep = false;
  }
  if (!asleep && round.have_metrics) model.NotAsleepAtRound(pool_index, round_number);
  // A sleeping server answers nothing until woken, maybe never: out of service, unless it sleeps
  // when idle (vLLM's --sleep-idle-ttl, config idle_sleep), and wakes at its next request. A
  // sleep the server's next request should end but that holds requests for long was asked for
  // by hand (POST /sleep, which vLLM's idle sleep never ends): out of service too.
  Sleep sleep;
  sleep.stays = sleep_watch.Update(asleep && model.idle_sleep(), Holding(model, replicas),
                                   std::chrono::steady_clock::now());
  sleep.by_hand = asleep && model.slept_by_hand(pool_index);
  sleep.out = asleep && (!model.idle_sleep() || sleep.stays || sleep.by_hand);
  return sleep;
}

bool Gateway::ServerScrape::JudgeStall(const ScrapeRound& round, bool answered) {
  // (A wake is IdleSleepWatch's to judge; a late /health keeps the verdict as it was.)
  const auto now = std::chrono::steady_clock::now();
  if (!answered || asleep) return stall_watch.Held(now);
  return stall_watch.Update(HoldingSent(model, replicas), LastAnswer(model, replicas),
                            EngineWork(round), now, StallLimit(gateway.config_.stall_timeout_s));
}

void Gateway::ServerScrape::NoteProblem(const ScrapeRound& round, const std::string& problem) {
  if (!round.serving) {
    const std::optional<ModelState::HealthProblem> before = model.HealthProblemOf(replicas[0]);
    model.SetHealthProblem(
        pool_index,
        ModelState::HealthProblem{before ? before->since_unix : SystemUnixTime(), problem});
  } else if (!round.in_doubt) {  // a request may have found it down since the last check
    model.SetHealthProblem(pool_index, std::nullopt);
  }
}

bool Gateway::ServerScrape::NoteTurn(const ScrapeRound& round, const std::string& problem) {
  if (round.serving == was_healthy) return false;
  if (round.serving) {
    spdlog::info("model {}: {} is healthy again", model.name(), pool.url().ToString());
  } else {
    spdlog::warn("model {}: {} is unhealthy: {}", model.name(), pool.url().ToString(), problem);
  }
  was_healthy = round.serving;
  return true;
}

size_t Gateway::ServerScrape::NoteEngines(int engines, size_t* steady) {
  // Said at every change of the count (a server may restart with another one, and back).
  if (engines > 0 && engines != configured_engines && engines != engines_read) {
    WarnEngineCount(model.name(), pool.url().ToString(), engines, configured_engines,
                    model.config().urls.size() == 1);
  }
  // Ranks past a data-parallel server's engines do not exist there: vLLM refuses requests pinned
  // to them (400, or an error event inside a 200 stream), so none is placed there. A scrape
  // that read no count (its /metrics timed out) changes nothing of that.
  if (engines > 0) engines_read = engines;
  const size_t present = data_parallel && engines_read > 0
                             ? std::min(replicas.size(), static_cast<size_t>(engines_read))
                             : replicas.size();
  model.SetEnginesPresent(pool_index, present < replicas.size() ? static_cast<int>(present) : -1,
                          SystemUnixTime());
  NoteRanksPresent(model, pool_index, present_before, present, engines_read);
  // The ranks there before and now: those coming or going with the engine count are noted
  // above, not as health changes.
  *steady = std::min(present, present_before);
  present_before = present;
  return present;
}

void Gateway::ServerScrape::WarnFromMetrics(const ScrapeRound& round) {
  if (round.have_metrics && !warned_no_prefix_cache) {
    warned_no_prefix_cache =
        WarnIfNoPrefixCache(model.name(), pool.url().ToString(), round.scraped);
  }
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (!round.have_metrics) {
      seq_limits[i].Forget();
      continue;
    }
    const ScrapedMetrics& m = round.scraped[i];
    if (const auto finding = seq_limits[i].Observe(m.running, m.waiting, m.kv_cache_usage);
        finding && model.FirstSeqLimitWarning()) {
      WarnOfSeqLimit(model, replicas[i], m, *finding);
    }
  }
}

asio::awaitable<void> Gateway::ScrapeLoop(ModelState* model, size_t pool_index) {
  ServerScrape server(*this, *model, pool_index);
  const std::vector<int>& replicas = server.replicas;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  ScrapeSchedule& schedule = model->scrape_schedule();
  schedule.Attach(pool_index, &timer);
  struct Detach {
    ScrapeSchedule& schedule;
    size_t server;
    ~Detach() { schedule.Attach(server, nullptr); }
  } detach{schedule, pool_index};
  while (!stopped_) {
    const uint64_t round_number = schedule.Begin(pool_index);
    server.BeginRound();
    const UpstreamGetResult health =
        co_await UpstreamCall(server.pool, 0, http::verb::get, "/health", {}, server.timeout,
                              model->replica_authorization());
    if (health.local_failure) {
      // Nothing learnt of the replica, whose health (and conversations) stay as they were.
      WarnShortOfResources(health.error);
      schedule.End(pool_index);
      co_await WaitScrapeInterval(*model, pool_index, timer);
      continue;
    }
    ScrapeRound round;
    const bool answered = health.status == 200;
    const HealthVerdict verdict =
        JudgeHealthCheck(health, server.was_healthy, &server.failed_checks);
    round.healthy = verdict.healthy;
    round.in_doubt = verdict.in_doubt;
    int engines = 0;
    if (answered) engines = co_await server.ReadMetrics(&round);
    const ServerScrape::Sleep sleep = server.JudgeSleep(round, round_number);
    const bool stalled = server.JudgeStall(round, answered);
    // Lost: what waits for it or runs there is given up (routed again, or answered). So is what
    // a server asleep out of service, or stalled, holds.
    for (int r : replicas) {
      model->SetLost(r, verdict.lost || sleep.out || stalled);
      model->SetStalled(r, stalled);
    }
    round.serving = round.healthy && !sleep.out && !stalled;
    const std::string problem =
        stalled ? fmt::format(
                      "held requests for {} s with no answer, and its engine counted no "
                      "work (hung?); out of service until it does, or for as long again",
                      config_.stall_timeout_s)
                : ProblemOf(health, round.healthy, sleep.stays, sleep.by_hand);
    // A server back from being down may have restarted, without the adapters loaded while it
    // ran: its names are read as it is marked healthy again (SetHealthy below).
    if ((round.serving && !server.was_healthy) || model->TakeNamesReadAsked(pool_index))
      server.served_models.next_ask = std::chrono::steady_clock::now();
    // Read again now and then: vLLM can load and unload LoRA adapters while it runs.
    if (answered)
      co_await ReadServedModels(*model, pool_index, server.served_models, server.timeout);
    server.NoteProblem(round, problem);
    // Noted after the router's health is set, from what it was then: a request that found the
    // server unreachable first noted it down itself (ModelState::changes).
    const bool turned = server.NoteTurn(round, problem);
    size_t steady = 0;
    const size_t present = server.NoteEngines(engines, &steady);
    server.WarnFromMetrics(round);
    const size_t down_before = ApplyScrape(*model, replicas, present, steady, round, Now());
    NoteHealthChange(*model, pool_index, round.serving, turned, round.in_doubt, down_before, steady,
                     problem);
    if (!round.healthy || !round.have_metrics) {
      for (int r : replicas) model->CountScrapeError(r);
    }
    schedule.End(pool_index);
    co_await WaitScrapeInterval(*model, pool_index, timer);
  }
}

asio::awaitable<void> Gateway::WaitScrapeInterval(ModelState& model, size_t pool_index,
                                                  asio::steady_timer& timer) {
  // In steps of a second at most, the interval read again at each: a SIGHUP that shortens it
  // takes effect within a second, not after the old interval's wait. A round asked for out of
  // turn (ScrapeSchedule::Ask) ends it at once.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto interval = SteadySeconds(model.scrape_interval_s());
    const auto left = start + interval - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero() || stopped_ ||
        model.scrape_schedule().TakeAsked(pool_index))
      co_return;
    timer.expires_after(
        std::min<std::chrono::steady_clock::duration>(left, std::chrono::seconds(1)));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<bool> Gateway::CheckServer(ModelState& model, size_t pool_index,
                                           std::chrono::milliseconds timeout) {
  UpstreamPool& pool = *model.pools()[pool_index];
  const std::string url = pool.url().ToString();
  const std::string& key = model.replica_authorization();
  const UpstreamGetResult health =
      co_await UpstreamCall(pool, 0, http::verb::get, "/health", {}, timeout, key);
  if (health.status != 200) {
    spdlog::warn("model {}: {} is unhealthy: {}", model.name(), url, HealthProblem(health));
    co_return false;
  }
  bool right = true;
  const UpstreamGetResult models =
      co_await UpstreamCall(pool, 0, http::verb::get, "/v1/models", {}, timeout, key);
  const std::vector<ListedModel> served =
      (models.status == 200 ? ReadModelList(models.body) : std::nullopt)
          .value_or(std::vector<ListedModel>{});
  if (WarnOfServedModels(model.name(), url, models.status, served, !key.empty())) right = false;
  if (models.status != 200 && models.status != 401) {
    spdlog::warn("model {}: {} answers {} on /v1/models: vLLM lists the models it serves there",
                 model.name(), url,
                 models.status == 0 ? "nothing (" + models.error + ")"
                                    : fmt::format("HTTP {}", models.status));
    right = false;
  } else if (models.status == 200 && served.empty()) {
    spdlog::warn("model {}: {} lists no model on /v1/models", model.name(), url);
    right = false;
  }
  const UpstreamGetResult metrics =
      co_await UpstreamCall(pool, 0, http::verb::get, "/metrics", {}, timeout, key);
  const std::vector<int> replicas = model.ReplicasOf(pool_index);
  const bool data_parallel = model.config().data_parallel();
  std::vector<ScrapedMetrics> scraped;
  std::string error = metrics.status == 0 ? metrics.error : fmt::format("HTTP {}", metrics.status);
  int engines = 0;
  const bool have_metrics =
      metrics.status == 200 && ReadVllmMetrics(metrics.body, static_cast<int>(replicas.size()),
                                               data_parallel, &scraped, &error, &engines);
  if (!have_metrics) {
    spdlog::warn("model {}: {}/metrics cannot be read: {}", model.name(), url, error);
    right = false;
  }
  const int configured_engines = data_parallel ? static_cast<int>(replicas.size()) : 1;
  if (engines > 0 && engines != configured_engines) {
    WarnEngineCount(model.name(), url, engines, configured_engines,
                    model.config().urls.size() == 1);
    right = false;
  }
  if (have_metrics && WarnIfNoPrefixCache(model.name(), url, scraped)) {
    right = false;
  } else if (have_metrics && std::any_of(scraped.begin(), scraped.end(),
                                         [](const auto& m) { return m.asleep.value_or(false); })) {
    if (model.idle_sleep()) {
      spdlog::info(
          "model {}: {} sleeps (vLLM's sleep mode): whether it reports cached prompt "
          "tokens is not asked",
          model.name(), url);
    } else {
      spdlog::warn(
          "model {}: {} sleeps (vLLM's sleep mode): out of service until POST /wake_up; "
          "if vLLM sleeps when idle (--sleep-idle-ttl), set idle_sleep: on",
          model.name(), url);
      right = false;
    }
  } else if (have_metrics) {
    int block_size = 16;
    for (const ScrapedMetrics& m : scraped) block_size = std::max(block_size, m.block_size);
    const CacheReport completions = co_await ReportsCachedTokens(
        pool, data_parallel ? 0 : -1, model.name(), key, timeout, block_size, false);
    const std::optional<bool> reports =
        completions.status == 200 ? std::optional<bool>(completions.reported) : std::nullopt;
    co_await CheckMessagesApi(pool, data_parallel ? 0 : -1, model.name(), url, key, timeout,
                              block_size, reports.value_or(false));
    if (reports == false) {
      spdlog::warn(
          "model {}: {} does not say how many prompt tokens it read from its prefix cache "
          "(usage.prompt_tokens_details): the gateway then counts every prompt token as "
          "computed; start vLLM with --enable-prompt-tokens-details (if the URL balances "
          "over several servers, the three probes of one prompt may have found no cache "
          "to read: then check each server's own URL)",
          model.name(), url);
      right = false;
    } else if (!reports) {
      spdlog::info(
          "model {}: {} did not answer a one-token completion: whether it reports "
          "cached prompt tokens is not known",
          model.name(), url);
    }
  }
  std::string names, simulated;
  for (const ListedModel& m : served) {
    names += (names.empty() ? "" : ", ") + m.id;
    // (Any listed model's: a wrong served name leaves the server no less simulated.)
    if (simulated.empty() && !m.simulated.empty()) simulated = ", SIMULATED (" + m.simulated + ")";
  }
  const int64_t kv_tokens = have_metrics ? scraped.front().kv_cache_tokens() : 0;
  // (found by review: a list refused for want of a key read as no model listed)
  const std::string serves = !names.empty()         ? "serves " + names
                             : models.status == 401 ? "its model list needs an API key"
                             : models.status == 200 ? "serves no model it lists"
                                                    : "its model list could not be read";
  spdlog::info("model {}: {} answers{}: {}{}{}{}", model.name(), url, right ? "" : " (see above)",
               serves, engines > 1 ? fmt::format(", {} engines", engines) : "",
               kv_tokens > 0 ? fmt::format(", {} tokens of KV cache{}", kv_tokens,
                                           data_parallel ? " each"
                                           : engines > 1 ? " in all"
                                                         : "")
                             : "",
               simulated);
  co_return right;
}

}  // namespace warden
