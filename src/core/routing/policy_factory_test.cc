#include "core/routing/policy_factory.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(PolicyFactory, EveryNameMakesThePolicyOfThatName) {
  for (std::string_view name : PolicyNames()) {
    const std::unique_ptr<RoutingPolicy> policy = MakePolicy(name);
    ASSERT_NE(policy, nullptr) << name;
    EXPECT_EQ(policy->name(), name);
  }
  EXPECT_EQ(MakePolicy("magic"), nullptr);
  EXPECT_EQ(MakePolicy(""), nullptr);
  EXPECT_EQ(MakePolicy("sglang-cache-aware:cli")->name(), "sglang-cache-aware:cli");
  EXPECT_EQ(MakePolicy("sglang-cache-aware:other"), nullptr);
  EXPECT_NE(PolicyNameList().find("sglang-cache-aware:cli, "), std::string::npos);
}

// The sweeps' form keeps its option in its name (what the admin API shows), and takes a number
// from 0 to 1e9 only: anything else would price every replica alike (nan) or out of reach (inf).
TEST(PolicyFactory, WardensTokensPerRequestIsAFiniteNumberInRange) {
  for (std::string_view good :
       {"warden:tpr=0", "warden:tpr=2048", "warden:tpr=1.5e3", "warden:tpr=1000000000"}) {
    const std::unique_ptr<RoutingPolicy> policy = MakePolicy(good);
    ASSERT_NE(policy, nullptr) << good;
    EXPECT_EQ(policy->name(), good);
  }
  for (std::string_view bad :
       {"warden:tpr=", "warden:tpr=nan", "warden:tpr=inf", "warden:tpr=-5", "warden:tpr=-1e9",
        "warden:tpr=5abc", "warden:tpr=2e9", "warden:tpr= 5", "warden:tpr=0x10"}) {
    EXPECT_EQ(MakePolicy(bad), nullptr) << bad;
  }
  EXPECT_NE(PolicyNameList().find("warden-seed, "), std::string::npos);
  EXPECT_NE(PolicyNameList().find("warden:tpr=N (N from 0 to 1e9)"), std::string::npos);
}

}  // namespace
}  // namespace warden
