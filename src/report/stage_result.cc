#include "report/stage_result.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "util/json_escape.h"

namespace warden {
namespace {

std::string Num(double v, int decimals) {
  if (!std::isfinite(v)) return "";  // as results.json's null: not a figure to read back
  return fmt::format("{:.{}f}", v, decimals);
}

std::string Cell(double v, int decimals) {
  if (std::isnan(v)) return "–";
  // Halves to even, as the CSV's figures (Num) round: the two files show the same number.
  if (decimals == 0 && std::abs(v) < 1e15)
    return fmt::format("{:L}", static_cast<long>(std::nearbyint(v)));
  if (decimals == 0) return fmt::format("{:.0f}", v);
  return fmt::format("{:.{}f}", v, decimals);
}

std::string JsonNum(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : "null";
}

// A cell of a results CSV: empty (not measured: NaN), or a finite number >= 0.
bool ParseDouble(std::string_view s, double* v) {
  if (s.empty()) {
    *v = NAN;
    return true;
  }
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*v) && *v >= 0;
}

// `text` inside a gnuplot single-quoted string, where nothing is substituted and a quote is
// doubled; control characters (which could end the command) become spaces.
std::string GnuplotQuoted(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "''";
    } else {
      out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
    }
  }
  return out + "'";
}

// `text` in a Markdown table's cell: a '|' would end the cell.
std::string MarkdownText(std::string_view text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// `text` as one word for /bin/sh.
std::string ShellQuoted(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Written beside and renamed over the file: a run stopped mid-write leaves the previous whole
// file, never half of the new one.
bool WriteFile(const std::filesystem::path& path, const std::string& text, std::string* error) {
  std::filesystem::path temporary = path;
  temporary += ".partial";
  {
    std::ofstream f(temporary);
    f << text;
    if (!f.flush()) {
      *error = fmt::format("cannot write {}", temporary.string());
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    *error = fmt::format("cannot write {}: {}", path.string(), ec.message());
    return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> Variants(const std::vector<StageResult>& results) {
  std::vector<std::string> variants;
  for (const StageResult& r : results) {
    if (std::find(variants.begin(), variants.end(), r.variant) == variants.end()) {
      variants.push_back(r.variant);
    }
  }
  return variants;
}

std::string ProgressFigure(double value, int decimals) {
  return std::isnan(value) ? std::string("–") : fmt::format("{:.{}f}", value, decimals);
}

std::string ResultsCsv(const std::vector<StageResult>& results) {
  std::string out(kResultsCsvHeader);
  out += '\n';
  for (const StageResult& r : results) {
    out += fmt::format("{},{},{},{},{},{},{},{},{}\n", r.sessions, r.variant,
                       Num(r.sessions_per_hour, 0), Num(r.output_tokens_per_min, 0),
                       Num(r.ttfb_p50_s, 2), Num(r.ttfb_p95_s, 2), Num(r.replicas_busy, 2),
                       Num(r.prefix_hit_pct, 1), Num(r.stayed_on_replica_pct, 1));
  }
  return out;
}

std::string ResultsMarkdown(const std::vector<StageResult>& results) {
  const std::vector<std::string> variants = Variants(results);
  // The lab's upper bound on the hit rate, when known (the load test has none).
  const bool bounded = std::any_of(results.begin(), results.end(), [](const StageResult& r) {
    return !std::isnan(r.upper_bound_hit_pct);
  });
  std::string out;
  if (variants.size() == 2) {
    const std::string& a = variants[0];
    const std::string& b = variants[1];
    // One row per stage of `a`, with the stage of `b` of the same size in the same order (a
    // stage size run twice is two rows), ordered by size.
    struct Row {
      int sessions;
      const StageResult* x = nullptr;
      const StageResult* y = nullptr;
    };
    std::vector<Row> rows;
    for (const StageResult& r : results) {
      if (r.variant == a) {
        rows.push_back({r.sessions, &r});
        continue;
      }
      const auto row = std::find_if(rows.begin(), rows.end(), [&](const Row& row) {
        return row.sessions == r.sessions && row.y == nullptr;
      });
      if (row == rows.end()) {
        rows.push_back({r.sessions, nullptr, &r});
      } else {
        row->y = &r;
      }
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& l, const Row& r) { return l.sessions < r.sessions; });
    const std::string arrow = fmt::format("{} → {}", MarkdownText(a), MarkdownText(b));
    out += fmt::format(
        "| Sessions | Sessions/h {0} | Output tokens/min {0} | TTFB p50 {0} (s) | TTFB p95 {0} (s) "
        "| "
        "Replicas busy {0} | Prefix hits {0} (%) |{1} Stayed on replica{2} (%) |\n",
        arrow,
        bounded ? fmt::format(" Upper bound {0} (%) | Any placement's bound {0} (%) |", arrow) : "",
        std::any_of(
            rows.begin(), rows.end(),
            [](const Row& row) { return row.x && !std::isnan(row.x->stayed_on_replica_pct); })
            ? " " + arrow
            : "");
    out += bounded ? "|---|---|---|---|---|---|---|---|---|---|\n"
                   : "|---|---|---|---|---|---|---|---|\n";
    for (const Row& row : rows) {
      const StageResult empty;
      const StageResult& x = row.x ? *row.x : empty;
      const StageResult& y = row.y ? *row.y : empty;
      auto both = [&](double StageResult::*f, int d) {
        return Cell(x.*f, d) + " → " + Cell(y.*f, d);
      };
      // The seed's layout leaves "off" blank where it cannot be told (one data-parallel server).
      const std::string stayed = std::isnan(x.stayed_on_replica_pct)
                                     ? Cell(y.stayed_on_replica_pct, 1)
                                     : both(&StageResult::stayed_on_replica_pct, 1);
      out += fmt::format(
          "| {} | {} | {} | {} | {} | {} | {} |{} {} |\n", row.sessions,
          both(&StageResult::sessions_per_hour, 0), both(&StageResult::output_tokens_per_min, 0),
          both(&StageResult::ttfb_p50_s, 2), both(&StageResult::ttfb_p95_s, 2),
          both(&StageResult::replicas_busy, 2), both(&StageResult::prefix_hit_pct, 1),
          bounded ? " " + both(&StageResult::upper_bound_hit_pct, 1) + " | " +
                        both(&StageResult::any_placement_bound_hit_pct, 1) + " |"
                  : "",
          stayed);
    }
    return out;
  }
  out += fmt::format(
      "| Sessions | Variant | Sessions/h | Output tokens/min | TTFB p50 (s) | TTFB p95 (s) | "
      "Replicas busy | Prefix hits (%) |{} Stayed on replica (%) |\n",
      bounded ? " Upper bound (%) | Any placement's bound (%) |" : "");
  out += bounded ? "|---|---|---|---|---|---|---|---|---|---|---|\n"
                 : "|---|---|---|---|---|---|---|---|---|\n";
  for (const StageResult& r : results) {
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |{} {} |\n", r.sessions,
                       MarkdownText(r.variant), Cell(r.sessions_per_hour, 0),
                       Cell(r.output_tokens_per_min, 0), Cell(r.ttfb_p50_s, 2),
                       Cell(r.ttfb_p95_s, 2), Cell(r.replicas_busy, 2), Cell(r.prefix_hit_pct, 1),
                       bounded ? " " + Cell(r.upper_bound_hit_pct, 1) + " | " +
                                     Cell(r.any_placement_bound_hit_pct, 1) + " |"
                               : "",
                       Cell(r.stayed_on_replica_pct, 1));
  }
  return out;
}

std::string ResultsJson(const std::vector<StageResult>& results, std::string_view description) {
  std::string out = fmt::format("{{\"description\":{},\"stages\":[", JsonString(description));
  for (size_t i = 0; i < results.size(); ++i) {
    const StageResult& r = results[i];
    if (i) out += ',';
    out += fmt::format(
        "\n{{\"sessions\":{},\"variant\":{},\"sessions_per_hour\":{},\"output_tokens_per_min\":{},"
        "\"ttfb_p50_s\":{},\"ttfb_p95_s\":{},\"replicas_busy\":{},\"prefix_hit_pct\":{},"
        "\"stayed_on_replica_pct\":{},\"stage_seconds\":{},\"turns\":{},\"errors\":{},"
        "\"upper_bound_hit_pct\":{},\"any_placement_bound_hit_pct\":{}}}",
        r.sessions, JsonString(r.variant), JsonNum(r.sessions_per_hour),
        JsonNum(r.output_tokens_per_min), JsonNum(r.ttfb_p50_s), JsonNum(r.ttfb_p95_s),
        JsonNum(r.replicas_busy), JsonNum(r.prefix_hit_pct), JsonNum(r.stayed_on_replica_pct),
        JsonNum(r.stage_seconds), r.turns < 0 ? "null" : std::to_string(r.turns),
        r.errors < 0 ? "null" : std::to_string(r.errors), JsonNum(r.upper_bound_hit_pct),
        JsonNum(r.any_placement_bound_hit_pct));
  }
  out += "\n]}\n";
  return out;
}

namespace {

// What no run writes (a hand-edited file): a share past 100 %, a median past the 95th
// percentile, a variant with no name; else empty.
std::string ImplausibleStage(const StageResult& r) {
  if (r.variant.empty()) return "the variant has no name";
  if (r.prefix_hit_pct > 100 || r.stayed_on_replica_pct > 100 || r.upper_bound_hit_pct > 100 ||
      r.any_placement_bound_hit_pct > 100)
    return "a share (prefix hits, stayed on replica, upper bounds) is past 100 %";
  if (r.ttfb_p50_s > r.ttfb_p95_s) return "the TTFB median is past its 95th percentile";
  return {};
}

}  // namespace

bool ParseResultsCsv(std::string_view text, std::vector<StageResult>* results, std::string* error) {
  int line_no = 0;
  bool header_seen = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (!header_seen) {
      if (line != kResultsCsvHeader) {
        *error = fmt::format("line {}: expected the header '{}'", line_no, kResultsCsvHeader);
        return false;
      }
      header_seen = true;
      continue;
    }
    std::vector<std::string_view> cells;
    size_t start = 0;
    for (size_t i = 0; i <= line.size(); ++i) {
      if (i == line.size() || line[i] == ',') {
        cells.push_back(line.substr(start, i - start));
        start = i + 1;
      }
    }
    if (cells.size() != 9) {
      *error = fmt::format("line {}: expected 9 cells, got {}", line_no, cells.size());
      return false;
    }
    StageResult r;
    double sessions;
    r.variant = cells[1];
    double* fields[] = {&r.sessions_per_hour,    &r.output_tokens_per_min, &r.ttfb_p50_s,
                        &r.ttfb_p95_s,           &r.replicas_busy,         &r.prefix_hit_pct,
                        &r.stayed_on_replica_pct};
    bool ok = ParseDouble(cells[0], &sessions) && sessions >= 1 && sessions <= 1e6 &&
              sessions == std::floor(sessions);
    for (int i = 0; i < 7 && ok; ++i) ok = ParseDouble(cells[i + 2], fields[i]);
    if (!ok) {
      *error = fmt::format(
          "line {}: sessions must be a whole number >= 1, and every other figure a number >= 0 "
          "(or empty)",
          line_no);
      return false;
    }
    r.sessions = static_cast<int>(sessions);
    if (const std::string wrong = ImplausibleStage(r); !wrong.empty()) {
      *error = fmt::format("line {}: {}", line_no, wrong);
      return false;
    }
    results->push_back(std::move(r));
  }
  if (!header_seen) {
    *error = "no header line";
    return false;
  }
  return true;
}

namespace {

// A figure of a stage: a number >= 0, or null (not measured: NaN). Read by simdjson, whose
// numbers are rounded exactly (Boost 1.81's parser drifts in the last digit of 1 in 15 figures,
// so a report made again from results.json did not say what the run had).
bool JsonFigure(simdjson::dom::object stage, std::string_view name, double* v) {
  simdjson::dom::element field;
  if (stage.at_key(name).get(field) != simdjson::SUCCESS || field.is_null()) {
    *v = NAN;
    return true;
  }
  if (field.get_double().get(*v) != simdjson::SUCCESS) return false;
  return std::isfinite(*v) && *v >= 0;
}

// A count of a stage: a whole number >= 0, or null (not known: -1).
bool JsonCount(simdjson::dom::object stage, std::string_view name, long* v) {
  double d;
  if (!JsonFigure(stage, name, &d) || (!std::isnan(d) && d != std::floor(d)) || d > 1e15)
    return false;
  *v = std::isnan(d) ? -1 : static_cast<long>(d);
  return true;
}

bool ParseStage(simdjson::dom::element value, StageResult* r) {
  simdjson::dom::object stage;
  if (value.get_object().get(stage) != simdjson::SUCCESS) return false;
  std::string_view variant;
  if (stage["variant"].get_string().get(variant) != simdjson::SUCCESS) return false;
  r->variant = variant;
  long sessions;
  if (!JsonCount(stage, "sessions", &sessions) || sessions < 1 || sessions > 1000000) return false;
  r->sessions = static_cast<int>(sessions);
  const std::pair<const char*, double StageResult::*> figures[] = {
      {"sessions_per_hour", &StageResult::sessions_per_hour},
      {"output_tokens_per_min", &StageResult::output_tokens_per_min},
      {"ttfb_p50_s", &StageResult::ttfb_p50_s},
      {"ttfb_p95_s", &StageResult::ttfb_p95_s},
      {"replicas_busy", &StageResult::replicas_busy},
      {"prefix_hit_pct", &StageResult::prefix_hit_pct},
      {"stayed_on_replica_pct", &StageResult::stayed_on_replica_pct},
      {"stage_seconds", &StageResult::stage_seconds},
      {"upper_bound_hit_pct", &StageResult::upper_bound_hit_pct},
      {"any_placement_bound_hit_pct", &StageResult::any_placement_bound_hit_pct}};
  for (const auto& [name, field] : figures) {
    if (!JsonFigure(stage, name, &(r->*field))) return false;
  }
  return JsonCount(stage, "turns", &r->turns) && JsonCount(stage, "errors", &r->errors);
}

}  // namespace

bool ParseResultsJson(std::string_view text, std::vector<StageResult>* results,
                      std::string* description, std::string* error) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  const simdjson::error_code ec = parser.parse(simdjson::padded_string(text)).get(doc);
  simdjson::dom::object root;
  simdjson::dom::array stages;
  if (ec || doc.get_object().get(root) || root["stages"].get_array().get(stages)) {
    *error = ec ? fmt::format("not JSON ({})", simdjson::error_message(ec))
                : std::string("expected an object with a \"stages\" array, as results.json has");
    return false;
  }
  size_t i = 0;
  for (simdjson::dom::element value : stages) {
    ++i;
    StageResult r;
    if (!ParseStage(value, &r)) {
      *error = fmt::format(
          "stage {}: expected \"sessions\" (a whole number >= 1), \"variant\" (a string) and "
          "every figure a number >= 0 or null",
          i);
      return false;
    }
    if (const std::string wrong = ImplausibleStage(r); !wrong.empty()) {
      *error = fmt::format("stage {}: {}", i, wrong);
      return false;
    }
    results->push_back(std::move(r));
  }
  if (description) {
    std::string_view d;
    *description = root["description"].get_string().get(d) == simdjson::SUCCESS ? std::string(d)
                                                                                : std::string();
  }
  return true;
}

namespace {

// One data file per series: "sessions value" lines, in order of sessions (a run's stages may go
// down and up again: --stages 16,4,8), a size run twice in the order it ran.
std::string SeriesData(const std::vector<StageResult>& results, const std::string& variant,
                       double StageResult::*field) {
  std::vector<const StageResult*> points;
  for (const StageResult& r : results) {
    if (r.variant == variant && !std::isnan(r.*field)) points.push_back(&r);
  }
  std::stable_sort(points.begin(), points.end(), [](const StageResult* a, const StageResult* b) {
    return a->sessions < b->sessions;
  });
  std::string out;
  for (const StageResult* r : points) out += fmt::format("{} {}\n", r->sessions, r->*field);
  return out;
}

// `points`: gnuplot point types for our series and for the reference's (filled and open shapes).
std::string PlotCommand(const std::filesystem::path& dir, const std::vector<StageResult>& results,
                        const std::vector<StageResult>& reference, double StageResult::*field,
                        const std::string& label, int* file_counter, std::string* error,
                        std::pair<int, int> points = {7, 6}) {
  std::vector<std::string> parts;
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                          "#8c564b", "#e377c2", "#17becf", "#7f7f7f"};
  int color = 0;
  for (const std::string& v : Variants(results)) {
    const auto path = dir / fmt::format(".plot{}.dat", (*file_counter)++);
    if (!WriteFile(path, SeriesData(results, v, field), error)) return {};
    parts.push_back(
        fmt::format("{} using 1:2 with linespoints lw 2 pt {} ps 1.2 lc rgb '{}' title {}",
                    GnuplotQuoted(path.filename().string()), points.first, colors[color++ % 9],
                    GnuplotQuoted(fmt::format("{} {}", v, label))));
  }
  color = 0;
  for (const std::string& v : Variants(reference)) {
    const auto path = dir / fmt::format(".plot{}.dat", (*file_counter)++);
    if (!WriteFile(path, SeriesData(reference, v, field), error)) return {};
    parts.push_back(
        fmt::format("{} using 1:2 with linespoints dt 2 lw 1 pt {} lc rgb '{}' title {}",
                    GnuplotQuoted(path.filename().string()), points.second, colors[color++ % 9],
                    GnuplotQuoted(fmt::format("seed {} {}", v, label))));
  }
  std::string joined;
  for (const std::string& p : parts) joined += (joined.empty() ? "" : ", ") + p;
  return joined;
}

// The lab's bound for any placement as a line of its own on the hit-rate figure: per stage size,
// the highest any run had (the policies' runs admit their requests at other times, so theirs
// differ a little). Empty when no stage has it (the load test's).
std::string AnyPlacementBoundPlot(const std::filesystem::path& dir,
                                  const std::vector<StageResult>& results, int* file_counter,
                                  std::string* error) {
  std::map<int, double> bound;
  for (const StageResult& r : results) {
    if (std::isnan(r.any_placement_bound_hit_pct)) continue;
    const auto [it, added] = bound.emplace(r.sessions, r.any_placement_bound_hit_pct);
    if (!added) it->second = std::max(it->second, r.any_placement_bound_hit_pct);
  }
  if (bound.empty()) return {};
  std::string data;
  for (const auto& [sessions, pct] : bound) data += fmt::format("{} {}\n", sessions, pct);
  const auto path = dir / fmt::format(".plot{}.dat", (*file_counter)++);
  if (!WriteFile(path, data, error)) return {};
  return fmt::format(
      "{} using 1:2 with lines dt 3 lw 2 lc rgb '#444444' title 'upper bound, any placement'",
      GnuplotQuoted(path.filename().string()));
}

}  // namespace

