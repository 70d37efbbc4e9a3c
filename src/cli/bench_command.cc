#include "cli/bench_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_runner.h"
#include "cli/flag_checks.h"
#include "cli/list_option.h"
#include "cli/out_dir.h"
#include "cli/workload_flags.h"
#include "os/file_limit.h"
#include "util/ascii_case.h"

namespace warden {

void AddBenchCommand(CLI::App& app) {
  struct Flags {
    BenchOptions options;
    std::string api = "anthropic";
    std::string attribution = "shared";
    std::string session_ids = "on";
    bool quiet = false;
  };
  auto f = std::make_shared<Flags>();
  BenchOptions& o = f->options;
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "The seed's load test: closed-loop Claude-Code-style sessions, stages, affinity off vs on");
  cmd->add_option("--target", o.target, "The gateway (or any OpenAI/Anthropic endpoint) to drive")
      ->capture_default_str();
  cmd->add_option("--also-target", o.also_targets,
                  "Another gateway in front of the same replicas (repeatable): turns alternate "
                  "between the targets, turn t of the n-th session to target (n + t) mod count");
  cmd->add_option("--model", o.model, "Model name to request")->capture_default_str();
  cmd->add_option("--api", f->api,
                  "anthropic (/v1/messages, as Claude Code) or openai (/v1/chat/completions)")
      ->capture_default_str();
  cmd->add_option("--session-ids", f->session_ids,
                  "on: requests carry their session id (Claude Code's header and metadata, or "
                  "OpenAI's user); off: none, as a plain SDK client's")
      ->capture_default_str();
  cmd->add_flag("--system-reminders", o.system_reminders,
                "With --api anthropic: a system message after each user turn, kept in the "
                "history, as Claude Code 2.1 sends one after every tool result (its token "
                "budget left)");
  AddListOption(cmd, "--stages", &o.stages, "Concurrent sessions per stage");
  cmd->add_option("--stage-seconds", o.stage_seconds,
                  "Length of a stage (simulated seconds with --time-scale)")
      ->capture_default_str();
  AddListOption(cmd, "--variants", &o.variants,
                "Variants in order: off and on switch the gateway's affinity through its admin "
                "API; other names are labels");
  cmd->add_option("--out", o.out,
                  "Directory for results.csv, results.md, results.json and the figures")
      ->capture_default_str();
  cmd->add_option("--time-scale", o.time_scale,
                  "The target runs this many times faster than real time (a simulator): report "
                  "simulated time")
      ->capture_default_str();
  cmd->add_option("--metrics-url", o.metrics_urls,
                  "Replica base URL whose /metrics to sample (repeatable; default: from the "
                  "gateway's admin API)");
  cmd->add_option("--admin-token", o.admin_token,
                  "The gateways' admin_token, if they have one (for their admin API)");
  cmd->add_option("--api-key", o.api_key,
                  "Sent as Authorization: Bearer <key> with every request (a gateway with "
                  "api_keys, or a vLLM with --api-key)");
  AddWorkloadFlags(cmd, &o.workload, &f->attribution);
  cmd->add_flag("--quiet", f->quiet, "No progress lines");
  RefuseFlagsAsValues(cmd);
  cmd->callback([f]() {
    BenchOptions& o = f->options;
    if (f->api == "anthropic") {
      o.api = BenchApi::kAnthropic;
    } else if (f->api == "openai") {
      o.api = BenchApi::kOpenAi;
    } else {
      throw CLI::ValidationError("--api", "must be anthropic or openai");
    }
    if (f->session_ids != "on" && f->session_ids != "off")
      throw CLI::ValidationError("--session-ids", "must be on or off");
    o.session_ids = f->session_ids == "on";
    if (std::string e = ApplyAttribution(f->attribution, &o.workload); !e.empty())
      throw CLI::ValidationError(e);
    o.progress = !f->quiet;
    // "OFF" or "On" switch affinity too, not label a run that leaves it as it is (found by review:
    // both variants of "OFF,ON" ran with affinity on).
    for (std::string& v : o.variants) {
      if (IEquals(v, "off") || IEquals(v, "on")) v = IEquals(v, "on") ? "on" : "off";
    }
    if (std::string e = ValidateBenchOptions(o); !e.empty()) throw CLI::ValidationError(e);
    if (std::string e = CheckOutDir(o.out); !e.empty()) throw CLI::ValidationError(e);
    // A connection per session and target: thousands of sessions need more than a shell's 1024.
    const FileLimit file_limit = RaiseOpenFileLimit();
    const uint64_t needed = uint64_t(std::ranges::max(o.stages)) * (1 + o.also_targets.size()) + 64;
    if (file_limit.now < needed && file_limit.before < needed) {
      fmt::print(stderr,
                 "bench: warning: {} sessions need about {} open files and the limit is {} "
                 "(ulimit -n): connections will fail\n",
                 std::ranges::max(o.stages), needed, std::max(file_limit.now, file_limit.before));
    }
    std::vector<StageResult> results;
    std::string error;
    if (!RunLoadTest(o, &results, &error)) {
      fmt::print(stderr, "bench: {}\n", error);
      throw CLI::RuntimeError(1);
    }
    std::vector<std::string> files = {"results.csv", "results.md", "results.json"};
    for (std::string& figure : FiguresWritten(o.out)) files.push_back(std::move(figure));
    fmt::print("{}\nwritten to {}/ ({})\n", ResultsMarkdown(results), o.out,
               fmt::join(files, ", "));
    // A target that gave no token in any stage (one that accepts connections and never replies)
    // fails the run, so that a script does not take its empty table for a result.
    const auto answered = [](const StageResult& r) {
      return r.turns > 0 || r.output_tokens_per_min > 0;
    };
    if (std::ranges::none_of(results, answered)) {
      fmt::print(stderr, "bench: no token came in any stage: the target answered nothing\n");
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace warden
