// The `warden bench` subcommand.
#pragma once

#include <CLI/CLI.hpp>

namespace warden {

void AddBenchCommand(CLI::App& app);

}  // namespace warden
