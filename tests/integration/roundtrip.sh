#!/usr/bin/env bash
# The first real round trip: pagoda-gateway and pagoda-worker as black boxes
# over real ZeroMQ and real HTTP.
#   - a worker registers and /health lists it alive with its model;
#   - heartbeats flow both ways (it stays listed for many intervals with a
#     fresh last heartbeat, and never reconnects);
#   - kill -9: /health drops it within 3 heartbeat intervals;
#   - SIGSTOP (connection still open, silence only): dropped by the liveness
#     counter within 3 intervals; after SIGCONT it registers again;
#   - gateway restart: the worker finds the new gateway and registers again;
#   - unknown route → 404, wrong method → 405, both OpenAI-shaped JSON;
#   - SIGTERM: gateway and worker exit 0.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
if [[ ! -x $GW || ! -x $WK ]]; then
  fail "pagoda-gateway / pagoda-worker not built in $BUILD"
  finish
fi

HB=200                      # heartbeat interval (ms) on both sides
LIMIT=$((3 * HB))           # 3 silent heartbeat intervals: the gateway's rule
# No check here bounds how *soon* something happens (that is the machine's
# speed, tests/gateway/test_gateway.c and the chaos test print the numbers):
# each checks an order (removed after LIMIT ms of silence, not before) and a
# deadline that only catches a hang.
HANG_MS=60000
HP=$(free_port)
ZP=$(free_port)
URL=http://127.0.0.1:$HP
MODEL=$(small_model)

