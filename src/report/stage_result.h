// One stage of a load test or lab run, with the seed's columns (SPEC §6), and the files that
// report them: results.csv (the columns of reference/seed-results.csv), results.md (the seed's
// "off → on" table), results.json and gnuplot figures.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

struct StageResult {
  int sessions = 0;     // concurrent sessions
  std::string variant;  // "off", "on", or a policy name
  double sessions_per_hour = NAN;
  double output_tokens_per_min = NAN;
  double ttfb_p50_s = NAN;
  double ttfb_p95_s = NAN;
  double replicas_busy = NAN;
  double prefix_hit_pct = NAN;
  double stayed_on_replica_pct = NAN;  // NaN: not measured
  // Beyond the seed's columns (results.json only).
  double stage_seconds = NAN;
  long turns = -1;  // < 0: not known (a results.csv does not carry them)
  long errors = -1;
  double upper_bound_hit_pct = NAN;  // the lab's bound: every token computed once per replica
  // The lab's bound for any placement: every token computed once on some replica.
  double any_placement_bound_hit_pct = NAN;
};

inline constexpr std::string_view kResultsCsvHeader =
    "sessions,variant,sessions_per_hour,output_tokens_per_min,ttfb_p50_s,ttfb_p95_s,"
    "replicas_busy,prefix_hit_pct,stayed_on_replica_pct";

std::string ResultsCsv(const std::vector<StageResult>& results);
// A figure for a run's progress lines: `decimals` places, or a dash when it was not measured
// (NaN), as in the tables.
std::string ProgressFigure(double value, int decimals);
// Two variants: the seed's layout ("a → b" in each cell). Otherwise one row per stage and variant.
std::string ResultsMarkdown(const std::vector<StageResult>& results);
std::string ResultsJson(const std::vector<StageResult>& results, std::string_view description);

// Reads a results CSV (ours or reference/seed-results.csv: '#' lines are comments). Returns false
// with an error naming the line.
bool ParseResultsCsv(std::string_view text, std::vector<StageResult>* results, std::string* error);

// Reads a results.json as ResultsJson writes it (all of StageResult, the lab's upper bound
// included), and its description into `description` (may be null). Returns false with an error
// naming the stage.
bool ParseResultsJson(std::string_view text, std::vector<StageResult>* results,
                      std::string* description, std::string* error);

// The variants in order of first appearance.
std::vector<std::string> Variants(const std::vector<StageResult>& results);

// Writes results.csv, results.md, results.json into `dir` (created if missing). Returns false
// with an error. Quick enough to write between two stages.
bool WriteResultTables(const std::vector<StageResult>& results, const std::string& dir,
                       std::string_view description, std::string* error);
// The same and the figures ttfb.png, replicas_busy.png, prefix_hits.png (with gnuplot).
// `reference`, if not empty, is drawn dashed beside them (e.g. the seed's published numbers).
bool WriteResults(const std::vector<StageResult>& results, const std::string& dir,
                  std::string_view description, const std::vector<StageResult>& reference,
                  std::string* error);

}  // namespace warden
