#include "cli/report_command.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/flag_checks.h"
#include "os/read_file.h"
#include "report/stage_result.h"

namespace warden {
namespace {

// The largest results file read.
constexpr uintmax_t kMaxResultsBytes = 64 << 20;

bool IsJson(const std::string& path) {
  return path.ends_with(".json");
}

// A results.csv, or a results.json (whose description, if any, goes to `description`).
bool ReadResults(const std::string& path, std::vector<StageResult>* results, std::string* error,
                 std::string* description = nullptr) {
  std::string text;
  if (!ReadRegularFile(path, kMaxResultsBytes, &text, error, /*pipes=*/true) ||
      (IsJson(path) ? !ParseResultsJson(text, results, description, error)
                    : !ParseResultsCsv(text, results, error))) {
    *error = fmt::format("{}: {}", path, *error);
    return false;
  }
  return true;
}

// Whether `out` is the folder `in` lies in, beside the results.json the run wrote.
bool RedrawsInPlace(const std::string& in, const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path folder = fs::weakly_canonical(fs::absolute(in).parent_path(), ec);
  if (ec || !fs::exists(folder / "results.json", ec)) return false;
  return fs::weakly_canonical(fs::absolute(out), ec) == folder && !ec;
}

}  // namespace

void AddReportCommand(CLI::App& app) {
  struct Flags {
    std::string in, reference, out, description;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd =
      app.add_subcommand("report", "Redraw a results.csv as Markdown, JSON and figures");
  cmd->add_option("--in", f->in,
                  "results.csv or results.json from warden bench or warden lab (the JSON also "
                  "keeps the stage length, turns, errors and the lab's upper bound)")
      ->required();
  cmd->add_option("--reference", f->reference,
                  "A results CSV (or JSON) drawn dashed beside it (e.g. the seed's)");
  cmd->add_option("--out", f->out, "Output directory")->required();
  cmd->add_option("--description", f->description,
                  "Description written into results.json (default: a JSON input's own)");
  RefuseFlagsAsValues(cmd);
  cmd->callback([f]() {
    std::vector<StageResult> results, reference;
    std::string error, description;
    if (!IsJson(f->in) && RedrawsInPlace(f->in, f->out)) {
      fmt::print(stderr,
                 "report: --out {} is the run's own directory: its results.json holds what the "
                 "CSV does not (the stage length, turns, errors, the lab's upper bound), and would "
                 "be written over; give another --out, or redraw from that results.json\n",
                 f->out);
      throw CLI::RuntimeError(2);
    }
    if (!ReadResults(f->in, &results, &error, &description) ||
        (!f->reference.empty() && !ReadResults(f->reference, &reference, &error)) ||
        !WriteResults(results, f->out, f->description.empty() ? description : f->description,
                      reference, &error)) {
      fmt::print(stderr, "report: {}\n", error);
      throw CLI::RuntimeError(1);
    }
    fmt::print("{}", ResultsMarkdown(results));
  });
}

}  // namespace warden
