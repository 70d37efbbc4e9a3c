#include <gtest/gtest.h>

#include "bench/bench_runner.h"

namespace warden {
namespace {

// A variant or a replica named twice is refused: the rows of two variants of one name could not
// be told apart, and a replica scraped twice would count twice in "replicas busy".
TEST(BenchOptions, RefusesRepeatedVariantsAndMetricsUrls) {
  BenchOptions o;
  EXPECT_EQ(ValidateBenchOptions(o), "");
  o.variants = {"on", "on"};
  EXPECT_NE(ValidateBenchOptions(o).find("--variants: 'on' is named twice"), std::string::npos);
  o.variants = {"off", "on"};
  o.metrics_urls = {"http://127.0.0.1:8000", "http://127.0.0.1:8001", "http://127.0.0.1:8000"};
  EXPECT_NE(ValidateBenchOptions(o).find("--metrics-url: http://127.0.0.1:8000 is given twice"),
            std::string::npos);
  o.metrics_urls = {"http://127.0.0.1:8000", "http://127.0.0.1:8000/"};  // the same replica
  EXPECT_NE(ValidateBenchOptions(o).find("is given twice"), std::string::npos);
}

// A variant's name is a cell of results.csv, which is not quoted, and a line of the report: a
// line break or a comma in it would write a file the report cannot read back.
TEST(BenchOptions, RefusesVariantNamesWithCommasOrControlCharacters) {
  BenchOptions o;
  o.variants = {"off", "on\nx"};
  EXPECT_EQ(ValidateBenchOptions(o), R"(--variants: "on\nx" has a comma or a control character)");
  o.variants = {"off", "on,x"};
  EXPECT_EQ(ValidateBenchOptions(o), R"(--variants: "on,x" has a comma or a control character)");
  o.variants = {"off", "on tuned"};
  EXPECT_EQ(ValidateBenchOptions(o), "");
}

}  // namespace
}  // namespace warden
