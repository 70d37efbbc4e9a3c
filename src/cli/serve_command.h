// The `warden serve` subcommand: flags, the config file, the embedded demo, and the run loop.
#pragma once

#include <CLI/CLI.hpp>

namespace warden {

void AddServeCommand(CLI::App& app);

}  // namespace warden
