// Settings given on `warden serve`'s command line, applied over the config file (or over the
// defaults when there is none): a flag wins over the file, and a flag given with a value the file
// would refuse is refused the same way, never dropped.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gateway/config.h"

namespace warden {

// Each field is unset (or empty) when its flag was not given.
struct ConfigOverrides {
  std::optional<std::string> listen;
  std::optional<int> port;  // the port alone, on --listen's host or the file's (not with --listen)
  // One model's names and replicas. Without a config file, --url (with --model) defines the
  // model; with one, they change the file's model, and a file with several models takes none.
  std::optional<std::string> model;
  std::vector<std::string> urls;
  std::vector<std::string> aliases;
  std::optional<int> data_parallel_size;
  // Every model's.
  std::optional<int> max_num_seqs;
  std::optional<std::string> overflow_limit;  // N or auto
  std::optional<std::string> affinity;        // on or off
  std::optional<std::string> when_affinity_off;
  std::optional<std::string> policy;
  std::optional<std::string> admission;
  std::optional<double> scrape_interval_s;
  std::optional<std::string> inline_system_as_user;  // on or off
  std::optional<std::string> idle_sleep;             // on or off
  std::optional<std::string> tls_verify;             // on or off
  std::optional<std::string> tls_ca_file;
  std::optional<std::string> replica_api_key_file;  // the replicas' key (vLLM's --api-key)
  // The gateway's.
  std::optional<std::string> api_keys_file;  // the keys clients must present (replaces the file's)
  std::optional<std::string> key_from_opening;  // on or off
  std::optional<double> body_limit_mb;
  std::optional<int> threads;
  std::optional<int> max_connections;
  std::vector<std::string> peers;
  std::vector<std::string> allowed_hosts;  // in place of the config's
  std::optional<std::string> tls_cert_file;
  std::optional<std::string> tls_key_file;
  std::optional<double> peer_sync_interval_s;
  std::optional<std::string> state_file;
  std::optional<double> state_save_interval_s;
  std::optional<double> drain_delay_s;
  std::optional<double> drain_timeout_s;
  std::optional<double> hand_over_drain_timeout_s;
  std::optional<double> send_timeout_s;
  std::optional<double> read_timeout_s;
  std::optional<double> stream_keepalive_s;
  std::optional<double> admission_max_hold_s;
  std::optional<double> stall_timeout_s;
  std::optional<double> header_timeout_s;
  bool access_log = false;  // --access-log: on; else as the config file says
  std::optional<std::string> traffic_log;
  std::optional<std::string> otlp_traces_endpoint;
  bool operator==(const ConfigOverrides&) const = default;

  // The config's files these flags give others in place of.
  ReplacedFiles replaced_files() const {
    return {.api_keys_file = api_keys_file.has_value(),
            .replica_api_key_file = replica_api_key_file.has_value(),
            .tls_ca_file = tls_ca_file.has_value(),
            .state_file = state_file.has_value()};
  }

  // Whether --model, --url, --dp or --alias was given.
  bool names_a_model() const {
    return model || !urls.empty() || !aliases.empty() || data_parallel_size;
  }
};

// Applies `overrides` over `config`. Returns an error naming the flag, or empty. The result still
// needs ValidateGatewayConfig (which checks the numbers, however they were given).
std::string ApplyConfigOverrides(const ConfigOverrides& overrides, GatewayConfig* config);

}  // namespace warden
