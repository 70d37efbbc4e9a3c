// warden: LM Warden's one binary. Subcommands: serve (the gateway), sim (simulated vLLM replicas),
// bench (the load test), lab (routing policies in simulated time).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "cli/bench_command.h"
#include "cli/hand_over.h"
#include "cli/lab_command.h"
#include "cli/report_command.h"
#include "cli/serve_command.h"
#include "cli/sim_command.h"

namespace {

// The subcommand `word` names, if any (CLI11 says only "A subcommand is required" of one it does
// not know).
bool NamesSubcommand(CLI::App& app, std::string_view word) {
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_name() == word) return true;
  return false;
}

std::string SubcommandNames(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

}  // namespace

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
    if (argc > 1 && argv[1][0] != '-' && !NamesSubcommand(app, argv[1])) {
      std::fprintf(stderr, "warden: no subcommand '%s' (the subcommands: %s; see warden --help)\n",
                   argv[1], SubcommandNames(app).c_str());
      return 2;
    }
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
