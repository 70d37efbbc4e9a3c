// Prometheus text exposition format (version 0.0.4): a writer for the metrics we export and a
// parser for the metrics we scrape. Pure: no I/O.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/histogram.h"

namespace warden {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Builds an exposition document. Families must be declared (Family) before their samples.
class PrometheusWriter {
 public:
  // Starts a family: "# HELP" and "# TYPE" lines. type: counter, gauge, histogram.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const Labels& labels, double value);
  // The _bucket, _sum and _count samples of a histogram family called `name`.
  void HistogramSamples(std::string_view name, const Labels& labels, const Histogram& h);

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void AppendLabels(const Labels& labels, std::string_view extra_name = {},
                    std::string_view extra_value = {});
  std::string out_;
};

struct PrometheusSample {
  std::string name;
  Labels labels;
  double value = 0;

  // The value of label `key`, or empty.
  std::string_view label(std::string_view key) const;
};

// Parses an exposition document. Returns false (and a message naming the line) on malformed input;
// comments and blank lines are skipped.
bool ParsePrometheusText(std::string_view text, std::vector<PrometheusSample>* samples,
                         std::string* error);

}  // namespace warden
