// Routing policies by name.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "core/routing/policy.h"

namespace warden {

// The names MakePolicy accepts; the first is the default.
std::span<const std::string_view> PolicyNames();

// The policy called `name`, or nullptr for an unknown name.
std::unique_ptr<RoutingPolicy> MakePolicy(std::string_view name);

}  // namespace warden
