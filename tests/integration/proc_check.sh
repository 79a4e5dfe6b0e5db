#!/usr/bin/env bash
# Self-test of tests/lib_proc.sh: stop_and_check must pass a process that exits 0 on
# SIGTERM and fail one that leaks (LeakSanitizer), hits undefined behaviour (UBSan),
# exits non-zero, or ignores SIGTERM. The processes are tiny C programs built here
# with gcc -fsanitize=address,undefined, so the check itself is shown able to fail —
# which is what makes "no leak reported" in the other scripts mean something.
source "$(dirname "$0")/../lib.sh"
source "$ROOT/tests/lib_proc.sh"

CC=${CC:-gcc}
cat >"$TMP/p.c" <<'EOF'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* usage: p MODE — waits for SIGTERM, then: clean | leak | ub | exit3 | ignore */
static volatile sig_atomic_t term;
static void on_term(int s) { (void)s; term = 1; }
static char *keep;
int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "clean";
    if (strcmp(mode, "ignore") == 0)
        signal(SIGTERM, SIG_IGN);
    else
        signal(SIGTERM, on_term);
    fprintf(stderr, "ready\n");
    while (!term)
        pause();
    if (strcmp(mode, "leak") == 0) {
        keep = malloc(4096);            /* reachable only through this pointer... */
        memset(keep, 1, 4096);
        keep = NULL;                    /* ...which we drop: a definite leak */
    } else if (strcmp(mode, "ub") == 0) {
        volatile int big = 2147483647;
        volatile int r = big + argc;    /* signed overflow */
        (void)r;
    } else if (strcmp(mode, "exit3") == 0) {
        return 3;
    }
    return 0;
}
EOF
if ! "$CC" -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -o "$TMP/p" "$TMP/p.c" 2>"$TMP/cc.log"; then
  skip "cannot build a sanitized test program with $CC: $(head -n 1 "$TMP/cc.log")"
  exit 0
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
unset LSAN_OPTIONS

# run MODE LIMIT → stop_and_check's lines (as comments) and its status in $RC
run() {
  local out
  out=$(
    N_FAIL=0
    spawn "$TMP/$1.log" "$TMP/p" "$1"
    wait_for 5 grep -q ready "$TMP/$1.log"
    stop_and_check "p $1" "$SPAWNED" "$TMP/$1.log" "$2" >"$TMP/$1.out"
    echo "$?"
  )
  RC=$out
  sed 's/^/#   /' "$TMP/$1.out"
}

run clean 10
check "a process that exits 0 on SIGTERM with a clean log passes" test "$RC" -eq 0
run leak 10
check "a leak (LeakSanitizer at exit) fails stop_and_check" \
  bash -c "[[ $RC -ne 0 ]] && grep -qE 'not ok - p leak exits [1-9]' '$TMP/leak.out' && grep -q 'LeakSanitizer' '$TMP/leak.out'"
run ub 10
check "undefined behaviour (UBSan runtime error) fails stop_and_check" \
  bash -c "[[ $RC -ne 0 ]] && grep -q 'runtime error' '$TMP/ub.out'"
run exit3 10
check "a non-zero exit status fails stop_and_check" \
  bash -c "[[ $RC -ne 0 ]] && grep -q 'exits 3 on SIGTERM' '$TMP/exit3.out'"
run ignore 2
check "a process that ignores SIGTERM is killed after the limit and fails" \
  bash -c "[[ $RC -ne 0 ]] && grep -q 'still running 2 s after SIGTERM' '$TMP/ignore.out'"
finish
