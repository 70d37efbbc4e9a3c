#include "report/stage_result.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace warden {
namespace {

TEST(StageResult, CsvRoundTripsWithTheSeedsColumns) {
  std::vector<StageResult> in(2);
  in[0] = {.sessions = 4,
           .variant = "off",
           .sessions_per_hour = 180,
           .output_tokens_per_min = 5886,
           .ttfb_p50_s = 2.05,
           .ttfb_p95_s = 3.5,
           .replicas_busy = 2.71,
           .prefix_hit_pct = 56.2};
  in[1] = in[0];
  in[1].variant = "on";
  in[1].stayed_on_replica_pct = 100;
  const std::string csv = ResultsCsv(in);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), kResultsCsvHeader);
  std::vector<StageResult> out;
  std::string error;
  ASSERT_TRUE(ParseResultsCsv(csv, &out, &error)) << error;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].ttfb_p50_s, 2.05);
  EXPECT_TRUE(std::isnan(out[0].stayed_on_replica_pct));
  EXPECT_EQ(out[1].stayed_on_replica_pct, 100);
}

TEST(StageResult, ReadsTheSeedsPublishedTable) {
  std::ifstream f(std::string(WARDEN_SEED_RESULTS));
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<StageResult> seed;
  std::string error;
  ASSERT_TRUE(ParseResultsCsv(ss.str(), &seed, &error)) << error;
  ASSERT_EQ(seed.size(), 10u);
  EXPECT_EQ(seed[9].sessions, 32);
  EXPECT_EQ(seed[9].variant, "on");
  EXPECT_DOUBLE_EQ(seed[9].ttfb_p50_s, 27.66);
}

TEST(StageResult, MarkdownUsesTheSeedsLayoutForTwoVariants) {
  std::vector<StageResult> r = {
      {.sessions = 4, .variant = "off", .ttfb_p50_s = 2.05},
      {.sessions = 4, .variant = "on", .ttfb_p50_s = 0.38, .stayed_on_replica_pct = 100}};
  const std::string md = ResultsMarkdown(r);
  EXPECT_NE(md.find("TTFB p50 off → on (s)"), std::string::npos);
  EXPECT_NE(md.find("| 4 |"), std::string::npos);
  EXPECT_NE(md.find("2.05 → 0.38"), std::string::npos);
  EXPECT_EQ(md.find("Upper bound"), std::string::npos);  // the load test has none
  r[0].upper_bound_hit_pct = 74.1;                       // the lab's
  r[1].upper_bound_hit_pct = 84.6;
  r[0].any_placement_bound_hit_pct = 85.9;
  r[1].any_placement_bound_hit_pct = 85.2;
  const std::string lab = ResultsMarkdown(r);
  EXPECT_NE(lab.find("| Upper bound off → on (%) | Any placement's bound off → on (%) |"),
            std::string::npos)
      << lab;
  EXPECT_NE(lab.find("| 74.1 → 84.6 | 85.9 → 85.2 |"), std::string::npos) << lab;
  EXPECT_NE(lab.find("\n|---|---|---|---|---|---|---|---|---|---|\n"), std::string::npos) << lab;
}

// One row per stage and variant (not two variants): the upper-bound column only for the lab's.
TEST(StageResult, MarkdownRowsHaveTheUpperBoundOnlyWhenKnown) {
  std::vector<StageResult> r = {{.sessions = 8, .variant = "on", .prefix_hit_pct = 85.1}};
  const std::string bench = ResultsMarkdown(r);
  EXPECT_EQ(bench.find("Upper bound"), std::string::npos) << bench;
  EXPECT_NE(bench.find("| 8 | on | – | – | – | – | – | 85.1 | – |\n"), std::string::npos) << bench;
  EXPECT_NE(bench.find("\n|---|---|---|---|---|---|---|---|---|\n"), std::string::npos) << bench;
  r[0].upper_bound_hit_pct = 86.9;
  r[0].any_placement_bound_hit_pct = 87.4;
  const std::string lab = ResultsMarkdown(r);
  EXPECT_NE(lab.find("| Prefix hits (%) | Upper bound (%) | Any placement's bound (%) |"),
            std::string::npos)
      << lab;
  EXPECT_NE(lab.find("| 85.1 | 86.9 | 87.4 | – |\n"), std::string::npos) << lab;
  EXPECT_NE(lab.find("\n|---|---|---|---|---|---|---|---|---|---|---|\n"), std::string::npos)
      << lab;
}

