#include "gateway/config_reload.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace warden {

namespace {

// The settings of `fresh` a reload applies to `running` in place, if any differ.
std::optional<ModelSettingsChange> LiveChange(const ModelConfig& running,
                                              const ModelConfig& fresh) {
  if (running.name != fresh.name) return std::nullopt;
  ModelSettingsChange change;
  change.model = running.name;
  if (fresh.affinity != running.affinity) change.affinity = fresh.affinity;
  if (fresh.overflow_limit != running.overflow_limit) change.overflow_limit = fresh.overflow_limit;
  if (fresh.policy != running.policy) change.policy = fresh.policy;
  if (fresh.admission != running.admission) change.admission = fresh.admission;
  if (fresh.aliases != running.aliases) change.aliases = fresh.aliases;
  if (fresh.max_num_seqs != running.max_num_seqs) change.max_num_seqs = fresh.max_num_seqs;
  if (fresh.scrape_interval_s != running.scrape_interval_s)
    change.scrape_interval_s = fresh.scrape_interval_s;
  if (fresh.session_idle_timeout_s != running.session_idle_timeout_s)
    change.session_idle_timeout_s = fresh.session_idle_timeout_s;
  if (fresh.max_sessions != running.max_sessions) change.max_sessions = fresh.max_sessions;
  if (fresh.engine_balances_when_off != running.engine_balances_when_off)
    change.engine_balances_when_off = fresh.engine_balances_when_off;
  if (fresh.inline_system_as_user != running.inline_system_as_user)
    change.inline_system_as_user = fresh.inline_system_as_user;
  if (fresh.idle_sleep != running.idle_sleep) change.idle_sleep = fresh.idle_sleep;
  if (change == ModelSettingsChange{.model = change.model}) return std::nullopt;
  return change;
}

// Copies the settings a reload applies in place from `file` to `running`.
void ApplyLiveSettings(const ModelConfig& file, ModelConfig* running) {
  running->affinity = file.affinity;
  running->overflow_limit = file.overflow_limit;
  running->policy = file.policy;
  running->aliases = file.aliases;
  running->admission = file.admission;
  running->max_num_seqs = file.max_num_seqs;
  running->scrape_interval_s = file.scrape_interval_s;
  running->session_idle_timeout_s = file.session_idle_timeout_s;
  running->max_sessions = file.max_sessions;
  running->engine_balances_when_off = file.engine_balances_when_off;
  running->inline_system_as_user = file.inline_system_as_user;
  running->idle_sleep = file.idle_sleep;
}

// The reloadable settings of the file's models that the flags replace.
std::vector<std::string> Overridden(const GatewayConfig& file, const GatewayConfig& flagged,
                                    const ConfigOverrides& overrides, bool demo) {
  std::vector<std::string> out;
  if (overrides.access_log && !file.access_log) out.push_back("access_log (--access-log)");
  if (demo) return out;
  for (size_t i = 0; i < std::min(file.models.size(), flagged.models.size()); ++i) {
    const ModelConfig &f = file.models[i], &now = flagged.models[i];
    if (overrides.affinity && f.affinity != now.affinity)
      out.push_back(fmt::format("models[{}].affinity (--affinity {})", i, *overrides.affinity));
    if (overrides.overflow_limit && f.overflow_limit != now.overflow_limit) {
      out.push_back(fmt::format("models[{}].overflow_limit (--overflow-limit {})", i,
                                *overrides.overflow_limit));
    }
    if (overrides.policy && f.policy != now.policy)
      out.push_back(fmt::format("models[{}].policy (--policy {})", i, *overrides.policy));
    if (overrides.admission && f.admission != now.admission)
      out.push_back(fmt::format("models[{}].admission (--admission {})", i, *overrides.admission));
    if (!overrides.aliases.empty() && f.aliases != now.aliases)
      out.push_back(fmt::format("models[{}].aliases (--alias)", i));
    if (overrides.max_num_seqs && f.max_num_seqs != now.max_num_seqs) {
      out.push_back(
          fmt::format("models[{}].max_num_seqs (--max-num-seqs {})", i, *overrides.max_num_seqs));
    }
    if (overrides.scrape_interval_s && f.scrape_interval_s != now.scrape_interval_s) {
      out.push_back(fmt::format("models[{}].scrape_interval_s (--scrape-interval {})", i,
                                *overrides.scrape_interval_s));
    }
    if (overrides.when_affinity_off && f.engine_balances_when_off != now.engine_balances_when_off) {
      out.push_back(fmt::format("models[{}].when_affinity_off (--when-affinity-off {})", i,
                                *overrides.when_affinity_off));
    }
    if (overrides.inline_system_as_user && f.inline_system_as_user != now.inline_system_as_user) {
      out.push_back(fmt::format("models[{}].inline_system_as_user (--inline-system-as-user {})", i,
                                *overrides.inline_system_as_user));
    }
    if (overrides.idle_sleep && f.idle_sleep != now.idle_sleep) {
      out.push_back(
          fmt::format("models[{}].idle_sleep (--idle-sleep {})", i, *overrides.idle_sleep));
    }
  }
  return out;
}

// The names, as the file writes them, of what differs between two of a model's settings that only
// a restart changes.
std::vector<std::string> RestartOnlyChanges(const ModelConfig& a, const ModelConfig& b) {
  std::vector<std::string> out;
  if (a.urls != b.urls) out.push_back(b.urls.size() == 1 ? "url" : "urls");
  if (a.data_parallel_size != b.data_parallel_size) out.push_back("data_parallel_size");
  if (a.tls_verify != b.tls_verify) out.push_back("tls_verify");
  if (a.tls_ca_file != b.tls_ca_file) out.push_back("tls_ca_file");
  if (a.replica_api_key != b.replica_api_key) out.push_back("replica_api_key");
  return out;
}

// The same for the gateway's own settings (the client keys and the access log left out: they
// reload).
std::vector<std::string> RestartOnlyChanges(const GatewayConfig& a, const GatewayConfig& b) {
  std::vector<std::string> out;
  const auto differs = [&out](bool changed, const char* name) {
    if (changed) out.push_back(name);
  };
  differs(a.host != b.host || a.port != b.port, "listen");
  differs(a.body_limit != b.body_limit, "body_limit_mb");
  differs(a.route_headers != b.route_headers, "response_headers");
  differs(a.request_ids != b.request_ids, "request_ids");
  differs(a.traffic_log != b.traffic_log || a.traffic_log_block != b.traffic_log_block,
          "traffic_log");
  differs(a.otlp_traces_endpoint != b.otlp_traces_endpoint, "otlp_traces_endpoint");
  differs(a.connect_timeout_s != b.connect_timeout_s, "connect_timeout_s");
  differs(a.threads != b.threads, "threads");
  differs(a.max_connections != b.max_connections, "max_connections");
  differs(a.admin_token != b.admin_token, "admin_token");
  differs(a.allowed_hosts != b.allowed_hosts, "allowed_hosts");
  differs(a.tls_cert_file != b.tls_cert_file || a.tls_key_file != b.tls_key_file,
          "tls_cert_file/tls_key_file");
  differs(a.peers != b.peers, "peers");
  differs(a.peer_sync_interval_s != b.peer_sync_interval_s, "peer_sync_interval_s");
  differs(a.state_file != b.state_file, "session.state_file");
  differs(a.state_save_interval_s != b.state_save_interval_s, "session.state_save_interval_s");
  differs(a.drain_delay_s != b.drain_delay_s, "drain_delay_s");
  differs(a.drain_timeout_s != b.drain_timeout_s, "drain_timeout_s");
  differs(a.hand_over_drain_timeout_s != b.hand_over_drain_timeout_s, "hand_over_drain_timeout_s");
  differs(a.send_timeout_s != b.send_timeout_s, "send_timeout_s");
  differs(a.read_timeout_s != b.read_timeout_s, "read_timeout_s");
  differs(a.stream_keepalive_s != b.stream_keepalive_s, "stream_keepalive_s");
  differs(a.admission_max_hold_s != b.admission_max_hold_s, "admission_max_hold_s");
  differs(a.stall_timeout_s != b.stall_timeout_s, "stall_timeout_s");
  differs(a.header_timeout_s != b.header_timeout_s, "header_timeout_s");
  differs(a.session.headers != b.session.headers, "session.headers");
  differs(a.session.body_fields != b.session.body_fields, "session.body_fields");
  differs(a.session.key_from_opening != b.session.key_from_opening, "session.key_from_opening");
  differs(!(a.session == b.session) && a.session.headers == b.session.headers &&
              a.session.body_fields == b.session.body_fields &&
              a.session.key_from_opening == b.session.key_from_opening,
          "session's key settings");
  return out;
}

}  // namespace

