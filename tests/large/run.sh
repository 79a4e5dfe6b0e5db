#!/usr/bin/env bash
# tests/large/run.sh — `make test-large`: the long tests at real model size
# (tests/large/*.sh other than this runner), counted like tests/run.sh.
# PAGODA_BUILD: build directory (default build). TESTS: substring filter.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${PAGODA_BUILD:-build}
LOGS=$BUILD/test-logs
mkdir -p "$LOGS"
pass=0 fail=0 skip=0
failed_logs=()
for t in tests/large/*.sh; do
  name=${t#tests/large/}
  [[ $name == run.sh ]] && continue
  [[ -n ${TESTS:-} && $name != *"$TESTS"* ]] && continue
  t0=$SECONDS
  log=$LOGS/large_${name%.sh}.log
  timeout --kill-after=10 "${PAGODA_LARGE_TIMEOUT:-3600}" env PAGODA_BUILD="$BUILD" bash "$t" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  p=$(grep -cE '^ok - ' "$log"); f=$(grep -cE '^not ok - ' "$log"); s=$(grep -cE '^skip - ' "$log")
  ((rc != 0 && f == 0)) && f=1
  ((f)) && failed_logs+=("$log")
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  printf '%-44s %-4s %3d passed %2d failed %2d skipped  (%ds)\n' "large/$name" \
    "$( ((f)) && echo FAIL || echo ok)" "$p" "$f" "$s" $((SECONDS - t0))
done
# this run's failures again at the end (a CI report may keep only the last
# lines; the folder may hold logs of earlier runs)
if ((fail)); then
  grep -hE '^not ok - |^# why: ' "${failed_logs[@]}" | head -n 10 | cut -c1-240 | sed 's/^/  /'
fi
echo "$pass passed, $fail failed, $skip skipped"
((fail == 0))
