#include "cli/lab_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "cli/engine_flags.h"
#include "cli/flag_checks.h"
#include "cli/list_option.h"
#include "cli/out_dir.h"
#include "cli/workload_flags.h"
#include "core/routing/policy_factory.h"
#include "lab/lab.h"
#include "lab/replay.h"
#include "os/read_file.h"

namespace warden {

namespace {

// The largest --reference and --trace read (a trace of Mooncake's runs to tens of MB).
constexpr uintmax_t kMaxResultsBytes = 64 << 20;
constexpr uintmax_t kMaxTraceBytes = uintmax_t{4} << 30;

// The flags given on the command line but those the description says already (and --out,
// --quiet), as they were written: "--slow-replica 0:2 --warm".
std::string FlagsGiven(const CLI::App& cmd) {
  static const std::set<std::string> kSaid = {"--policy",   "--out",          "--quiet",
                                              "--profile",  "--seed",         "--trace",
                                              "--replicas", "--stage-seconds"};
  std::vector<std::string> given;
  for (const CLI::Option* option : cmd.get_options()) {
    if (option->count() == 0 || kSaid.contains(option->get_name())) continue;
    std::string flag = option->get_name();
    for (const std::string& value : option->results()) {
      if (option->get_expected_max() == 0) break;  // a switch
      flag += " " + value;
    }
    given.push_back(std::move(flag));
  }
  return fmt::format("{}", fmt::join(given, " "));
}

// What `warden lab` was given: the run's options, and what the command line adds to them.
struct LabFlags {
  LabOptions options;
  std::string attribution = "shared";
  std::vector<std::string> slow;  // --slow-replica INDEX:FACTOR, each
  std::string reference;
  bool quiet = false;
  std::string trace;
  ReplayOptions replay;
};

// --slow-replica INDEX:FACTOR, each, into the options' per-replica slowdowns.
void ApplySlowReplicas(const std::vector<std::string>& slow, LabOptions* o) {
  for (const std::string& s : slow) {
    const size_t colon = s.find(':');
    int index = -1;
    double factor = 0;
    const char* end = s.data() + s.size();
    const bool parsed =
        colon != std::string::npos &&
        std::from_chars(s.data(), s.data() + colon, index).ptr == s.data() + colon &&
        std::from_chars(s.data() + colon + 1, end, factor).ptr == end;
    if (!parsed || index < 0 || index >= o->replicas || !(factor > 0 && factor <= 1000)) {
      throw CLI::ValidationError(
          "--slow-replica", "expected INDEX:FACTOR with 0 <= INDEX < replicas, 0 < FACTOR <= 1000");
    }
    o->replica_slowdown.resize(o->replicas, 1.0);
    o->replica_slowdown[index] = factor;
  }
}

// The seed's table (or another run's) to draw beside the results; exits 2 when it cannot be read.
std::vector<StageResult> ReadReference(const std::string& path) {
  std::vector<StageResult> reference;
  std::string text, error;
  if (!ReadRegularFile(path, kMaxResultsBytes, &text, &error, /*pipes=*/true) ||
      !ParseResultsCsv(text, &reference, &error)) {
    fmt::print(stderr, "--reference: {}: {}\n", path, error);
    throw CLI::RuntimeError(2);
  }
  return reference;
}

// A trace to replay; exits 2 when it cannot be read, and says how many lines were left out.
std::vector<TraceRequest> ReadTraceFile(const std::string& path) {
  std::vector<TraceRequest> trace;
  std::string text, error;
  int not_json = 0;
  if (!ReadRegularFile(path, kMaxTraceBytes, &text, &error, /*pipes=*/true) ||
      !ParseTrace(text, &trace, &error, &not_json)) {
    fmt::print(stderr, "--trace: {}: {}\n", path, error);
    throw CLI::RuntimeError(2);
  }
  if (not_json > 0)
    fmt::print(stderr, "--trace: {}: {} lines are not JSON (cut short?): left out\n", path,
               not_json);
  return trace;
}

// The results' description: what ran, and every other setting given, so that the tables say what
// ran (found by review: a run with --slow-replica or --admission read as one without).
std::string DescribeRun(const LabFlags& f, const ReplayNotes& notes, const CLI::App& cmd) {
  const LabOptions& o = f.options;
  std::string description =
      f.trace.empty()
          ? fmt::format("warden lab: {} replicas of {}, {} s per stage, seed {}, policies {}",
                        o.replicas, o.profile, o.stage_seconds, o.workload.seed,
                        fmt::join(o.policies, ","))
          : fmt::format(
                "warden lab: trace {} ({} requests, {} sessions, {:.0f} s at {}x{}, {} tokens "
                "a hash id) on {} replicas of {}, policies {}",
                f.trace, notes.requests, notes.sessions, notes.trace_seconds, f.replay.speed,
                f.replay.concurrency > 0
                    ? fmt::format(", {} conversations at once", f.replay.concurrency)
                    : (f.replay.closed_loop ? ", closed loop" : ", open loop"),
                notes.tokens_per_id, o.replicas, o.profile, fmt::join(o.policies, ","));
  if (const std::string given = FlagsGiven(cmd); !given.empty())
    description += fmt::format("; with {}", given);
  if (notes.too_long > 0)
    description += fmt::format(" ({} requests too long for a replica left out)", notes.too_long);
  return description;
}

// requests.csv, and windows.csv with --trace-window (an earlier run's removed without); exits 1
// when one cannot be written.
void WriteRequestFiles(const LabFlags& f, const std::vector<LabRequest>& requests,
                       const std::vector<ReplayWindow>& windows) {
  const std::string& out = f.options.out;
  std::ofstream requests_csv(out + "/requests.csv");
  requests_csv << LabRequestsCsv(requests);
  if (!requests_csv) {
    fmt::print(stderr, "lab: cannot write {}/requests.csv\n", out);
    throw CLI::RuntimeError(1);
  }
  if (f.replay.window_s <= 0) {
    std::error_code ignored;
    std::filesystem::remove(out + "/windows.csv", ignored);
    return;
  }
  std::ofstream windows_csv(out + "/windows.csv");
  windows_csv << ReplayWindowsCsv(windows);
  if (!windows_csv) {
    fmt::print(stderr, "lab: cannot write {}/windows.csv\n", out);
    throw CLI::RuntimeError(1);
  }
}

// The command itself, once its flags are read.
void RunLabCommand(LabFlags& f, const CLI::App& cmd) {
  LabOptions& o = f.options;
  if (std::string e = ApplyAttribution(f.attribution, &o.workload); !e.empty())
    throw CLI::ValidationError(e);
  if (o.workload.attribution_per_session && !f.quiet) {
    fmt::print(stderr,
               "lab: the engine model leaves Claude Code's attribution block out of the prompt, "
               "as vLLM does since March 2026: --attribution per-session changes no figure here "
               "(warden bench against an older vLLM, which keeps it, shows what it costs)\n");
  }
  ApplySlowReplicas(f.slow, &o);
  o.progress = !f.quiet;
  if (std::string e = ValidateLabOptions(o); !e.empty()) throw CLI::ValidationError(e);
  const std::vector<StageResult> reference =
      f.reference.empty() ? std::vector<StageResult>{} : ReadReference(f.reference);
  if (std::string e = ValidateReplayOptions(f.replay); !e.empty()) throw CLI::ValidationError(e);
  if (std::string e = CheckOutDir(o.out); !e.empty()) throw CLI::ValidationError(e);
  const std::vector<TraceRequest> trace =
      f.trace.empty() ? std::vector<TraceRequest>{} : ReadTraceFile(f.trace);
  const auto start = std::chrono::steady_clock::now();
  std::vector<StageResult> results;
  std::vector<LabRequest> requests;
  std::vector<ReplayWindow> windows;
  ReplayNotes notes;
  std::string error;
  const bool ran = f.trace.empty() ? RunLab(o, &results, &error, &requests)
                                   : RunReplay(o, f.replay, trace, &results, &notes, &error,
                                               &requests, &windows);
  if (!ran) {
    fmt::print(stderr, "lab: {}\n", error);
    throw CLI::RuntimeError(1);
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double simulated = 0;
  for (const StageResult& r : results) simulated += r.stage_seconds;
  if (notes.too_long > 0) {
    fmt::print(stderr,
               "lab: {} requests of the trace are longer than a replica's context: left out\n",
               notes.too_long);
  }
  if (!WriteResults(results, o.out, DescribeRun(f, notes, cmd), reference, &error)) {
    fmt::print(stderr, "lab: {}\n", error);
    throw CLI::RuntimeError(1);
  }
  WriteRequestFiles(f, requests, windows);
  fmt::print(
      "{}\n{:.0f} simulated seconds in {:.2f} s of wall time ({:.0f}x real time); written to "
      "{}/\n",
      ResultsMarkdown(results), simulated, wall, simulated / wall, o.out);
}

}  // namespace

void AddLabCommand(CLI::App& app) {
  auto f = std::make_shared<LabFlags>();
  LabOptions& o = f->options;
  const std::string policy_names = LabPolicyNameList();
  CLI::App* cmd = app.add_subcommand("lab",
                                     "Routing policies compared on the load test's sessions, in "
                                     "discrete-event time against the engine model");
  AddListOption(cmd, "--policy", &o.policies, "Policies to run, in order (" + policy_names + ")");
  AddListOption(cmd, "--stages", &o.stages, "Concurrent sessions per stage");
  cmd->add_option("--stage-seconds", o.stage_seconds, "Simulated seconds per stage")
      ->capture_default_str();
  cmd->add_option("--out", o.out,
                  "Directory for results.csv, results.md, results.json, the figures, "
                  "requests.csv (one line per request of the measured stages) and, with "
                  "--trace-window, windows.csv")
      ->capture_default_str();
  AddEngineFlags(cmd, {.profile = &o.profile,
                       .reply_tokens = &o.reply_tokens,
                       .api_latency_s = &o.api_latency_s,
                       .kv_offloading_gib = &o.kv_offloading_gib,
                       .reserve_full_prompt = &o.reserve_full_prompt});
  cmd->add_option("--replicas", o.replicas, "Replicas")->capture_default_str();
  cmd->add_option("--kv-tokens", o.kv_tokens,
                  "KV cache per replica in tokens (default: the profile's)");
  cmd->add_option("--max-num-seqs", o.max_num_seqs,
                  "vLLM's max_num_seqs per replica (default: the profile's)");
  cmd->add_flag("--count-every-lookup", o.count_every_lookup,
                "Count a waiting request's prefix-cache lookup at every step it is not admitted, "
                "as vLLM did before PR #48860 (default: once, when admitted); the hit rate may "
                "then pass the upper bound, which counts each request once");
  cmd->add_option("--scrape-interval", o.scrape_interval_s,
                  "Seconds between the router's scrapes of the engines")
      ->capture_default_str();
  cmd->add_option("--overflow-limit", o.overflow_limit,
                  "Overflow limit (0: auto, max_num_seqs / 4)")
      ->capture_default_str();
  cmd->add_option("--latency-jitter", o.latency_jitter,
                  "Each request's latency is uniform in (1 ± this) x the mean")
      ->capture_default_str();
  cmd->add_option("--slow-replica", f->slow,
                  "INDEX:FACTOR, a replica whose steps take FACTOR times longer (repeatable)");
  cmd->add_option("--admission", o.admission,
                  "Admission at the gateway for every policy: off, fifo, recent:K or "
                  "reserve:N[:SECONDS] (a policy "
                  "written NAME+ADMISSION in --policy sets its own)")
      ->capture_default_str();
  cmd->add_option("--admission-max-hold", o.admission_max_hold_s,
                  "Seconds admission may hold a request before it goes to its replica whatever "
                  "room there is, as the gateway's admission_max_hold_s (0: no bound)")
      ->capture_default_str();
  cmd->add_option("--subagents", o.subagents,
                  "Subagents per session: one spawned after each of its first N turns")
      ->capture_default_str();
  cmd->add_option("--subagent-turns", o.subagent_turns, "Requests per subagent")
      ->capture_default_str();
  cmd->add_option("--subagent-system-tokens", o.subagent_system_tokens,
                  "The subagents' system prompt (shared by all of them), tokens")
      ->capture_default_str();
  cmd->add_option("--subagent-task-tokens", o.subagent_task_tokens,
                  "A subagent's first message (its task), tokens")
      ->capture_default_str();
  cmd->add_flag("--warm", o.warm,
                "Run the policies one after another on the same engines (warm caches)");
  cmd->add_option("--reference", f->reference,
                  "A results CSV drawn dashed in the figures (e.g. the seed's)");
  CLI::Option* trace =
      cmd->add_option("--trace", f->trace,
                      "Replay this trace (JSON lines: warden serve's traffic_log, or a Mooncake "
                      "trace) instead of the load test's sessions; one result per policy")
          ->check(CLI::ExistingFile);
  cmd->add_option("--trace-block", f->replay.block_tokens,
                  "Tokens per hash id of the trace (warden serve's traffic_log_block, Mooncake's "
                  "512)")
      ->capture_default_str()
      ->needs(trace);
  cmd->add_flag_callback(
         "--trace-block-exact", [f] { f->replay.fit_blocks = false; },
         "Replay each hash id as --trace-block tokens even where the trace's ids run past its "
         "prompts (default: each id then stands for its share of their length)")
      ->needs(trace);
  cmd->add_option("--trace-speed", f->replay.speed,
                  "Replay this many times faster than recorded (delays shrink alike)")
      ->capture_default_str()
      ->needs(trace);
  cmd->add_option("--trace-concurrency", f->replay.concurrency,
                  "Replay N conversations at once, each the trace's next as one ends, whatever "
                  "its recorded start (a load test of the trace's own traffic; default: the "
                  "recorded starts)")
      ->needs(trace);
  cmd->add_flag_callback(
         "--trace-open-loop", [f] { f->replay.closed_loop = false; },
         "Send every request at its timestamp (default: a session's later request waits for the "
         "one before it, then its recorded delay)")
      ->needs(trace);
  cmd->add_option("--trace-window", f->replay.window_s,
                  "Also a row per policy for each window of this many seconds of the replay, in "
                  "windows.csv (a long trace's busy hours apart from its quiet ones)")
      ->needs(trace);
  AddWorkloadFlags(cmd, &o.workload, &f->attribution);
  cmd->add_flag("--quiet", f->quiet, "No progress lines");
  RefuseFlagsAsValues(cmd);
  cmd->callback([f, cmd]() { RunLabCommand(*f, *cmd); });
}

}  // namespace warden
