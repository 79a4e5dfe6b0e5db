#!/usr/bin/env bash
# Hostile HTTP against real processes: pagoda-gateway (with an API keys file) and one
# pagoda-worker serving a small real model, over real HTTP and ZeroMQ.
#   1. the table tests/integration/hostile_http.cases: ~130 bad (and a few edge-but-valid)
#      requests — malformed/truncated JSON, wrong types, nulls, 1e400, 10 MB strings,
#      100k-deep nesting, invalid UTF-8, bad roles, unknown model, prompt past the
#      context, bad auth, bad routes/methods, oversized body, broken HTTP framing. Each
#      must get its status and an OpenAI-shaped error body, while a well-formed request
#      sent at the same moment succeeds;
#   2. slowloris: SLOW_CONNS connections drip one header byte per second for
#      SLOW_SECONDS; well-formed requests keep succeeding meanwhile, and the gateway
#      should close the dripping connections (header deadline);
#   3. idle flood: IDLE_CONNS (2000) connections opened and left idle; a well-formed
#      request must still be served;
#   4. afterwards both processes are alive and serving, and exit 0 on SIGTERM with no
#      sanitizer report (tests/lib_proc.sh) — under `make check SANITIZE=1` that is the
#      leak check.
# Known gaps (below) print "skip - KNOWN GAP ..." with the measured evidence instead of
# failing; PAGODA_STRICT=1 turns them into failures. A gap that is fixed prints ok.
source "$(dirname "$0")/../lib.sh"
source "$ROOT/tests/lib_proc.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
MODEL_FILE=$(small_model)
[[ -f $MODEL_FILE ]] || { fail "no small model (pagoda-mkmodel failed?)"; finish; }

SLOW_CONNS=${SLOW_CONNS:-20}
SLOW_SECONDS=${SLOW_SECONDS:-12}
HEADER_TIMEOUT=${HEADER_TIMEOUT:-5} # s: the gateway's --header-timeout
# s: a connection without complete headers by then must be closed (the driver notices
# the close at its next byte, up to 1 s later)
SLOW_LIMIT=${SLOW_LIMIT:-$((HEADER_TIMEOUT + 2))}
IDLE_CONNS=${IDLE_CONNS:-2000}

# Known gaps of the gateway today: a check or table case named here reports skip (with
# the evidence) instead of not ok. None are open (slowloris_deadline, idle_flood,
# messages_1025 and requests_settle were fixed; see docs/RELIABILITY.md).
KNOWN_GAPS=${KNOWN_GAPS-""}
gap() { # name, message: fail, or skip when the gap is known and PAGODA_STRICT is unset
  if [[ " $KNOWN_GAPS " == *" $1 "* && -z ${PAGODA_STRICT:-} ]]; then
    skip "KNOWN GAP $1: $2"
  else
    fail "$1: $2"
  fi
}

# The file holds SHA-256 digests only; the secrets stay in this script.
KEY=hostile-normal-secret
"$GW" --hash-key hostile:normal --secret "$KEY" | grep -v '^#' >"$TMP/keys.txt"
"$GW" --hash-key ops:high:admin --secret hostile-admin-secret | grep -v '^#' >>"$TMP/keys.txt"

ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
HP=$(free_port); ZP=$(free_port)
URL=http://127.0.0.1:$HP
spawn "$TMP/gateway.log" "$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
  --keys "$TMP/keys.txt" --heartbeat-ms 200 --header-timeout "$HEADER_TIMEOUT" \
  --cors-origin http://good.example
GPID=$SPAWNED
spawn "$TMP/worker.log" "$WK" --gateway "tcp://127.0.0.1:$ZP" --model "m=$MODEL_FILE" \
  --max-seqs 8 --heartbeat-ms 200
