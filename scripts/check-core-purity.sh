#!/usr/bin/env bash
# The core (src/core) is pure: no I/O and no clock of its own, so that the same routing code runs
# in the gateway, the simulator and the lab. Fails, naming the lines, if its code (tests aside)
# includes sockets, files, logging or the OS helpers, or reads a clock.
set -euo pipefail
core=${1:?usage: check-core-purity.sh SRC_CORE_DIR}
pattern='#include <(boost/asio|boost/beast|spdlog|fstream|sys/|unistd\.h|fcntl\.h)|#include "(os|net|gateway|sim|bench|lab|cli)/|_clock::now|std::time\(|getenv'
if found=$(grep -rnE "$pattern" "$core" --include='*.cc' --include='*.h' | grep -v '_test\.cc:'); then
  echo "src/core must stay pure (no I/O, no clock); found:" >&2
  echo "$found" >&2
  exit 1
fi
echo "src/core: no I/O includes, no clock reads"
