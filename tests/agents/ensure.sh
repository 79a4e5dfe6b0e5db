#!/usr/bin/env bash
# Installs the coding agents tests/agents/*.sh drive (package.json here, pinned
# by package-lock.json) into tests/agents/node_modules when missing. Prints
# nothing when they are there; exit 1 (with a message) when npm fails. Kept
# apart from tests/js/ensure.sh: ~900 MB of native binaries that only these
# scripts need.
set -euo pipefail
cd "$(dirname "$0")"
if [[ -f node_modules/.pagoda-ok && node_modules/.pagoda-ok -nt package.json ]]; then exit 0; fi
if ! command -v npm >/dev/null; then echo "tests/agents/ensure.sh: npm not found" >&2; exit 1; fi
if [[ -f package-lock.json ]]; then
  npm ci --no-audit --no-fund --loglevel=error >&2
else
  npm install --no-audit --no-fund --loglevel=error >&2
fi
touch node_modules/.pagoda-ok
