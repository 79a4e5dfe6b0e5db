#!/usr/bin/env bash
# Installs the test-only npm packages into tests/js/node_modules when missing.
# Prints nothing when they are there. Exit 1 (with a message) when npm fails.
set -euo pipefail
cd "$(dirname "$0")"
if [[ -f node_modules/.pagoda-ok && node_modules/.pagoda-ok -nt package.json ]]; then exit 0; fi
if ! command -v npm >/dev/null; then echo "tests/js/ensure.sh: npm not found" >&2; exit 1; fi
if [[ -f package-lock.json ]]; then
  npm ci --no-audit --no-fund --loglevel=error >&2
else
  npm install --no-audit --no-fund --loglevel=error >&2
fi
touch node_modules/.pagoda-ok
