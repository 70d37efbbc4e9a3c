#include "cli/out_dir.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <system_error>

namespace warden {

std::string CheckOutDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string probe = dir + "/.warden-bench-probe";
  if (ec || !std::ofstream(probe)) {
    return fmt::format("--out: cannot write to {}{}", dir, ec ? ": " + ec.message() : "");
  }
  std::filesystem::remove(probe, ec);
  // A figure an earlier run drew is not this run's (gnuplot draws none for a column with no data).
  for (const char* name : {"ttfb.png", "replicas_busy.png", "prefix_hits.png"})
    std::filesystem::remove(dir + "/" + name, ec);
  return {};
}

std::vector<std::string> FiguresWritten(const std::string& dir) {
  std::vector<std::string> written;
  for (const char* name : {"ttfb.png", "replicas_busy.png", "prefix_hits.png"}) {
    std::error_code ec;
    if (std::filesystem::file_size(dir + "/" + name, ec) > 0 && !ec) written.push_back(name);
  }
  return written;
}

}  // namespace warden