ReloadPlan PlanReload(const GatewayConfig& running, GatewayConfig fresh,
                      const ConfigOverrides& overrides, bool demo) {
  ReloadPlan plan;
  plan.now_running = running;
  if (demo) {  // the demo's model is not the file's; the file's session settings reach it
    const ModelConfig& is = fresh.model_defaults;
    const bool idle_given = fresh.session_idle_timeout_given;
    fresh.models = running.models;
    fresh.demo_idle_timeout_s = running.demo_idle_timeout_s;
    for (ModelConfig& m : fresh.models) {
      // As a start with this file sets them.
      if (idle_given || running.demo_idle_timeout_s > 0) {
        m.session_idle_timeout_s =
            idle_given ? is.session_idle_timeout_s : running.demo_idle_timeout_s;
      }
      m.max_sessions = is.max_sessions;
    }
  }
  const GatewayConfig file = fresh;
  // The file alone first, as a start checks it: a flag that replaces a bad value does not make
  // the file right for the next start.
  if (!fresh.models.empty()) plan.error = ValidateGatewayConfig(fresh);
  if (plan.error.empty()) plan.error = ApplyConfigOverrides(overrides, &fresh);
  if (plan.error.empty()) plan.error = ValidateGatewayConfig(fresh);
  if (!plan.error.empty()) return plan;
  plan.overridden = Overridden(file, fresh, overrides, demo);
  fresh.api_keys = running.api_keys;
  fresh.inline_api_keys = running.inline_api_keys;
  // Models are matched by name: the file may list them in another order.
  const auto in_fresh = [&](const std::string& name) {
    const auto it = std::find_if(fresh.models.begin(), fresh.models.end(),
                                 [&](const ModelConfig& m) { return m.name == name; });
    return it == fresh.models.end() ? nullptr : &*it;
  };
  for (size_t i = 0; i < running.models.size(); ++i) {
    const ModelConfig* file_model = in_fresh(running.models[i].name);
    if (!file_model) {
      plan.needing_restart.push_back(fmt::format("model {} taken out", running.models[i].name));
      continue;
    }
    ModelConfig& now = plan.now_running.models[i];
    if (std::optional<ModelSettingsChange> change = LiveChange(now, *file_model)) {
      ApplyLiveSettings(*file_model, &now);
      plan.applied.push_back(std::move(*change));
    }
    if (!(*file_model == now)) {  // named as the file has it now
      const size_t at = static_cast<size_t>(file_model - fresh.models.data());
      const std::vector<std::string> changed = RestartOnlyChanges(now, *file_model);
      plan.needing_restart.push_back(
          changed.empty()
              ? fmt::format("models[{}] ({}) changed", at, now.name)
              : fmt::format("models[{}] ({}): {}", at, now.name, fmt::join(changed, ", ")));
    }
  }
  std::vector<std::string> kept_in_file_order;  // the running models, in the file's order
  for (const ModelConfig& m : fresh.models) {
    const bool running_now = std::any_of(running.models.begin(), running.models.end(),
                                         [&](const ModelConfig& r) { return r.name == m.name; });
    if (running_now) {
      kept_in_file_order.push_back(m.name);
    } else {
      plan.needing_restart.push_back(fmt::format("model {} added", m.name));
    }
  }
  // The order says which model takes a name several aliases match, and which one a request that
  // names none goes to.
  std::vector<std::string> kept_in_running_order;
  for (const ModelConfig& m : running.models)
    if (in_fresh(m.name)) kept_in_running_order.push_back(m.name);
  if (kept_in_file_order != kept_in_running_order)
    plan.needing_restart.push_back("the models' order");
  fresh.models = running.models;
  // The session table's defaults reach the models (applied there, above).
  plan.now_running.model_defaults = fresh.model_defaults;
  fresh.model_defaults = running.model_defaults;
  plan.now_running.session_idle_timeout_given = fresh.session_idle_timeout_given;
  fresh.session_idle_timeout_given = running.session_idle_timeout_given;
  if (fresh.access_log != running.access_log) {
    plan.access_log = fresh.access_log;
    plan.now_running.access_log = fresh.access_log;
    fresh.access_log = running.access_log;
  }
  if (!(fresh == running)) {
    const std::vector<std::string> changed = RestartOnlyChanges(running, fresh);
    plan.needing_restart.insert(plan.needing_restart.begin(),
                                changed.empty() ? std::string("settings outside models changed")
                                                : fmt::format("{}", fmt::join(changed, ", ")));
  }
  return plan;
}

