#!/usr/bin/env bash
# smoke.sh BUILD_DIR SECONDS — run every libFuzzer target BUILD_DIR/fuzz_<name>
# for SECONDS on a scratch copy of its seed corpus tests/fuzz/corpus/<name>/
# (new inputs found on the way are not written into the repository).
# Prints executions per target; exits non-zero when any target crashes, leaks
# or times out, and keeps the crashing input under BUILD_DIR/fuzz-artifacts/.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:?usage: smoke.sh BUILD_DIR SECONDS}
SECS=${2:?usage: smoke.sh BUILD_DIR SECONDS}
ART=$BUILD/fuzz-artifacts
mkdir -p "$ART"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

n_fail=0 n_run=0
for f in "$BUILD"/fuzz_*; do
  [[ -x $f && -f $f ]] || continue
  name=$(basename "$f"); name=${name#fuzz_}
  seeds=tests/fuzz/corpus/$name
  mkdir -p "$WORK/$name"
  if [[ -d $seeds ]]; then cp -r "$seeds"/. "$WORK/$name"/; else echo "warning: no seed corpus $seeds"; fi
  log=$WORK/$name.log
  "$f" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$ART/${name}-" "$WORK/$name" >"$log" 2>&1
  rc=$?
  n_run=$((n_run + 1))
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  if [[ $rc -ne 0 ]] || grep -qE '^==[0-9]+==ERROR|deadly signal|SUMMARY: (Address|Undefined|Leak)' "$log"; then
    echo "not ok - fuzz_$name: crashed after ${execs:-?} executions (exit $rc); artifacts in $ART"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -n 8 | sed 's/^/    /'
    n_fail=$((n_fail + 1))
  else
    echo "ok - fuzz_$name: ${execs:-?} executions in ${SECS}s, ${cov:-cov: ?}, no crash"
  fi
done
if [[ $n_run -eq 0 ]]; then
  echo "not ok - no fuzz targets in $BUILD (build them with: make fuzz)"
  exit 1
fi
exit $((n_fail > 0))
