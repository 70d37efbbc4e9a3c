#include "gateway/patched_settings.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

ModelConfig Configured(bool affinity = true, int overflow_limit = 0,
                       std::string policy = "warden-seed") {
  ModelConfig c;
  c.name = "m";
  c.affinity = affinity;
  c.overflow_limit = overflow_limit;
  c.policy = std::move(policy);
  return c;
}

ModelSettingsChange Change(std::optional<bool> affinity, std::optional<int> limit = {},
                           std::optional<std::string> policy = {}) {
  ModelSettingsChange c;
  c.affinity = affinity;
  c.overflow_limit = limit;
  c.policy = std::move(policy);
  return c;
}

ModelSettingsChange Admission(std::string mode) {
  ModelSettingsChange c;
  c.admission = std::move(mode);
  return c;
}

TEST(PatchedSettings, APatchIsNotedWithTheConfigsValueAndUndoneBySettingItBack) {
  PatchedSettings patched(Configured());
  patched.Patched(Change(false, 4, "round-robin"));
  EXPECT_EQ(patched.entries(),
            (std::vector<PatchedSetting>{{"affinity", "off", "on"},
                                         {"overflow_limit", "4", "auto"},
                                         {"policy", "round-robin", "warden-seed"}}));
  const uint64_t version = patched.version();
  patched.Patched(Change(false));  // the same again: nothing changes
  EXPECT_EQ(patched.version(), version);
  patched.Patched(Change(true, 0));  // back to the config's values
  EXPECT_EQ(patched.entries(),
            (std::vector<PatchedSetting>{{"policy", "round-robin", "warden-seed"}}));
  EXPECT_GT(patched.version(), version);
}

TEST(PatchedSettings, WhatTheConfigChangesAfterwardsWins) {
  PatchedSettings patched(Configured());
  patched.Patched(Change(false, 4));
  patched.Configured(Change(std::nullopt, 2));  // a SIGHUP: the file now says 2
  EXPECT_EQ(patched.entries(), (std::vector<PatchedSetting>{{"affinity", "off", "on"}}));
  // Patched later, it is compared with the file's new value.
  patched.Patched(Change(std::nullopt, 6));
  EXPECT_EQ(patched.entries()[1], (PatchedSetting{"overflow_limit", "6", "2"}));
}

TEST(PatchedSettings, ARestartKeepsWhatTheConfigStillSaysAsThenAndDropsTheRest) {
  const std::vector<PatchedSetting> saved = {{"affinity", "off", "on"},
                                             {"overflow_limit", "4", "auto"},
                                             {"policy", "round-robin", "warden-seed"}};
  // The file now says overflow_limit 8: that patch is dropped, the others kept.
  PatchedSettings patched(Configured(true, 8));
  std::vector<PatchedSetting> dropped;
  const ModelSettingsChange change = patched.Restore(saved, &dropped);
  EXPECT_EQ(change.affinity, false);
  EXPECT_FALSE(change.overflow_limit.has_value());
  EXPECT_EQ(change.policy, "round-robin");
  EXPECT_EQ(dropped, (std::vector<PatchedSetting>{{"overflow_limit", "4", "8"}}));
  EXPECT_EQ(patched.entries(),
            (std::vector<PatchedSetting>{{"affinity", "off", "on"},
                                         {"policy", "round-robin", "warden-seed"}}));
}

TEST(PatchedSettings, ASavedSettingThisGatewayDoesNotKnowIsDropped) {
  PatchedSettings patched(Configured());
  std::vector<PatchedSetting> dropped;
  const ModelSettingsChange change = patched.Restore({{"policy", "retired-policy", "warden-seed"},
                                                      {"colour", "red", "blue"},
                                                      {"affinity", "maybe", "on"},
                                                      {"overflow_limit", "0", "auto"}},
                                                     &dropped);
  EXPECT_FALSE(change.affinity || change.overflow_limit || change.policy);
  EXPECT_EQ(dropped.size(), 4u);
  EXPECT_TRUE(patched.entries().empty());
}

TEST(PatchedSettings, SettingChangeReadsWhatSettingValuesWrites) {
  for (const ModelSettingsChange& c :
       {Change(true), Change(false), Change(std::nullopt, 0), Change(std::nullopt, 7),
        Change(std::nullopt, {}, "llm-d"), Admission("reserve:3:0.5"), Admission("off")}) {
    for (const auto& [setting, value] : SettingValues(c)) {
      ModelSettingsChange read;
      ASSERT_TRUE(SettingChange(setting, value, &read)) << setting << " " << value;
      EXPECT_EQ(read.affinity, c.affinity);
      EXPECT_EQ(read.overflow_limit, c.overflow_limit);
      EXPECT_EQ(read.policy, c.policy);
      EXPECT_EQ(read.admission, c.admission);
    }
  }
  ModelSettingsChange read;
  EXPECT_FALSE(SettingChange("overflow_limit", "4x", &read));
  EXPECT_FALSE(SettingChange("overflow_limit", "1048577", &read));
  EXPECT_FALSE(SettingChange("admission", "reserve:1", &read));
  ASSERT_TRUE(SettingChange("admission", "reserve:03:1.0", &read));
  EXPECT_EQ(read.admission, "reserve:3");  // one value, however a peer or a state file wrote it
}

}  // namespace
}  // namespace warden
