#!/usr/bin/env bash
# ensure.sh [DIR] — installs the npm packages of DIR (default: tests/js, the
# test-only packages; tests/agents/ensure.sh passes its own folder) from its
# package.json, pinned by package-lock.json when there is one, into
# DIR/node_modules when missing. Prints nothing when they are there; exit 1
# (with a message) when npm fails.
set -euo pipefail
dir=${1:-$(dirname "$0")}
cd "$dir"
if [[ -f node_modules/.pagoda-ok && node_modules/.pagoda-ok -nt package.json ]]; then exit 0; fi
if ! command -v npm >/dev/null; then echo "ensure.sh ($dir): npm not found" >&2; exit 1; fi
if [[ -f package-lock.json ]]; then
  npm ci --no-audit --no-fund --loglevel=error >&2
else
  npm install --no-audit --no-fund --loglevel=error >&2
fi
touch node_modules/.pagoda-ok
