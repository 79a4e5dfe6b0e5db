#!/usr/bin/env bash
# harness.sh — the test harness's own promises, checked on itself:
#
# 1. free_port (tests/lib.sh, tests/support/tap.py) never gives one script
#    the same port twice, and gives ports below the kernel's ephemeral range
#    (when that range leaves room below it), where no outgoing connection's
#    port can land; every port it gives binds at the moment it is given.
# 2. tests/run.sh, on a made tree with one failing script that prints its
#    failure and then 60 lines of noise (and without the TESTS filter this
#    script may run under), exits non-zero and ends with a digest: the
#    failure and the script's "# why: " line are among the last 20 lines of
#    its output (a CI report may keep only those).
source "$(dirname "$0")/../lib.sh"

# 1. free_port
ports=()
for _ in $(seq 1 60); do ports+=("$(free_port)"); done
n_unique=$(printf '%s\n' "${ports[@]}" | sort -u | wc -l)
check "free_port: 60 calls in one script, 60 different ports (got $n_unique)" test "$n_unique" -eq 60
low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 0)
if ((low - 10000 >= 1000)); then
  above=$(printf '%s\n' "${ports[@]}" | awk -v l="$low" '$1 >= l || $1 < 10000' | wc -l)
  check "free_port: every port in [10000, $low), below the ephemeral range ($above outside)" test "$above" -eq 0
else
  skip "the ephemeral range starts at $low: no room below it, free_port falls back to the kernel's pick"
fi
bindable=$(python3 -c '
import socket, sys
p = int(sys.argv[1]); s = socket.socket()
try:
    s.bind(("127.0.0.1", p)); print("yes")
except OSError:
    print("no")
' "$(free_port)")
check "free_port: the port given binds at once" test "$bindable" = yes

# 2. the digest at the end of tests/run.sh
tree=$TMP/tree
mkdir -p "$tree/tests/integration" "$tree/build/tests"
cp "$ROOT/tests/run.sh" "$tree/tests/run.sh"
cat >"$tree/tests/integration/zz_made.sh" <<'EOF'
#!/usr/bin/env bash
echo "ok - something that works"
echo "# why: the made reason"
echo "not ok - the made failure"
for i in $(seq 1 60); do echo "noise line $i"; done
exit 1
EOF
cat >"$tree/tests/integration/aa_fine.sh" <<'EOF'
#!/usr/bin/env bash
echo "ok - fine"
EOF
(cd "$tree" && env -u TESTS PAGODA_BUILD=build bash tests/run.sh) >"$TMP/run.out" 2>&1
rc=$?
check "run.sh on a made tree with a failing script exits non-zero" test "$rc" -ne 0
check "its last line counts the failure" bash -c "tail -n 1 '$TMP/run.out' | grep -q '^2 passed, 1 failed, 0 skipped$'"
check "the failure is among its last 20 lines" bash -c "tail -n 20 '$TMP/run.out' | grep -q 'not ok - the made failure'"
check "the script's '# why: ' line is among its last 20 lines" bash -c "tail -n 20 '$TMP/run.out' | grep -q '# why: the made reason'"
check "the passing script is not in the digest" bash -c "! sed -n '/===== what failed/,\$p' '$TMP/run.out' | grep -q aa_fine"
if [[ $N_FAIL -gt 0 ]]; then sed 's/^/# /' "$TMP/run.out" | tail -n 30; fi
finish
