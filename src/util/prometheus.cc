#include "util/prometheus.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace warden {
namespace {

// A label value escapes backslashes, line breaks and quotes; a help text (`quotes` false) the first
// two only.
void AppendEscaped(std::string* out, std::string_view v, bool quotes = true) {
  for (char c : v) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '"' && quotes) {
      *out += "\\\"";
    } else if (c == '\n') {
      *out += "\\n";
    } else {
      *out += c;
    }
  }
}

void AppendValue(std::string* out, double v) {
  if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
  } else if (std::isnan(v)) {
    *out += "NaN";
  } else {
    fmt::format_to(std::back_inserter(*out), "{}", v);
  }
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == ':';
}

bool ParseValue(std::string_view s, double* v) {
  if (s == "+Inf" || s == "Inf") {
    *v = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *v = -INFINITY;
    return true;
  }
  if (s == "NaN") {
    *v = NAN;
    return true;
  }
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Parses `{k="v",...}` at line[*pos]; advances *pos past the closing brace.
bool ParseLabels(std::string_view line, size_t* pos, Labels* labels) {
  size_t i = *pos + 1;
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
    if (i < line.size() && line[i] == '}') {
      *pos = i + 1;
      return true;
    }
    const size_t key_start = i;
    while (i < line.size() && IsNameChar(line[i])) ++i;
    if (i == key_start || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"')
      return false;
    std::string key(line.substr(key_start, i - key_start));
    i += 2;
    std::string value;
    while (i < line.size() && line[i] != '"') {
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
        value += line[i] == 'n' ? '\n' : line[i];
      } else {
        value += line[i];
      }
      ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // closing quote
    labels->emplace_back(std::move(key), std::move(value));
  }
}

}  // namespace

void PrometheusWriter::Family(std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out_), "# HELP {} ", name);
  AppendEscaped(&out_, help, /*quotes=*/false);
  fmt::format_to(std::back_inserter(out_), "\n# TYPE {} {}\n", name, type);
}

void PrometheusWriter::AppendLabels(const Labels& labels, std::string_view extra_name,
                                    std::string_view extra_value) {
  if (labels.empty() && extra_name.empty()) return;
  out_ += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out_ += ',';
    first = false;
    out_ += k;
    out_ += "=\"";
    AppendEscaped(&out_, v);
    out_ += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out_ += ',';
    out_ += extra_name;
    out_ += "=\"";
    out_ += extra_value;
    out_ += '"';
  }
  out_ += '}';
}

void PrometheusWriter::Sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  AppendLabels(labels);
  out_ += ' ';
  AppendValue(&out_, value);
  out_ += '\n';
}

void PrometheusWriter::HistogramSamples(std::string_view name, const Labels& labels,
                                        const Histogram& h) {
  const std::string bucket = fmt::format("{}_bucket", name);
  for (size_t i = 0; i <= h.bounds().size(); ++i) {
    out_ += bucket;
    AppendLabels(labels, "le", i < h.bounds().size() ? fmt::format("{}", h.bounds()[i]) : "+Inf");
    fmt::format_to(std::back_inserter(out_), " {}\n", h.CumulativeCount(i));
  }
  Sample(fmt::format("{}_sum", name), labels, h.sum());
  Sample(fmt::format("{}_count", name), labels, static_cast<double>(h.count()));
}

std::string_view PrometheusSample::label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return {};
}

bool ParsePrometheusText(std::string_view text, std::vector<PrometheusSample>* samples,
                         std::string* error) {
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;

    PrometheusSample s;
    size_t i = 0;
    while (i < line.size() && IsNameChar(line[i])) ++i;
    s.name = std::string(line.substr(0, i));
    if (s.name.empty() ||
        (i < line.size() && line[i] == '{' && !ParseLabels(line, &i, &s.labels))) {
      *error = fmt::format("line {}: malformed sample: {}", line_no, line);
      return false;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    std::string_view rest = line.substr(i);
    rest = rest.substr(0, rest.find(' '));  // drop an optional timestamp
    if (!ParseValue(rest, &s.value)) {
      *error = fmt::format("line {}: bad value '{}'", line_no, rest);
      return false;
    }
    samples->push_back(std::move(s));
  }
  return true;
}

}  // namespace warden
