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
  if (change == ModelSettingsChange{.model = change.model}) return std::nullopt;
  return change;
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
  }
  return out;
}

}  // namespace

ReloadPlan PlanReload(const GatewayConfig& running, GatewayConfig fresh,
                      const ConfigOverrides& overrides, bool demo) {
  ReloadPlan plan;
  plan.now_running = running;
  if (demo) fresh.models = running.models;  // the demo's model is not the file's
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
  for (size_t i = 0; i < std::max(running.models.size(), fresh.models.size()); ++i) {
    if (i >= running.models.size()) {
      plan.needing_restart.push_back(fmt::format("model {} added", fresh.models[i].name));
      continue;
    }
    if (i >= fresh.models.size()) {
      plan.needing_restart.push_back(fmt::format("model {} taken out", running.models[i].name));
      continue;
    }
    ModelConfig& now = plan.now_running.models[i];
    if (std::optional<ModelSettingsChange> change = LiveChange(now, fresh.models[i])) {
      now.affinity = fresh.models[i].affinity;
      now.overflow_limit = fresh.models[i].overflow_limit;
      now.policy = fresh.models[i].policy;
      now.aliases = fresh.models[i].aliases;
      now.admission = fresh.models[i].admission;
      now.max_num_seqs = fresh.models[i].max_num_seqs;
      now.scrape_interval_s = fresh.models[i].scrape_interval_s;
      now.session_idle_timeout_s = fresh.models[i].session_idle_timeout_s;
      now.max_sessions = fresh.models[i].max_sessions;
      now.engine_balances_when_off = fresh.models[i].engine_balances_when_off;
      now.inline_system_as_user = fresh.models[i].inline_system_as_user;
      plan.applied.push_back(std::move(*change));
    }
    if (!(fresh.models[i] == now))
      plan.needing_restart.push_back(fmt::format("models[{}] ({}) changed", i, now.name));
  }
  fresh.models = running.models;
  if (fresh.access_log != running.access_log) {
    plan.access_log = fresh.access_log;
    plan.now_running.access_log = fresh.access_log;
    fresh.access_log = running.access_log;
  }
  if (!(fresh == running))
    plan.needing_restart.insert(plan.needing_restart.begin(), "settings outside models changed");
  return plan;
}

std::string Describe(const ModelSettingsChange& change, int max_num_seqs) {
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
  if (change.max_num_seqs) add(fmt::format("max_num_seqs {}", *change.max_num_seqs));
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
  return out;
}

}  // namespace warden
