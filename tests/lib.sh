# tests/lib.sh — helpers for integration scripts (source it).
#
# Scripts print one line per check: "ok - what", "not ok - what" or
# "skip - why"; tests/run.sh counts them. Processes started with `spawn` are
# killed when the script exits, whatever happens.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${PAGODA_BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
SHARED=${PAGODA_SHARED:-$ROOT/../shared}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-test.XXXXXX")
# gateways started by tests keep their state (stored responses) under $TMP, not $HOME
export XDG_STATE_HOME=$TMP/xdg-state
unset STATE_DIRECTORY
PIDS=()
N_FAIL=0

cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do [[ -n $p ]] && kill -TERM "$p" 2>/dev/null; done
  sleep 0.2
  for p in "${PIDS[@]:-}"; do [[ -n $p ]] && kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

ok()   { echo "ok - $*"; }
fail() { echo "not ok - $*"; N_FAIL=$((N_FAIL + 1)); }
skip() { echo "skip - $*"; }
check() { # description, command...
  local d=$1; shift
  if "$@"; then ok "$d"; else fail "$d"; fi
}

# A TCP port nobody listens on right now.
# (tests/support/tap.py: below the ephemeral range, never twice in one script)
export PAGODA_PORTS_FILE=$TMP/ports-given
free_port() {
  python3 "$ROOT/tests/support/tap.py" free-port
}

# spawn LOGFILE cmd... : start in the background, remember the pid in $SPAWNED.
spawn() {
  local log=$1; shift
  "$@" >"$log" 2>&1 &
  SPAWNED=$!
  PIDS+=("$SPAWNED")
}

# wait_for SECONDS cmd... : retry a command until it succeeds or time runs out.
wait_for() {
  local limit=$1; shift
  local deadline=$((SECONDS + limit))
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

finish() { exit $((N_FAIL > 0)); }

need_node_packages() { # what is skipped; node and tests/js's npm packages, else skip the script
  if ! command -v node >/dev/null || ! bash "$ROOT/tests/js/ensure.sh"; then
    skip "node/npm or the npm packages unavailable: skipping $1"
    exit 0
  fi
}

# run_node_tap SECONDS SCRIPT.mjs: runs a node script that prints ok / not ok
# lines (echoed into this script's output); any "not ok" line counts as one
# failure, and so does a non-zero exit without one (node's stderr then shown).
# Variables the script reads go before the call: URL=... run_node_tap 120 x.mjs
run_node_tap() {
  local rc
  timeout "$1" node "$2" 2>"$TMP/node.err" | tee "$TMP/node.out"
  rc=${PIPESTATUS[0]}
  grep -q '^not ok' "$TMP/node.out" && N_FAIL=$((N_FAIL + 1))
  if [[ $rc -ne 0 ]]; then
    grep -q '^not ok' "$TMP/node.out" || fail "$(basename "$2") exited $rc"
    sed 's/^/# node: /' "$TMP/node.err" | tail -20
  fi
}

# The stand-in the build makes for each file of shared/models (the Makefile's
# TEST_MODELS; tests/support/support.c has the same table for the C tests).
standin_of() { # rel under shared/models
  case $1 in
    stories260K.gguf) echo tiny-llama.gguf ;;
    zoo/zoo-*.gguf) echo "$1" ;;
    *) return 1 ;;
  esac
}

# test_model REL: the path of a test model: $SHARED/models/REL when present,
# else the build's stand-in for it ($BUILD/test-models/, made by `make
# test-models`, which `make test` runs). A script whose check needs the
# shared file itself (trained text) tests model_is_shared first.
test_model() {
  if [[ -f $SHARED/models/$1 ]]; then
    echo "$SHARED/models/$1"
    return
  fi
  local s
  if s=$(standin_of "$1") && [[ -f $BUILD/test-models/$s ]]; then
    echo "$BUILD/test-models/$s"
    return
  fi
  echo "test_model: neither $SHARED/models/$1 nor a stand-in in $BUILD/test-models (run make test-models)" >&2
  return 1
}
model_is_shared() { [[ $1 == "$SHARED/models/"* ]]; }

# A small real model for process tests: stories260K from ../shared when
# present, else its stand-in tiny-llama.gguf (random weights, builtin
# tokenizer cut to 512 pieces, EOS, bytes and control tokens muted). When neither
# exists it prints a "not ok" line (on stderr: it runs inside $(...)).
small_model() {
  test_model stories260K.gguf || { echo "not ok - no test model (make test-models)" >&2; return 1; }
}
