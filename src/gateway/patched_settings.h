// The model settings an operator changed through the admin API (PATCH), each with the value the
// config gave it at the time. The state file keeps them, so a restart keeps such a change while
// the config still gives what it gave then; a config that says otherwise (an edited file, another
// flag, a SIGHUP that found the file changed) wins over it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/config.h"
#include "gateway/config_reload.h"

namespace warden {

// One changed setting, its values written as in a config file: affinity "on"/"off",
// overflow_limit "auto" or a number, policy a policy's name, admission "off", "fifo", "recent:K"...
struct PatchedSetting {
  std::string setting;  // "affinity", "overflow_limit", "policy" or "admission"
  std::string value;
  std::string config_value;
  bool operator==(const PatchedSetting&) const = default;
};

class PatchedSettings {
 public:
  explicit PatchedSettings(const ModelConfig& config);

  // A PATCH set what `change` names. A setting set back to the config's value is no longer
  // patched.
  void Patched(const ModelSettingsChange& change);
  // The config now gives what `change` names (a SIGHUP applied the file's edit): the config's
  // values win, and those settings are no longer patched.
  void Configured(const ModelSettingsChange& change);

  // Of the settings a state file saved, the ones a restart applies: those the config still gives
  // the value it gave when they were patched, as a change (ok to be empty). They are patched here
  // again. `dropped`: the others, each with what the config says now in its config_value.
  ModelSettingsChange Restore(const std::vector<PatchedSetting>& saved,
                              std::vector<PatchedSetting>* dropped);

  const std::vector<PatchedSetting>& entries() const { return entries_; }
  // What the config gives `setting` now, as PatchedSetting writes it (empty: no such setting).
  std::string config_value(std::string_view setting) const {
    const auto it = config_.find(setting);
    return it == config_.end() ? "" : it->second;
  }
  // Changes whenever entries() does.
  uint64_t version() const { return version_; }

 private:
  void Set(std::string_view setting, std::string value);
  void Configure(std::string_view setting, std::string value);

  std::map<std::string, std::string, std::less<>> config_;  // setting -> the config's value
  std::vector<PatchedSetting> entries_;                     // in the order first patched
  uint64_t version_ = 0;
};

// "affinity", "overflow_limit", "policy" or "admission": the settings a PATCH changes.
bool IsPatchableSetting(std::string_view setting);
// The values of a change, as PatchedSetting writes them (setting -> value).
std::vector<std::pair<std::string, std::string>> SettingValues(const ModelSettingsChange& change);
// The change that sets `setting` to `value`; false when either is not one a config takes.
bool SettingChange(std::string_view setting, std::string_view value, ModelSettingsChange* change);

}  // namespace warden
