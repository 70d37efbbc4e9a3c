#!/usr/bin/env bash
# Installs what the tests need beyond the build: Node.js packages for the client-library and
# browser tests (from tests/js/package-lock.json).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  WARDEN_WITH_NODE=1 scripts/install-deps.sh
fi
if [[ ! -d tests/js/node_modules || tests/js/package-lock.json -nt tests/js/node_modules ]]; then
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
fi
