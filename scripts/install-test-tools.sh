#!/usr/bin/env bash
# Installs what the tests need beyond the build: Node.js packages for the client-library, metrics and
# browser tests (tests/js/package-lock.json), Debian's chromium for the panel's browser test, and
# systemd-analyze for the systemd units' check.
set -euo pipefail
cd "$(dirname "$0")/.."
WARDEN_WITH_NODE=1 WARDEN_WITH_BROWSER=1 WARDEN_WITH_SYSTEMD_TOOLS=1 WARDEN_WITH_PACKAGING=1 \
  scripts/install-deps.sh
if [[ ! -d tests/js/node_modules || tests/js/package-lock.json -nt tests/js/node_modules ]]; then
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
fi
