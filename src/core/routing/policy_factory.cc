#include "core/routing/policy_factory.h"

#include <charconv>
#include <cmath>
#include <string>

#include "core/routing/chwbl_policy.h"
#include "core/routing/dynamo_policy.h"
#include "core/routing/llmd_policy.h"
#include "core/routing/round_robin_policy.h"
#include "core/routing/seed_policy.h"
#include "core/routing/session_hash_policy.h"
#include "core/routing/sglang_cache_aware_policy.h"
#include "core/routing/vllm_dp_policy.h"
#include "core/routing/warden_policy.h"

namespace warden {
namespace {

constexpr std::string_view kNames[] = {
    "warden-seed",        "vllm-dp", "vllm-dp-fresh", "round-robin", "session-hash", "chwbl",
    "sglang-cache-aware", "llm-d",   "dynamo",        "warden"};

}  // namespace

std::span<const std::string_view> PolicyNames() {
  return kNames;
}

std::unique_ptr<RoutingPolicy> MakePolicy(std::string_view name) {
  if (name == "warden-seed") return std::make_unique<SeedPolicy>();
  if (name == "vllm-dp") return std::make_unique<VllmDpPolicy>(false);
  if (name == "vllm-dp-fresh") return std::make_unique<VllmDpPolicy>(true);
  if (name == "round-robin") return std::make_unique<RoundRobinPolicy>();
  if (name == "session-hash") return std::make_unique<SessionHashPolicy>();
  if (name == "chwbl") return std::make_unique<ChwblPolicy>();
  if (name == "sglang-cache-aware") return std::make_unique<SglangCacheAwarePolicy>();
  if (name == "sglang-cache-aware:cli")
    return std::make_unique<SglangCacheAwarePolicy>(SglangOptions::CommandLineDefaults(),
                                                    std::string(name));
  if (name == "llm-d") return std::make_unique<LlmdPolicy>();
  if (name == "dynamo") return std::make_unique<DynamoPolicy>();
  if (name == "warden") return std::make_unique<WardenPolicy>();
  // "warden:tpr=N": the project's policy with tokens_per_request N (for the lab's sweeps).
  constexpr std::string_view kWardenTpr = "warden:tpr=";
  if (name.starts_with(kWardenTpr)) {
    const std::string_view number = name.substr(kWardenTpr.size());
    WardenPolicyOptions o;
    const auto [end, ec] =
        std::from_chars(number.data(), number.data() + number.size(), o.tokens_per_request);
    if (number.empty() || ec != std::errc() || end != number.data() + number.size() ||
        !std::isfinite(o.tokens_per_request) || o.tokens_per_request < 0 ||
        o.tokens_per_request > 1e9)
      return nullptr;
    return std::make_unique<WardenPolicy>(o, std::string(name));
  }
  return nullptr;
}

std::string PolicyNameList() {
  std::string list;
  for (std::string_view n : PolicyNames()) list.append(list.empty() ? "" : ", ").append(n);
  return list + ", sglang-cache-aware:cli, or warden:tpr=N (N from 0 to 1e9)";
}

}  // namespace warden
