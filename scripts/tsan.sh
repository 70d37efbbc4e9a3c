#!/usr/bin/env bash
# Looks for data races: builds `warden` and the gateway's integration tests with ThreadSanitizer
# (in build-tsan/, without tcmalloc) and runs the tests; every `warden` process they start (gateways
# on two threads, simulated replicas, peers) writes its race reports to build-tsan/tsan-logs/.
# Exits 1 if any process reported a race, with the reports' first lines; 2 if none did but a test
# failed. Not part of `make test`:
# the build takes about 7 minutes on two cores, and TSan slows the tests several times over.
# (TSan holds a signal back until the thread it lands on next enters its runtime: a rare test that
# waits on a SIGTERM may then time out; a race is what this script is for.)
#
# Usage: scripts/tsan.sh [gtest filter, default every test]
set -euo pipefail
cd "$(dirname "$0")/.."
filter=${1:-*}
scripts/install-deps.sh >/dev/null
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWARDEN_TSAN=ON >/dev/null
cmake --build build-tsan -j"$(nproc)" --target warden gateway_integration_tests
logs=build-tsan/tsan-logs
rm -rf "$logs" && mkdir -p "$logs"
tests=0
TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 log_path=$PWD/$logs/tsan" \
  build-tsan/tests/integration/gateway_integration_tests --gtest_filter="$filter" || tests=$?
if compgen -G "$logs/tsan.*" >/dev/null; then
  echo "ThreadSanitizer reports, in $logs:" >&2
  grep -h -A3 "WARNING: ThreadSanitizer" "$logs"/tsan.* | head -40 >&2
  exit 1
fi
echo "no race reported"
if ((tests != 0)); then
  echo "but some tests failed under TSan (above): not races" >&2
  exit 2
fi
