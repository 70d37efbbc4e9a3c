// warden: LM Warden's one binary. Subcommands: serve (the gateway), sim (simulated vLLM replicas),
// bench (the load test), lab (routing policies in simulated time).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>

#include "cli/bench_command.h"
#include "cli/hand_over.h"
#include "cli/lab_command.h"
#include "cli/report_command.h"
#include "cli/serve_command.h"
#include "cli/sim_command.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  warden::RememberCommandLine(argc, argv);
  CLI::App app{"LM Warden: session-affine, cache-aware routing in front of vLLM replicas"};
  app.set_version_flag("--version", "warden " WARDEN_VERSION);
  app.require_subcommand(1);
  warden::AddServeCommand(app);
  warden::AddSimCommand(app);
  warden::AddBenchCommand(app);
  warden::AddReportCommand(app);
  warden::AddLabCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help is 0; a flag the parser refuses is a usage error, 2 like a config the gateway refuses
    // (`serve --check`'s contract). A command's own failure keeps its code.
    const int code = app.exit(e);
    const bool usage = dynamic_cast<const CLI::RuntimeError*>(&e) == nullptr;
    return code == 0 || !usage ? code : 2;
  } catch (const std::exception& e) {  // out of memory, say: said, not an abort
    std::fprintf(stderr, "warden: %s\n", e.what());
    return 1;
  }
  return 0;
}
