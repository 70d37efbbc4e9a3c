// The `warden lab` subcommand.
#pragma once

#include <CLI/CLI.hpp>

namespace warden {

void AddLabCommand(CLI::App& app);

}  // namespace warden
