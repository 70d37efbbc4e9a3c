#include "util/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>

namespace warden {
namespace {

TEST(Prometheus, WrittenTextParsesBack) {
  PrometheusWriter w;
  w.Family("vllm:num_requests_running", "gauge", "Running requests.");
  w.Sample("vllm:num_requests_running", {{"model_name", "m\"x"}, {"engine", "0"}}, 3);
  Histogram h(std::vector<double>{0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  w.Family("ttft", "histogram", "TTFT.");
  w.HistogramSamples("ttft", {{"engine", "1"}}, h);

  std::vector<PrometheusSample> s;
  std::string err;
  ASSERT_TRUE(ParsePrometheusText(w.text(), &s, &err)) << err;
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s[0].name, "vllm:num_requests_running");
  EXPECT_EQ(s[0].label("model_name"), "m\"x");
  EXPECT_EQ(s[0].label("engine"), "0");
  EXPECT_EQ(s[0].value, 3);
  EXPECT_EQ(s[1].name, "ttft_bucket");
  EXPECT_EQ(s[1].label("le"), "0.1");
  EXPECT_EQ(s[1].value, 1);
  EXPECT_EQ(s[3].label("le"), "+Inf");
  EXPECT_EQ(s[3].value, 3);
  EXPECT_EQ(s[5].name, "ttft_count");
}

TEST(Prometheus, AHelpTextStaysOnItsLine) {
  PrometheusWriter w;
  w.Family("a", "gauge", "Two\nlines, a \\ and \"quotes\".");
  EXPECT_EQ(w.text(), "# HELP a Two\\nlines, a \\\\ and \"quotes\".\n# TYPE a gauge\n");
}

TEST(Prometheus, ParsesTimestampsAndSpecialValues) {
  std::vector<PrometheusSample> s;
  std::string err;
  ASSERT_TRUE(ParsePrometheusText("a 1.5e3 1700000000\nb{x=\"y\"} +Inf\n\n# c\nc NaN\n", &s, &err));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].value, 1500);
  EXPECT_TRUE(std::isinf(s[1].value));
}

TEST(Prometheus, RejectsMalformedLinesNamingThem) {
  std::vector<PrometheusSample> s;
  std::string err;
  EXPECT_FALSE(ParsePrometheusText("ok 1\nbad{x=1} 2\n", &s, &err));
  EXPECT_NE(err.find("line 2"), std::string::npos);
  EXPECT_FALSE(ParsePrometheusText("v notanumber\n", &s, &err));
}

}  // namespace
}  // namespace warden
