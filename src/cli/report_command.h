// The `warden report` subcommand: redraws a results.csv (from bench or lab) as results.md,
// results.json and figures, optionally beside a reference table such as the seed's.
#pragma once

#include <CLI/CLI.hpp>

namespace warden {

void AddReportCommand(CLI::App& app);

}  // namespace warden
