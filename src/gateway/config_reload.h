// What a SIGHUP does with the config file read again: the settings the admin API can change at
// runtime (a model's affinity, overflow limit, policy and admission), and a model's aliases,
// max_num_seqs, scrape interval, session timeout and table size, when_affinity_off,
// inline_system_as_user and idle_sleep, take effect at once; anything else that differs is named,
// for a restart.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gateway/config.h"
#include "gateway/config_overrides.h"

namespace warden {

// One model's settings that a reload changes in place.
struct ModelSettingsChange {
  std::string model;  // its served name
  std::optional<bool> affinity = {};
  std::optional<int> overflow_limit = {};  // as in ModelConfig: 0 is auto
  std::optional<std::string> policy = {};
  std::optional<std::string> admission = {};  // as in the config: off, fifo, recent:K, ...
  // Not a PATCH's: SIGHUP only.
  std::optional<std::vector<std::string>> aliases = {};
  std::optional<int> max_num_seqs = {};
  std::optional<double> scrape_interval_s = {};
  std::optional<double> session_idle_timeout_s = {};
  std::optional<size_t> max_sessions = {};
  std::optional<bool> engine_balances_when_off = {};
  std::optional<bool> inline_system_as_user = {};
  std::optional<bool> idle_sleep = {};
  bool overflow_limit_auto() const { return overflow_limit && *overflow_limit == 0; }
  bool operator==(const ModelSettingsChange&) const = default;
};

struct ReloadPlan {
  std::vector<ModelSettingsChange> applied;
  std::optional<bool> access_log;  // the file turned the access log on or off
  // What differs but needs a restart: "models[0] (m) changed", "model x added", "settings outside
  // models changed".
  std::vector<std::string> needing_restart;
  // `running` with the applied changes: what the next reload compares with.
  GatewayConfig now_running;
  // Settings the file gives that a command-line flag replaces: "models[0].affinity (--affinity
  // on)". Said, so that an edit that changes nothing is not taken for a reload that failed.
  std::vector<std::string> overridden;
  // Not empty: the file, with the flags applied over it, is not a config the gateway would start
  // with (what --check would say), and nothing is applied.
  std::string error;
};

// Compares `fresh` (the file as it reads now, the command line's flags applied over it as at start)
// with `running` (the config as last read). A model keeps its place and name to have its settings
// changed; the client keys are left out (they are reloaded on their own). With `demo`, the models
// are the demo's, not the file's.
ReloadPlan PlanReload(const GatewayConfig& running, GatewayConfig fresh,
                      const ConfigOverrides& overrides, bool demo);

// "affinity off, overflow limit 4, policy warden, aliases claude-*": what a change sets, for the
// log.
// `overflow_auto`: the model's overflow limit is auto (after the change), so a new max_num_seqs
// moves it too.
std::string Describe(const ModelSettingsChange& change, int max_num_seqs,
                     bool overflow_auto = false);

}  // namespace warden
