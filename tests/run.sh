#!/usr/bin/env bash
# Runs every pagoda test: the cmocka unit programs built under $PAGODA_BUILD/tests
# and every integration script tests/integration/*.sh and tests/agents/*.sh (the
# real coding agents; helpers there are lib_*.sh and ensure.sh). Counts cases, prints one line per
# program, keeps full logs in $PAGODA_BUILD/test-logs, and ends with
# "N passed, M failed, K skipped". Exit status is non-zero when anything failed.
#
#   PAGODA_BUILD   build folder (default build)
#   TESTS          optional substring filter on test names
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${PAGODA_BUILD:-build}
export PAGODA_BUILD=$BUILD
LOGS=$BUILD/test-logs
mkdir -p "$LOGS"
# ASan: leaks are checked; OpenBLAS/OpenMP thread pools are not leaks of ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}

pass=0 fail=0 skip=0
failed_names=() failed_logs=()

run_one() { # name, log, command...
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "${PAGODA_TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1
  local rc=$?
  local dt=$((SECONDS - t0))
  # cmocka summary lines, or our own ok/not ok/skip lines.
  local p f s
  p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" | awk '{s+=$4} END{print s+0}')
  f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$log" | awk '{s+=$4} END{print s+0}')
  s=$(grep -cE '^(\[  SKIPPED \] |skip - )' "$log")
  p=$((p + $(grep -cE '^ok - ' "$log")))
  f=$((f + $(grep -cE '^not ok - ' "$log")))
  if [[ $rc -ne 0 && $f -eq 0 ]]; then f=1; fi
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  local status="ok"
  [[ $f -gt 0 ]] && status="FAIL" && failed_names+=("$name") && failed_logs+=("$log")
  printf '%-44s %-4s %3d passed %2d failed %2d skipped  (%ds)\n' "$name" "$status" "$p" "$f" "$s" "$dt"
  if [[ $f -gt 0 ]]; then
    echo "----- last lines of $log -----"
    tail -n 40 "$log" | sed 's/^/    /'
    echo "-----"
  fi
}

filter=${TESTS:-}
for t in $(find "$BUILD/tests" -type f -name 'test_*' -perm -u+x 2>/dev/null | sort); do
  name=${t#"$BUILD"/tests/}
  # a program left from a test since moved or removed (no source any more)
  [[ -e tests/$name.c ]] || continue
  [[ -n $filter && $name != *"$filter"* ]] && continue
  run_one "unit/$name" "$LOGS/$(echo "$name" | tr / _).log" "$t"
done
for t in tests/integration/*.sh; do
  [[ -e $t ]] || continue
  name=${t#tests/integration/}
  [[ -n $filter && $name != *"$filter"* ]] && continue
  run_one "integration/$name" "$LOGS/integration_${name%.sh}.log" bash "$t"
done
for t in tests/agents/*.sh; do
  [[ -e $t ]] || continue
  name=${t#tests/agents/}
  [[ $name == lib_*.sh || $name == ensure.sh ]] && continue
  [[ -n $filter && $name != *"$filter"* ]] && continue
  run_one "agents/$name" "$LOGS/agents_${name%.sh}.log" bash "$t"
done

if [[ ${#failed_names[@]} -gt 0 ]]; then
  # Again at the very end, short and with the most telling lines last, so
  # that a CI report keeping only the last ~20 lines of this output still
  # says what failed: per failed program the last lines of its log, then
  # its "not ok" lines (with cmocka's FAILED lines, sanitizer reports, node
  # errors, the grammar test's per-seed reasons and any "# why: " line a
  # script prints for the digest).
  echo "===== what failed (full logs in $LOGS) ====="
  for i in "${!failed_names[@]}"; do
    echo "--- ${failed_names[$i]}: last lines"
    tail -n 4 "${failed_logs[$i]}" | cut -c1-200 | sed 's/^/  | /'
    echo "--- ${failed_names[$i]}: what failed"
    grep -E '^not ok - |^\[  FAILED  \]|^\[  ERROR   \]|ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|^# node: |^# .* seed [0-9]+: |^# why: ' \
      "${failed_logs[$i]}" | head -n 8 | cut -c1-240 | sed 's/^/  /'
  done
  echo "failed: ${failed_names[*]}"
fi
echo "$pass passed, $fail failed, $skip skipped"
[[ $fail -eq 0 ]]
