#!/usr/bin/env bash
# Installs the coding agents tests/agents/*.sh drive (package.json here, pinned
# by package-lock.json) into tests/agents/node_modules when missing, through
# the one installer, tests/js/ensure.sh. Kept a folder apart from tests/js:
# ~900 MB of native binaries that only these scripts need.
exec bash "$(dirname "$0")/../js/ensure.sh" "$(dirname "$0")"
