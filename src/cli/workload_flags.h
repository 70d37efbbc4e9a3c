// The workload flags `warden bench` and `warden lab` share (same names, same meaning).
#pragma once

#include <CLI/CLI.hpp>

#include "core/workload/workload.h"

namespace warden {

// Adds the flags to `cmd`, writing into `*workload` (which must outlive parsing).
void AddWorkloadFlags(CLI::App* cmd, WorkloadOptions* workload, std::string* attribution);

// Applies --attribution; returns an error or empty.
std::string ApplyAttribution(const std::string& attribution, WorkloadOptions* workload);

}  // namespace warden