std::string Describe(const ModelSettingsChange& change, int max_num_seqs, bool overflow_auto) {
  std::string out;
  if (change.affinity) out = fmt::format("affinity {}", *change.affinity ? "on" : "off");
  if (change.overflow_limit) {
    if (!out.empty()) out += ", ";
    out += change.overflow_limit_auto()
               ? fmt::format("overflow limit {} (auto)", std::max(1, max_num_seqs / 4))
               : fmt::format("overflow limit {}", *change.overflow_limit);
  }
  if (change.policy) out += (out.empty() ? "policy " : ", policy ") + *change.policy;
  if (change.admission) out += (out.empty() ? "admission " : ", admission ") + *change.admission;
  if (change.aliases) {
    if (!out.empty()) out += ", ";
    out += change.aliases->empty() ? "no aliases"
                                   : fmt::format("aliases {}", fmt::join(*change.aliases, ", "));
  }
  const auto add = [&out](const std::string& text) { out += (out.empty() ? "" : ", ") + text; };
  if (change.max_num_seqs) {
    // An auto overflow limit follows it (said once: with the limit, when that changed too).
    add(overflow_auto && !change.overflow_limit
            ? fmt::format("max_num_seqs {} (overflow limit {}, auto)", *change.max_num_seqs,
                          std::max(1, *change.max_num_seqs / 4))
            : fmt::format("max_num_seqs {}", *change.max_num_seqs));
  }
  if (change.scrape_interval_s) add(fmt::format("scrape interval {} s", *change.scrape_interval_s));
  if (change.session_idle_timeout_s)
    add(fmt::format("session idle timeout {} s", *change.session_idle_timeout_s));
  if (change.max_sessions) add(fmt::format("at most {} sessions", *change.max_sessions));
  if (change.engine_balances_when_off) {
    add(fmt::format("with affinity off, {} balances",
                    *change.engine_balances_when_off ? "the engine" : "the gateway"));
  }
  if (change.inline_system_as_user) {
    add(fmt::format("inline system messages {}",
                    *change.inline_system_as_user ? "sent as user messages" : "left as they are"));
  }
  if (change.idle_sleep) {
    add(*change.idle_sleep ? "sleeping replicas wake at their next request (idle_sleep)"
                           : "sleeping replicas out of service");
  }
  return out;
}

}  // namespace warden
