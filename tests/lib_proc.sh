# tests/lib_proc.sh — process checks for integration scripts (source it after tests/lib.sh).
#
# Under `make check SANITIZE=1` pagoda-gateway and pagoda-worker are ASan+UBSan builds:
# a leak is reported by LeakSanitizer when the process *exits*, and then the exit status
# is not 0 (1 under ASan, 23 for standalone LSan). A test that kills its processes with -9, or
# never looks at their exit status and logs, cannot see leaks. So: stop each process with
# SIGTERM (pagoda exits 0 after a clean teardown), wait for it, and check both its status
# and its log. Supervised workers write into the gateway's log (they inherit its stderr),
# so checking the gateway's log covers them too.
#
#   stop_and_check NAME PID LOG [SECONDS]
#       SIGTERM, wait up to SECONDS (default 30); prints
#         ok - NAME exits 0 on SIGTERM ...      or not ok (status, timeout → SIGKILL)
#         ok - NAME: no sanitizer report in LOG  or not ok with the report's first lines
#       PID must be a child of this shell (started with `spawn`). Returns 0 when both held.
#   sanitizer_report LOG    prints the lines of a sanitizer report in LOG (none → returns 1)
#   alive PID               the process exists and is not a zombie
#   rss_kb PID              VmRSS of PID in KiB (0 when gone)
#   is_sanitized BIN        BIN is linked with ASan (so RSS and timing bounds differ)

# Patterns of ASan, LSan, UBSan, TSan and MSan reports. "runtime error:" is UBSan's line
# prefix; with halt_on_error=1 (tests/run.sh) UBSan also makes the exit status non-zero.
SANITIZER_PATTERN='ERROR: (Address|Leak|Thread|Memory)Sanitizer|SUMMARY: (Address|Leak|Thread|Memory|UndefinedBehavior)Sanitizer|runtime error: |Sanitizer:DEADLYSIGNAL|LeakSanitizer has encountered'

sanitizer_report() {
  [[ -f $1 ]] || return 1
  grep -nE -A 12 "$SANITIZER_PATTERN" "$1" | head -n 40
  grep -qE "$SANITIZER_PATTERN" "$1"
}

# One read of the state: a test of "readable" then a grep for Z raced with bash reaping the
# zombie in between (grep's "no such file" then counted as alive, and stop_and_check reported
# a process that had just exited cleanly as hanging).
alive() {
  local st
  st=$(awk '/^State:/ {print $2; exit}' "/proc/$1/status" 2>/dev/null)
  [[ -n $st && $st != Z && $st != X ]]
}

rss_kb() {
  local v
  v=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null)
  echo "${v:-0}"
}

is_sanitized() {
  ldd "$1" 2>/dev/null | grep -q 'libasan' || grep -qa '__asan_init' "$1" 2>/dev/null
}

stop_and_check() {
  local name=$1 pid=$2 log=$3 limit=${4:-30}
  local ok_all=0 rc
  if ! alive "$pid"; then
    wait "$pid" 2>/dev/null
    rc=$?
    fail "$name (pid $pid) had already exited (status $rc) before SIGTERM"
    ok_all=1
  else
    kill -TERM "$pid" 2>/dev/null
    local deadline=$((SECONDS + limit))
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    if alive "$pid"; then
      # where it hangs, for the report (gdb is optional)
      if command -v gdb >/dev/null; then
        timeout 20 gdb -p "$pid" -batch -ex 'thread apply all bt' 2>/dev/null |
          grep -E '^(Thread|#)' | head -n 60 | sed 's/^/#   /'
      fi
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      fail "$name (pid $pid) still running ${limit} s after SIGTERM: killed"
      ok_all=1
    else
      wait "$pid" 2>/dev/null
      rc=$?
      if [[ $rc -eq 0 ]]; then
        ok "$name exits 0 on SIGTERM"
      else
        fail "$name exits $rc on SIGTERM, want 0 (a sanitizer report makes it 1, or 23 for standalone LSan)"
        ok_all=1
      fi
    fi
  fi
  local rep
  if rep=$(sanitizer_report "$log"); then
    fail "$name: sanitizer report in $(basename "$log")"
    sed 's/^/#   /' <<<"$rep"
    ok_all=1
  else
    ok "$name: no sanitizer report in its log"
  fi
  return $ok_all
}
