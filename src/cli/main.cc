// warden: LM Warden's one binary. Subcommands: serve (the gateway), sim (simulated vLLM replicas),
// bench (the load test), lab (routing policies in simulated time).
#include <CLI/CLI.hpp>
#include <csignal>

#include "cli/bench_command.h"
#include "cli/lab_command.h"
#include "cli/report_command.h"
#include "cli/serve_command.h"
#include "cli/sim_command.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"LM Warden: session-affine, cache-aware routing in front of vLLM replicas"};
  app.require_subcommand(1);
  warden::AddServeCommand(app);
  warden::AddSimCommand(app);
  warden::AddBenchCommand(app);
  warden::AddReportCommand(app);
  warden::AddLabCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
