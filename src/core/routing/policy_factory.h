// Routing policies by name.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "core/routing/policy.h"

namespace warden {

// The names MakePolicy accepts; the first is the default.
std::span<const std::string_view> PolicyNames();

// The policy called `name`, or nullptr for an unknown name. Beside the names, "warden:tpr=N" is
// the project's policy pricing a request in flight as N prompt tokens (N from 0 to 1e9), for the
// lab's sweeps, and "sglang-cache-aware:cli" is SGLang's policy with its launcher's defaults.
std::unique_ptr<RoutingPolicy> MakePolicy(std::string_view name);

// The names, and the form with an option, as an error message lists them.
std::string PolicyNameList();

}  // namespace warden
