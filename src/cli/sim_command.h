// The `warden sim` subcommand: flags and run.
#pragma once

#include <CLI/CLI.hpp>

namespace warden {

// Adds `sim` to `app`; the returned callback-run subcommand runs the simulator until signalled.
void AddSimCommand(CLI::App& app);

}  // namespace warden