bool WriteResultTables(const std::vector<StageResult>& results, const std::string& dir_name,
                       std::string_view description, std::string* error) {
  const std::filesystem::path dir(dir_name);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    *error = fmt::format("cannot create {}: {}", dir_name, ec.message());
    return false;
  }
  return WriteFile(dir / "results.csv", ResultsCsv(results), error) &&
         WriteFile(dir / "results.md", ResultsMarkdown(results), error) &&
         WriteFile(dir / "results.json", ResultsJson(results, description), error);
}

bool WriteResults(const std::vector<StageResult>& results, const std::string& dir_name,
                  std::string_view description, const std::vector<StageResult>& reference,
                  std::string* error) {
  if (!WriteResultTables(results, dir_name, description, error)) return false;
  // An earlier run's figures in the same directory are not this run's.
  for (const char* name : {"ttfb.png", "replicas_busy.png", "prefix_hits.png"}) {
    std::error_code ignored;
    std::filesystem::remove(std::filesystem::path(dir_name) / name, ignored);
  }
  // A figure is drawn when something of it was measured (not when every turn failed, say).
  const auto measured = [&](double StageResult::*field) {
    return std::any_of(results.begin(), results.end(),
                       [&](const StageResult& r) { return std::isfinite(r.*field); });
  };
  const bool draw_ttfb = measured(&StageResult::ttfb_p50_s);
  const bool draw_busy = measured(&StageResult::replicas_busy);
  const bool draw_hits = measured(&StageResult::prefix_hit_pct);
  if (!draw_ttfb && !draw_busy && !draw_hits) return true;
  const std::filesystem::path dir(dir_name);
  std::error_code ec;
  int counter = 0;
  const std::string p50 =
      PlotCommand(dir, results, reference, &StageResult::ttfb_p50_s, "p50", &counter, error);
  const std::string p95 = PlotCommand(dir, results, reference, &StageResult::ttfb_p95_s, "p95",
                                      &counter, error, {5, 4});
  const std::string busy =
      PlotCommand(dir, results, reference, &StageResult::replicas_busy, "", &counter, error);
  std::string hits =
      PlotCommand(dir, results, reference, &StageResult::prefix_hit_pct, "", &counter, error);
  if (const std::string bound = AnyPlacementBoundPlot(dir, results, &counter, error);
      !bound.empty())
    hits += ", " + bound;
  if (!error->empty()) return false;
  std::string script =
      "set terminal pngcairo size 900,560 font 'DejaVu Sans,11'\n"
      "set grid\nset key outside right\nset xlabel 'concurrent sessions'\n";
  // Names relative to `dir`, where gnuplot runs: whatever the directory's name holds, the script
  // never spells it.
  const auto set_output = [](const char* file) {
    return fmt::format("set output {}\n", GnuplotQuoted(file));
  };
  if (draw_ttfb) {
    script += set_output("ttfb.png") + fmt::format(
                                           "set title 'Time to first byte, p50 and p95'\n"
                                           "set logscale y\nset ylabel 'seconds (log scale)'\n"
                                           "plot {}, {}\nunset logscale y\n",
                                           p50, p95);
  }
  if (draw_busy) {
    script += set_output("replicas_busy.png") +
              fmt::format(
                  "set title 'Replicas busy (running > 0), mean over the stage'\n"
                  "set ylabel 'replicas'\nset yrange [0:*]\nplot {}\n",
                  busy);
  }
  if (draw_hits) {
    script += set_output("prefix_hits.png") + fmt::format(
                                                  "set title 'Prefix-cache hit rate'\n"
                                                  "set ylabel 'percent'\nset yrange [0:100]\n"
                                                  "plot {}\n",
                                                  hits);
  }
  const auto script_path = dir / ".figures.gp";
  if (!WriteFile(script_path, script, error)) return false;
  const std::string command =
      fmt::format("cd {} && gnuplot .figures.gp 2>&1", ShellQuoted(dir.string()));
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buf[512];
  while (pipe && fgets(buf, sizeof(buf), pipe)) output += buf;
  const int status = pipe ? pclose(pipe) : -1;
  if (status != 0) {
    // The tables are written; figures of stages with nothing measured (too short, or every
    // request failed) are skipped rather than failing the run.
    // On stderr: the tables may be going to stdout (found by review: the warning led them).
    fmt::print(stderr, "warning: figures not drawn: gnuplot failed ({}): {}\n", status, output);
  }
  for (int i = 0; i < counter; ++i)
    std::filesystem::remove(dir / fmt::format(".plot{}.dat", i), ec);
  std::filesystem::remove(script_path, ec);
  return true;
}

}  // namespace warden