WPID=$SPAWNED
ready() { curl -sf "$URL/health" | grep -q '"state":"ready"'; }
if ! wait_for 30 ready; then
  fail "gateway + worker ready on $URL"
  tail -n 20 "$TMP"/*.log | sed 's/^/# /'
  finish
fi
N_CTX=$(curl -s "$URL/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["workers"][0]["n_ctx"])')
ok "gateway + worker ready (n_ctx $N_CTX, model $(basename "$MODEL_FILE"))"

# seconds per case; ASan builds copy request bodies slowly (a 17 MiB body takes ~12 s)
CASE_TIMEOUT=10
is_sanitized "$GW" && CASE_TIMEOUT=60
export PAGODA_URL=$URL PAGODA_KEY=$KEY PAGODA_ADMIN_KEY=hostile-admin-secret PAGODA_MODEL=m PAGODA_N_CTX=$N_CTX PAGODA_KNOWN_GAPS=$KNOWN_GAPS PAGODA_CASE_TIMEOUT=$CASE_TIMEOUT
DRIVER=$ROOT/tests/integration/hostile_http.py

# --- 1. the table ----------------------------------------------------------------------
python3 "$DRIVER" table "$ROOT/tests/integration/hostile_http.cases" | tee "$TMP/table.out"
n_rows=$(grep -cE '^(ok|not ok) - hostile ' "$TMP/table.out")
n_gap=$(grep -c '^skip - KNOWN GAP hostile ' "$TMP/table.out")
N_FAIL=$((N_FAIL + $(grep -c '^not ok' "$TMP/table.out")))
check "table ran completely ($n_rows + $n_gap known-gap cases)" test $((n_rows + n_gap)) -ge 100

# --- 2. slowloris ------------------------------------------------------------------------
python3 "$DRIVER" slowloris "$SLOW_CONNS" "$SLOW_SECONDS" >"$TMP/slow.out"
read -r _ _ g_ok g_fail g_why < <(grep '^measure slowloris_good' "$TMP/slow.out")
read -r _ _ n_closed n_total t_last < <(grep '^measure slowloris_closed' "$TMP/slow.out")
check "slowloris: $SLOW_CONNS dripping connections, well-formed requests still served (${g_ok:-0} ok, ${g_fail:-?} failed ${g_why:-})" \
  test "${g_fail:-1}" -eq 0 -a "${g_ok:-0}" -ge 1
if [[ ${n_closed:-0} -eq ${n_total:-1} ]] && awk "BEGIN{exit !(${t_last:-999} <= $SLOW_LIMIT)}"; then
  ok "slowloris: the gateway closed all $n_total dripping connections (last after ${t_last} s, limit ${SLOW_LIMIT} s)"
else
  gap slowloris_deadline "the gateway closed ${n_closed:-?} of ${n_total:-?} connections that sent one header byte per second for ${SLOW_SECONDS} s (want all within ${SLOW_LIMIT} s; libmicrohttpd's timeout is per idle period, and each byte resets it)"
fi

# --- 3. idle flood ------------------------------------------------------------------------
python3 "$DRIVER" idle "$IDLE_CONNS" >"$TMP/idle.out"
if grep -q '^measure idle_skipped' "$TMP/idle.out"; then
  skip "idle flood: $(grep '^measure idle_skipped' "$TMP/idle.out" | cut -d' ' -f3) (cannot open $IDLE_CONNS sockets)"
else
  read -r _ _ i_res i_dt < <(grep '^measure idle_good_request' "$TMP/idle.out")
  read -r _ _ i_open < <(grep '^measure idle_still_open' "$TMP/idle.out")
  read -r _ _ i_after < <(grep '^measure idle_after_close' "$TMP/idle.out")
  if [[ $i_res == ok ]]; then
    ok "idle flood: $IDLE_CONNS idle connections open, a well-formed request is served in ${i_dt} s"
  else
    gap idle_flood "with $IDLE_CONNS idle connections open (${i_open:-?} still open after the probe) a well-formed request got no answer: $i_res (libmicrohttpd's default connection limit is FD_SETSIZE-4 = 1020)"
  fi
  check "idle flood over: the gateway serves again (${i_after:-?})" test "${i_after:-x}" = ok
fi

# --- 4. nothing left behind: every request finished on both sides --------------------------
settled() { # /health: nothing queued, running or assigned, and the worker idle
  curl -s "$URL/health" | python3 -c '
import json, sys
j = json.load(sys.stdin)
m = j["models"]["m"]
w = j["workers"][0]
ok = m["queued"] == 0 and m["running"] == 0 and w["assigned"] == 0 and w["load"]["running"] == 0 and w["load"]["waiting"] == 0
print("queued %d running %d assigned %d worker-running %d" % (m["queued"], m["running"], w["assigned"], w["load"]["running"]))
sys.exit(0 if ok else 1)'
}
if wait_for 5 settled; then
  ok "all requests settled: $(settled)"
else
  gap requests_settle "5 s after the last request the gateway still has: $(settled)"
fi

# --- 5. still alive and clean ----------------------------------------------------------------
check "gateway still running after all of it" alive "$GPID"
check "worker still running after all of it (never crashed)" alive "$WPID"
check "a well-formed request succeeds at the end" python3 "$DRIVER" good
check "worker registered once (no reconnect during the abuse)" \
  test "$(grep -c 'registered with gateway' "$TMP/worker.log")" -eq 1
stop_and_check pagoda-gateway "$GPID" "$TMP/gateway.log"
stop_and_check pagoda-worker "$WPID" "$TMP/worker.log"

if [[ $N_FAIL -gt 0 ]]; then for f in "$TMP"/*.log; do echo "# --- $f"; tail -n 30 "$f" | sed 's/^/# /'; done; fi
finish