now_ms() { date +%s%3N; }
health() { curl -s --max-time 2 "$URL/health"; }
# jq-free JSON checks: py 'python expression over j' < json
py() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
listed() { health | py "any(w['id']=='$1' for w in j['workers'])"; }
listed_model() { health | py "any(w['model']=='tiny' and w['pid']==$1 for w in j['workers'])"; }
not_listed() { ! health | grep -q "\"$1\""; }
replica_of() { # pid → replica id from /health
  health | python3 -c "import json,sys; j=json.load(sys.stdin); print(next((w['id'] for w in j['workers'] if w['pid']==$1), ''))"
}
# Polls until $1 is gone from /health; prints "LO HI": ms since $2 at which the last
# poll that still listed it started (it was removed after LO) and the first poll that
# did not ended (removed before HI); HI is 999999 when it was still listed after
# HANG_MS. Only HI's lower side is checked (a removal cannot come before its cause).
wait_gone() {
  local id=$1 t0=$2 deadline=$(( $(now_ms) + HANG_MS )) lo=0 ts
  while (( $(now_ms) < deadline )); do
    ts=$(now_ms)
    if ! health | grep -q "\"$id\""; then echo "$lo $(( $(now_ms) - t0 ))"; return 0; fi
    lo=$(( ts - t0 ))
    sleep 0.01
  done
  echo "$lo 999999"
  return 1
}
start_gateway() {
  spawn "$TMP/gateway$1.log" "$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
    --heartbeat-ms $HB --log-level debug
  GPID=$SPAWNED
}
start_worker() {
  spawn "$TMP/worker$1.log" "$WK" --gateway "tcp://127.0.0.1:$ZP" --model "tiny=$MODEL" \
    --heartbeat-ms $HB --capacity 4
  WPID=$SPAWNED
}
show_logs() { for f in "$TMP"/*.log; do echo "# --- $f"; sed 's/^/# /' "$f" | tail -n 30; done; }

# --- gateway up, no workers ------------------------------------------------
start_gateway 1
check "gateway answers /health on 127.0.0.1:$HP" wait_for 10 health
check "/health without workers: status no_workers, empty list" \
  bash -c "curl -s $URL/health | python3 -c \"import json,sys; j=json.load(sys.stdin); sys.exit(0 if j['status']=='no_workers' and j['workers']==[] else 1)\""

# --- worker registers ------------------------------------------------------
start_worker A
WA=$WPID
check "worker A registers: /health lists model tiny with its pid" wait_for 10 listed_model "$WA"
RA=$(replica_of "$WA")
check "replica id is host:pid:random ($RA)" bash -c "[[ '$RA' =~ ^[^:]+:$WA:[0-9a-f]{8}$ ]]"
check "worker A reports capacity, state ready, liveness and load" bash -c \
  "curl -s $URL/health | python3 -c \"import json,sys; w=[w for w in json.load(sys.stdin)['workers'] if w['pid']==$WA][0]; sys.exit(0 if w['capacity']==4 and w['state']=='ready' and 1<=w['liveness']<=3 and w['load'] is not None and w['load']['free_slots']==4 else 1)\""

# --- heartbeats both ways: listed for 8 intervals -----------------------------
# (the gateway drops a worker silent for 3 intervals, so staying listed across
# 8 of them means its heartbeats arrive; how fresh the last one is at a poll
# is the machine's speed, only printed)
fresh=0
for i in $(seq 1 8); do
  sleep 0.2
  listed "$RA" && fresh=$((fresh + 1))
done
echo "# worker A's last heartbeat $(health | python3 -c "import json,sys; print(next((w['last_heartbeat_ms_ago'] for w in json.load(sys.stdin)['workers'] if w['id']=='$RA'), '?'))") ms ago (interval $HB ms)"
check "worker A stays listed for 8 intervals ($fresh/8)" test "$fresh" -eq 8
check "worker A never lost the gateway (gateway heartbeats arrive)" \
  bash -c "! grep -q 'gateway silent' '$TMP/workerA.log' && [[ \$(grep -c 'registered with gateway' '$TMP/workerA.log') -eq 1 ]]"

# --- kill -9: gone within 3 intervals ----------------------------------------------
t0=$(now_ms)
kill -9 "$WA"
wait "$WA" 2>/dev/null
read -r lo hi < <(wait_gone "$RA" "$t0")
check "kill -9 worker A: gone from /health ${lo}-${hi} ms after the kill (deadline ${HANG_MS} ms only catches a hang)" \
  test "$hi" -ne 999999

# --- a new worker appears ----------------------------------------------------
start_worker B
WB=$WPID
check "new worker B registers" wait_for 10 listed_model "$WB"
RB=$(replica_of "$WB")
check "worker B has another replica id" test -n "$RB" -a "$RB" != "$RA"

# --- SIGSTOP: silence only, the liveness counter must notice -----------------------
sleep 0.3
t0=$(now_ms)
kill -STOP "$WB"
read -r lo hi < <(wait_gone "$RB" "$t0")
check "stopped worker B: dropped for silence ${lo}-${hi} ms after SIGSTOP (deadline ${HANG_MS} ms only catches a hang)" \
  test "$hi" -ne 999999
check "...and not before ~2 intervals (it was the liveness counter, not a disconnect; gone by ${hi} ms)" \
  test "$hi" -ge $((HB + HB / 2))
gw_ms=$(grep -oE "$RB \(model tiny\) removed: no message for [0-9]+ ms" "$TMP/gateway1.log" | grep -oE '[0-9]+ ms' | grep -oE '[0-9]+' | tail -1)
# the gateway drops it at its first tick past 3 intervals of silence: ≥ LIMIT exactly
# (how long past it is the loaded host's tick delay, so it is only printed)
check "gateway measured ${gw_ms:-?} ms of silence before dropping it (≥ ${LIMIT} ms)" \
  test "${gw_ms:-0}" -ge $LIMIT
sleep 0.5                   # stopped for > 3 intervals in all
kill -CONT "$WB"
# Either path is right here: the worker reads the gateway's queued heartbeats,
# sends its own and gets ERROR 409 → REGISTER; or (when ZeroMQ's I/O thread
# has not yet moved them from the kernel) it judges the gateway silent and
# reconnects. tests/gateway/test_gateway.c checks the 409 answer directly.
check "resumed worker B registers again" wait_for 10 listed "$RB"

# --- gateway restart: the worker comes back by itself ------------------------
kill -9 "$GPID"
wait "$GPID" 2>/dev/null
n_silent=$(grep -c 'gateway silent' "$TMP/workerB.log")
check "worker B notices the gateway is gone (silent for 3 intervals) and reconnects" \
  wait_for 5 bash -c "[[ \$(grep -c 'gateway silent' '$TMP/workerB.log') -gt $n_silent ]]"
sleep 0.5                   # let it back off at least once
start_gateway 2
check "restarted gateway answers /health" wait_for 10 health
check "worker B finds the restarted gateway and registers again" wait_for 15 listed "$RB"

# --- HTTP errors ---------------------------------------------------------------
code=$(curl -s -o "$TMP/404.json" -w '%{http_code}' "$URL/v1/nothing")
check "unknown route → 404 (got $code)" test "$code" = 404
check "404 body is {\"error\":{message,type,param,code}}" py \
  "set(j['error'])=={'message','type','param','code'} and j['error']['type']=='invalid_request_error' and j['error']['code']=='not_found' and j['error']['param'] is None" <"$TMP/404.json"
code=$(curl -s -o "$TMP/405.json" -D "$TMP/405.hdr" -w '%{http_code}' -X POST "$URL/health")
check "POST /health → 405 (got $code) with an Allow header" \
  bash -c "[[ $code = 405 ]] && grep -qi '^Allow: GET' '$TMP/405.hdr'"
check "405 body is OpenAI-shaped" py "j['error']['code']=='method_not_allowed'" <"$TMP/405.json"

# --- clean exits -----------------------------------------------------------------
kill -TERM "$WB"
wait "$WB"
rc=$?
check "worker exits 0 on SIGTERM (got $rc)" test "$rc" -eq 0
kill -TERM "$GPID"
wait "$GPID"
rc=$?
check "gateway exits 0 on SIGTERM (got $rc)" test "$rc" -eq 0
check "no malformed-message warnings in the logs" bash -c "! grep -qi 'malformed' '$TMP'/*.log"

[[ $N_FAIL -gt 0 || -n ${SHOW_LOGS:-} ]] && show_logs
finish
