#include "core/routing/policy_factory.h"

#include "core/routing/seed_policy.h"

namespace warden {
namespace {

constexpr std::string_view kNames[] = {"warden-seed"};

}  // namespace

std::span<const std::string_view> PolicyNames() {
  return kNames;
}

std::unique_ptr<RoutingPolicy> MakePolicy(std::string_view name) {
  if (name == "warden-seed") return std::make_unique<SeedPolicy>();
  return nullptr;
}

}  // namespace warden