// A half rounds the same way in both files (to even): 4690.5 tokens a minute is 4690 in each.
TEST(StageResult, CsvAndMarkdownRoundAlike) {
  std::vector<StageResult> r = {{.sessions = 4, .variant = "off", .output_tokens_per_min = 4690.5},
                                {.sessions = 4, .variant = "on", .output_tokens_per_min = 4691.5}};
  const std::string csv = ResultsCsv(r);
  EXPECT_NE(csv.find(",4690,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",4692,"), std::string::npos) << csv;
  const std::string md = ResultsMarkdown(r);
  EXPECT_NE(md.find("4690 → 4692"), std::string::npos) << md;
}

// results.json reads back as written, the figures the CSV has no column for included (the lab's
// upper bound, the stage length, turns, errors), and unknown figures as unknown.
TEST(StageResult, JsonReadsBackWhatItWrote) {
  const std::vector<StageResult> r = {
      {.sessions = 4,
       .variant = "warden",
       .output_tokens_per_min = 6944,
       .ttfb_p50_s = 0.39,
       .prefix_hit_pct = 84.6,
       .stage_seconds = 180,
       .turns = 76,
       .errors = 0,
       .upper_bound_hit_pct = 84.65,
       .any_placement_bound_hit_pct = 85.05},
      {.sessions = 8, .variant = "vllm-dp", .output_tokens_per_min = 9474}};
  std::vector<StageResult> back;
  std::string description, error;
  ASSERT_TRUE(ParseResultsJson(ResultsJson(r, "a \"run\""), &back, &description, &error)) << error;
  EXPECT_EQ(description, "a \"run\"");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].variant, "warden");
  EXPECT_EQ(back[0].sessions, 4);
  EXPECT_DOUBLE_EQ(back[0].upper_bound_hit_pct, 84.65);
  EXPECT_DOUBLE_EQ(back[0].any_placement_bound_hit_pct, 85.05);
  EXPECT_DOUBLE_EQ(back[0].stage_seconds, 180);
  EXPECT_EQ(back[0].turns, 76);
  EXPECT_EQ(back[0].errors, 0);
  EXPECT_EQ(back[1].turns, -1);
  EXPECT_TRUE(std::isnan(back[1].upper_bound_hit_pct));
  EXPECT_TRUE(std::isnan(back[1].any_placement_bound_hit_pct));
  EXPECT_TRUE(std::isnan(back[1].ttfb_p50_s));
  EXPECT_NE(ResultsMarkdown(back).find("Upper bound"), std::string::npos);
}

// Figures are read back as written, to the last digit (Boost 1.81's parser read this one as
// 1789.0638728930903, so a report made again from results.json drifted from the run's).
TEST(StageResult, ReadsJsonFiguresExactly) {
  std::vector<StageResult> back;
  std::string error;
  ASSERT_TRUE(ParseResultsJson(
      R"({"stages":[{"sessions":4,"variant":"on","output_tokens_per_min":1789.0638728930905,)"
      R"("ttfb_p50_s":0.1,"turns":76}]})",
      &back, nullptr, &error))
      << error;
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].output_tokens_per_min, 1789.0638728930905);
  EXPECT_EQ(back[0].ttfb_p50_s, 0.1);
  EXPECT_EQ(back[0].turns, 76);
}

