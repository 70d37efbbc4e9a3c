#include "gateway/patched_settings.h"

#include <algorithm>
#include <charconv>

#include "core/routing/admission_queue.h"
#include "core/routing/policy_factory.h"

namespace warden {

namespace {

std::string AffinityText(bool on) {
  return on ? "on" : "off";
}
std::string OverflowLimitText(int limit) {
  return limit > 0 ? std::to_string(limit) : "auto";
}

}  // namespace

bool IsPatchableSetting(std::string_view setting) {
  return setting == "affinity" || setting == "overflow_limit" || setting == "policy" ||
         setting == "admission";
}

std::vector<std::pair<std::string, std::string>> SettingValues(const ModelSettingsChange& change) {
  std::vector<std::pair<std::string, std::string>> out;
  if (change.affinity) out.emplace_back("affinity", AffinityText(*change.affinity));
  if (change.overflow_limit)
    out.emplace_back("overflow_limit", OverflowLimitText(*change.overflow_limit));
  if (change.policy) out.emplace_back("policy", *change.policy);
  if (change.admission) out.emplace_back("admission", *change.admission);
  return out;
}

bool SettingChange(std::string_view setting, std::string_view value, ModelSettingsChange* change) {
  if (setting == "affinity") {
    if (value != "on" && value != "off") return false;
    change->affinity = value == "on";
    return true;
  }
  if (setting == "overflow_limit") {
    const std::optional<int> limit = ParseOverflowLimit(value);
    if (limit) change->overflow_limit = *limit;
    return limit.has_value();
  }
  if (setting == "policy") {
    if (!MakePolicy(value)) return false;  // a name, or a form such as "warden:tpr=N"
    change->policy = std::string(value);
    return true;
  }
  if (setting == "admission") {
    AdmissionOptions options;
    if (!ParseAdmission(std::string(value), &options).empty()) return false;
    change->admission = CanonicalAdmission(std::string(value));
    return true;
  }
  return false;
}

PatchedSettings::PatchedSettings(const ModelConfig& config) {
  config_["affinity"] = AffinityText(config.affinity);
  config_["overflow_limit"] = OverflowLimitText(config.overflow_limit);
  config_["policy"] = config.policy;
  config_["admission"] = config.admission;
}

void PatchedSettings::Patched(const ModelSettingsChange& change) {
  for (auto& [setting, value] : SettingValues(change)) Set(setting, std::move(value));
}

void PatchedSettings::Configured(const ModelSettingsChange& change) {
  for (auto& [setting, value] : SettingValues(change)) Configure(setting, std::move(value));
}

void PatchedSettings::Set(std::string_view setting, std::string value) {
  const auto entry = std::find_if(entries_.begin(), entries_.end(),
                                  [&](const PatchedSetting& e) { return e.setting == setting; });
  const std::string& configured = config_.find(setting)->second;
  if (value == configured) {
    if (entry == entries_.end()) return;
    entries_.erase(entry);
  } else if (entry == entries_.end()) {
    entries_.push_back({std::string(setting), std::move(value), configured});
  } else if (entry->value != value) {
    entry->value = std::move(value);
  } else {
    return;
  }
  ++version_;
}

void PatchedSettings::Configure(std::string_view setting, std::string value) {
  config_.find(setting)->second = std::move(value);
  const auto entry = std::find_if(entries_.begin(), entries_.end(),
                                  [&](const PatchedSetting& e) { return e.setting == setting; });
  if (entry == entries_.end()) return;
  entries_.erase(entry);
  ++version_;
}

ModelSettingsChange PatchedSettings::Restore(const std::vector<PatchedSetting>& saved,
                                             std::vector<PatchedSetting>* dropped) {
  ModelSettingsChange change;
  for (const PatchedSetting& s : saved) {
    const auto configured = config_.find(s.setting);
    ModelSettingsChange one;
    if (configured == config_.end() || !SettingChange(s.setting, s.value, &one) ||
        configured->second != s.config_value) {
      dropped->push_back(
          {s.setting, s.value, configured == config_.end() ? "" : configured->second});
      continue;
    }
    Patched(one);
    if (one.affinity) change.affinity = one.affinity;
    if (one.overflow_limit) change.overflow_limit = one.overflow_limit;
    if (one.policy) change.policy = one.policy;
    if (one.admission) change.admission = one.admission;
  }
  return change;
}

}  // namespace warden
