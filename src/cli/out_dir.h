// The folder a run writes its results to: checked before the run, and what it drew there.
#pragma once

#include <string>
#include <vector>

namespace warden {

// An error if `dir` cannot take the results (checked before a run that may take an hour); it is
// made if need be, and the figures an earlier run drew there are removed (gnuplot draws none for
// a column with no data, and an old one would pass for this run's).
std::string CheckOutDir(const std::string& dir);

// The figures the run drew in `dir`.
std::vector<std::string> FiguresWritten(const std::string& dir);

}  // namespace warden