TEST(StageResult, RejectsMalformedJson) {
  std::vector<StageResult> out;
  std::string error;
  EXPECT_FALSE(ParseResultsJson("{", &out, nullptr, &error));
  EXPECT_NE(error.find("not JSON"), std::string::npos) << error;
  EXPECT_FALSE(ParseResultsJson("[]", &out, nullptr, &error));
  EXPECT_NE(error.find("stages"), std::string::npos) << error;
  for (const char* stage :
       {R"({"sessions":0,"variant":"on"})", R"({"sessions":4.5,"variant":"on"})",
        R"({"sessions":4})", R"({"sessions":4,"variant":"on","ttfb_p50_s":-1})",
        R"({"sessions":4,"variant":"on","turns":"many"})", R"({"sessions":4,"variant":3})",
        R"({"sessions":4,"variant":"on","turns":1.5})", "7"}) {
    out.clear();
    EXPECT_FALSE(ParseResultsJson(
        std::string(R"({"stages":[{"sessions":4,"variant":"off"},)") + stage + "]}", &out, nullptr,
        &error))
        << stage;
    EXPECT_NE(error.find("stage 2"), std::string::npos) << error;
  }
}

TEST(StageResult, RejectsMalformedCsv) {
  std::vector<StageResult> out;
  std::string error;
  EXPECT_FALSE(ParseResultsCsv("sessions,variant\n4,off\n", &out, &error));
  EXPECT_FALSE(
      ParseResultsCsv(std::string(kResultsCsvHeader) + "\n4,off,x,1,1,1,1,1,\n", &out, &error));
  EXPECT_NE(error.find("line 2"), std::string::npos);
  // Not finite, or negative: results.json could not carry it, and no stage measures it.
  for (const char* row : {"4,off,inf,1,1,1,1,1,", "4,off,nan,1,1,1,1,1,", "4,off,1,-1,1,1,1,1,",
                          "-3,off,1,1,1,1,1,1,", "0,off,1,1,1,1,1,1,", "4.5,off,1,1,1,1,1,1,"}) {
    EXPECT_FALSE(ParseResultsCsv(std::string(kResultsCsvHeader) + "\n" + row + "\n", &out, &error))
        << row;
  }
  // What no run writes: a share past 100 %, a median past the 95th percentile, no variant name.
  for (const char* row : {"4,off,1,1,1,2,1,150,", "4,off,1,1,1,2,1,50,101", "4,off,1,1,3,2,1,50,",
                          "4,,1,1,1,2,1,50,"}) {
    EXPECT_FALSE(ParseResultsCsv(std::string(kResultsCsvHeader) + "\n" + row + "\n", &out, &error))
        << row;
    EXPECT_NE(error.find("line 2: "), std::string::npos) << error;
  }
}

// A stage size run twice is two rows, each variant's stages paired in the order they ran; a
// stayed-on-replica figure measured for the first variant is shown.
TEST(StageResult, MarkdownKeepsRepeatedStagesAndBothStayedFigures) {
  const std::vector<StageResult> r = {
      {.sessions = 4, .variant = "off", .ttfb_p50_s = 2, .stayed_on_replica_pct = 70.9},
      {.sessions = 4, .variant = "off", .ttfb_p50_s = 3, .stayed_on_replica_pct = 71},
      {.sessions = 4, .variant = "on", .ttfb_p50_s = 0.5, .stayed_on_replica_pct = 100},
      {.sessions = 4, .variant = "on", .ttfb_p50_s = 0.6, .stayed_on_replica_pct = 99}};
  const std::string md = ResultsMarkdown(r);
  EXPECT_NE(md.find("| Stayed on replica off → on (%) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2.00 → 0.50 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 3.00 → 0.60 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 70.9 → 100.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 71.0 → 99.0 |"), std::string::npos) << md;
  // A '|' in a variant's name stays in its cell.
  const std::string piped = ResultsMarkdown({{.sessions = 4, .variant = "a|b"}});
  EXPECT_NE(piped.find("| 4 | a\\|b |"), std::string::npos) << piped;
}

