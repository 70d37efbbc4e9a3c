#include "gateway/config_overrides.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>

#include "core/routing/admission_queue.h"
#include "net/host_allowlist.h"
#include "util/on_off.h"

namespace warden {
namespace {

// --model, --url, --dp and --alias: the one model they describe.
std::string ApplyModelFlags(const ConfigOverrides& o, GatewayConfig* c) {
  if (!o.names_a_model()) return {};
  if (c->models.size() > 1) {
    return fmt::format(
        "--model, --url, --dp and --alias describe one model, and the config file has {}: set "
        "them in the file",
        c->models.size());
  }
  if (c->models.empty()) {
    if (o.urls.empty())
      return "--model, --dp and --alias describe the replicas given with --url (or --demo for "
             "simulated ones)";
    if (!o.model)
      return "--url needs --model: the served model name clients ask for (vLLM's "
             "--served-model-name)";
    c->models.push_back(c->model_defaults);
  }
  ModelConfig& m = c->models[0];
  if (o.model) m.name = *o.model;
  if (!o.urls.empty()) {  // the replicas are the flags': a single url has --dp ranks, or one
    if (!o.data_parallel_size && m.data_parallel_size > 1) {
      spdlog::warn(
          "--url replaces model {}'s replicas: its data_parallel_size {} in the config file is not "
          "kept (add --dp {} if the server at --url has that many ranks)",
          m.name, m.data_parallel_size, m.data_parallel_size);
    }
    m.urls = o.urls;
    m.data_parallel_size = o.data_parallel_size.value_or(1);
  } else if (o.data_parallel_size) {
    m.data_parallel_size = *o.data_parallel_size;
  }
  if (!o.aliases.empty()) m.aliases = o.aliases;
  return {};
}

// on/off (or true/false, yes/no, as in the file) into `out`; an error naming `flag` otherwise.
std::string ReadOnOff(const std::optional<std::string>& value, std::string_view flag, bool* out) {
  if (!value) return {};
  const std::optional<bool> on = ParseOnOff(*value);
  if (!on) return fmt::format("{}: '{}' must be on/off, true/false or yes/no", flag, *value);
  *out = *on;
  return {};
}

std::string ApplyEveryModelFlags(const ConfigOverrides& o, ModelConfig* m) {
  if (o.max_num_seqs) m->max_num_seqs = *o.max_num_seqs;
  if (o.overflow_limit) {
    const std::optional<int> limit = ParseOverflowLimit(*o.overflow_limit);
    if (!limit) {
      return fmt::format("--overflow-limit: '{}' must be auto or a whole number 1 to {}",
                         *o.overflow_limit, kMaxOverflowLimit);
    }
    m->overflow_limit = *limit;
  }
  if (std::string e = ReadOnOff(o.affinity, "--affinity", &m->affinity); !e.empty()) return e;
  if (o.when_affinity_off) {
    if (*o.when_affinity_off != "engine" && *o.when_affinity_off != "gateway") {
      return fmt::format("--when-affinity-off: '{}' must be engine or gateway",
                         *o.when_affinity_off);
    }
    m->engine_balances_when_off = *o.when_affinity_off == "engine";
  }
  if (o.policy) m->policy = *o.policy;
  if (o.admission) m->admission = CanonicalAdmission(*o.admission);
  if (o.scrape_interval_s) m->scrape_interval_s = *o.scrape_interval_s;
  if (o.tls_ca_file) m->tls_ca_file = *o.tls_ca_file;
  if (o.replica_api_key_file) {
    std::vector<std::string> keys;
    std::string error;
    if (!ReadKeyFile(*o.replica_api_key_file, &keys, &error))
      return "--replica-api-key-file: " + error;
    if (keys.size() > 1) {
      return fmt::format("--replica-api-key-file: {} holds {} keys; one is expected",
                         *o.replica_api_key_file, keys.size());
    }
    m->replica_api_key = keys[0];
  }
  if (std::string e = ReadOnOff(o.tls_verify, "--tls-verify", &m->tls_verify); !e.empty()) return e;
  if (std::string e = ReadOnOff(o.idle_sleep, "--idle-sleep", &m->idle_sleep); !e.empty()) return e;
  return ReadOnOff(o.inline_system_as_user, "--inline-system-as-user", &m->inline_system_as_user);
}

}  // namespace

std::string ApplyConfigOverrides(const ConfigOverrides& o, GatewayConfig* c) {
  if (o.listen) {
    std::string error;
    if (!ParseListenAddress(*o.listen, &c->host, &c->port, &error)) return "--listen: " + error;
  }
  if (o.port) {
    if (o.listen) return "--port: --listen gives the port already (HOST:PORT): give one of them";
    if (*o.port < 0 || *o.port > 65535) return "--port: must be from 0 (any free port) to 65535";
    c->port = static_cast<uint16_t>(*o.port);
  }
  if (std::string e = ApplyModelFlags(o, c); !e.empty()) return e;
  for (ModelConfig& m : c->models) {
    if (std::string e = ApplyEveryModelFlags(o, &m); !e.empty()) return e;
  }
  if (std::string e =
          ReadOnOff(o.key_from_opening, "--key-from-opening", &c->session.key_from_opening);
      !e.empty()) {
    return e;
  }
  if (o.body_limit_mb) {
    if (!(*o.body_limit_mb > 0 && *o.body_limit_mb <= kMaxBodyLimitMb)) {
      return fmt::format("--body-limit-mb: {} must be > 0 and at most {}", *o.body_limit_mb,
                         kMaxBodyLimitMb);
    }
    c->body_limit = static_cast<size_t>(*o.body_limit_mb * (1 << 20));
  }
  if (o.api_keys_file) {  // in place of the config's api_keys_file; its api_keys stay
    std::string error;
    std::vector<ClientKey> keys;
    if (!ReadClientKeyFile(*o.api_keys_file, &keys, &error, c->inline_api_keys))
      return "--api-keys-file: " + error;
    c->api_keys.resize(std::min(c->inline_api_keys, c->api_keys.size()));
    c->api_keys.insert(c->api_keys.end(), keys.begin(), keys.end());
  }
  if (o.threads) c->threads = *o.threads;
  if (o.max_connections) c->max_connections = *o.max_connections;
  if (!o.peers.empty()) c->peers = o.peers;
  if (!o.allowed_hosts.empty()) {
    for (const std::string& pattern : o.allowed_hosts) {
      if (std::string error = CheckHostPattern(pattern); !error.empty())
        return "--allowed-host: " + error;
    }
    c->allowed_hosts = o.allowed_hosts;
  }
  if (o.tls_cert_file) c->tls_cert_file = *o.tls_cert_file;
  if (o.tls_key_file) c->tls_key_file = *o.tls_key_file;
  if (o.peer_sync_interval_s) c->peer_sync_interval_s = *o.peer_sync_interval_s;
  if (o.state_file) c->state_file = *o.state_file;
  if (o.state_save_interval_s) c->state_save_interval_s = *o.state_save_interval_s;
  if (o.drain_delay_s) c->drain_delay_s = *o.drain_delay_s;
  if (o.drain_timeout_s) c->drain_timeout_s = *o.drain_timeout_s;
  if (o.hand_over_drain_timeout_s) c->hand_over_drain_timeout_s = *o.hand_over_drain_timeout_s;
  if (o.send_timeout_s) c->send_timeout_s = *o.send_timeout_s;
  if (o.read_timeout_s) c->read_timeout_s = *o.read_timeout_s;
  if (o.stream_keepalive_s) c->stream_keepalive_s = *o.stream_keepalive_s;
  if (o.admission_max_hold_s) c->admission_max_hold_s = *o.admission_max_hold_s;
  if (o.stall_timeout_s) c->stall_timeout_s = *o.stall_timeout_s;
  if (o.header_timeout_s) c->header_timeout_s = *o.header_timeout_s;
  if (o.access_log) c->access_log = true;
  if (o.traffic_log) {
    if (o.traffic_log->empty())
      return "--traffic-log: is empty (to record nothing, leave traffic_log out of the config)";
    c->traffic_log = *o.traffic_log;
  }
  if (o.otlp_traces_endpoint) {
    if (o.otlp_traces_endpoint->empty()) {
      return "--otlp-traces-endpoint: is empty (to send no spans, leave otlp_traces_endpoint out "
             "of the config)";
    }
    c->otlp_traces_endpoint = *o.otlp_traces_endpoint;
  }
  return {};
}

}  // namespace warden