// A variant's name is data: in the figures' script it is quoted, never run.
TEST(StageResult, AVariantNameCannotRunCommands) {
  const std::string dir = ::testing::TempDir() + "/warden-report-quotes";
  std::filesystem::remove_all(dir);
  const std::string planted = dir + "/PLANTED";
  const std::vector<StageResult> r = {
      {.sessions = 4,
       .variant = "x'; system \"touch " + planted + "\"; #",
       .ttfb_p50_s = 1,
       .ttfb_p95_s = 2,
       .replicas_busy = 1,
       .prefix_hit_pct = 50},
      {.sessions = 8, .variant = "Bob's `run`", .ttfb_p50_s = 1, .ttfb_p95_s = 2}};
  std::string error;
  ASSERT_TRUE(WriteResults(r, dir, "quotes", {}, &error)) << error;
  EXPECT_FALSE(std::filesystem::exists(planted));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ttfb.png"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/prefix_hits.png"));
}

// The lab's bound for any placement is drawn on the hit-rate figure as a line of its own: the
// same stages with it draw another figure than without it (and the same one again without it).
TEST(StageResult, TheHitRateFigureDrawsAnyPlacementsBound) {
  const std::string dir = ::testing::TempDir() + "/warden-report-bound";
  std::filesystem::remove_all(dir);
  std::vector<StageResult> r = {
      {.sessions = 4, .variant = "warden", .ttfb_p50_s = 1, .ttfb_p95_s = 2, .prefix_hit_pct = 84},
      {.sessions = 8, .variant = "warden", .ttfb_p50_s = 1, .ttfb_p95_s = 2, .prefix_hit_pct = 86}};
  const auto figure = [&] {
    std::string error;
    EXPECT_TRUE(WriteResults(r, dir, "bound", {}, &error)) << error;
    std::ifstream in(dir + "/prefix_hits.png", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string without = figure();
  ASSERT_FALSE(without.empty());
  r[0].any_placement_bound_hit_pct = 85.6;
  r[1].any_placement_bound_hit_pct = 86.9;
  const std::string with = figure();
  EXPECT_NE(with, without);
  r[0].any_placement_bound_hit_pct = r[1].any_placement_bound_hit_pct = NAN;
  EXPECT_EQ(figure(), without);
}

// A figure drawn by an earlier run in the same directory does not stay beside this run's tables
// when this run measured nothing of it.
TEST(StageResult, AnEarlierRunsFiguresDoNotStay) {
  const std::string dir = ::testing::TempDir() + "/warden-report-stale";
  std::filesystem::remove_all(dir);
  std::string error;
  ASSERT_TRUE(WriteResults({{.sessions = 4,
                             .variant = "on",
                             .ttfb_p50_s = 1,
                             .ttfb_p95_s = 2,
                             .replicas_busy = 1,
                             .prefix_hit_pct = 50}},
                           dir, "first", {}, &error))
      << error;
  ASSERT_TRUE(std::filesystem::exists(dir + "/replicas_busy.png"));
  ASSERT_TRUE(WriteResults({{.sessions = 4, .variant = "on", .ttfb_p50_s = 1, .ttfb_p95_s = 2}},
                           dir, "second", {}, &error))
      << error;
  EXPECT_TRUE(std::filesystem::exists(dir + "/ttfb.png"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/replicas_busy.png"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/prefix_hits.png"));
}

}  // namespace
}  // namespace warden

namespace warden {
namespace {

// A results.csv carries no turn or error counts: redrawn from one, results.json says so (null),
// rather than 0.
TEST(ResultsJson, CountsACsvDoesNotCarryAreNull) {
  std::vector<StageResult> results;
  std::string error;
  ASSERT_TRUE(ParseResultsCsv(std::string(kResultsCsvHeader) + "\n4,on,60,1000,0.5,1,2,80,90\n",
                              &results, &error))
      << error;
  const std::string json = ResultsJson(results, "redrawn");
  EXPECT_NE(json.find(R"("turns":null,"errors":null)"), std::string::npos) << json;
  results[0].turns = 12;
  results[0].errors = 0;
  EXPECT_NE(ResultsJson(results, "").find(R"("turns":12,"errors":0)"), std::string::npos);
}

}  // namespace
}  // namespace warden
