#!/usr/bin/env bash
# Liveness that does not depend on step time (docs/RELIABILITY.md "Hang
# detection"). Real gateway + supervised workers on stories260K; the worker's
# test-only knobs make steps slow or wedged (worker.c, TEST ONLY):
#   PAGODA_TEST_STEP_SLEEP_MS=N   every step sleeps N ms first
#   PAGODA_TEST_STEP_WEDGE=FILE   the first step that finds FILE deletes it and
#                                 never returns
#  A. slow steps (5 s each, longer than 3 default heartbeat intervals) with
#     DEFAULT gateway flags: 16 concurrent requests all succeed, the worker is
#     never declared dead nor restarted, and its heartbeats stay fresh during
#     a step;
#  B. SIGSTOP: with --heartbeat-ms 200 on the gateway only, a local worker
#     (which gets the flag) and a hand-started one (which adopts the gateway's
#     interval) are both declared dead within 3 intervals (+ slack);
#  C. wedged step: heartbeats keep coming but no step completes; the progress
#     deadline (--progress-timeout-ms 2000) declares it hung, the supervisor
#     kills and restarts it, and the requests are re-dispatched and complete.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
MODEL=$(small_model)
HP=$(free_port)
ZP=$(free_port)
URL=http://127.0.0.1:$HP

# worker_pids MODEL: pids of MODEL's registered workers, from /health
worker_pids() {
  curl -s --max-time 5 "$URL/health" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(" ".join(str(w["pid"]) for w in j["workers"] if w["model"] == sys.argv[1] and w.get("id")))' "$1" 2>/dev/null
}
export -f worker_pids
export URL

# metric NAME_WITH_LABELS: its value (0 when absent)
metric() {
  curl -s "$URL/metrics" | awk -v k="$1" '$1 == k {print $2; f=1} END {if (!f) print 0}'
}

# request N OUT: one completion of 2 tokens, body in OUT, prints the status
request() {
  curl -s -o "$2" -w '%{http_code}' --max-time 300 "$URL/v1/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"m\",\"prompt\":\"Once upon a time $1\",\"max_tokens\":2,\"ignore_eos\":true,\"temperature\":0}"
}

# run_batch N TAG: N concurrent requests; sets N_OK (200 with finish length)
run_batch() {
  local n=$1 tag=$2 i pids=() t_batch=$SECONDS
  for ((i = 0; i < n; i++)); do
    (request "$i" "$TMP/$tag.$i.json" >"$TMP/$tag.$i.code") &
    pids+=($!)
  done
  wait "${pids[@]}"
  BATCH_S=$((SECONDS - t_batch))
  N_OK=0
  for ((i = 0; i < n; i++)); do
    if [[ $(cat "$TMP/$tag.$i.code") == 200 ]] &&
       grep -q '"finish_reason":"length"' "$TMP/$tag.$i.json"; then
      N_OK=$((N_OK + 1))
    else
      echo "# $tag request $i: HTTP $(cat "$TMP/$tag.$i.code"): $(head -c 300 "$TMP/$tag.$i.json")"
    fi
  done
}

stop_gateway() {
  stop_and_check "$1" "$2" "$3" 40 >/dev/null || true
}

# --- A. slow steps, default flags -------------------------------------------
PAGODA_TEST_STEP_SLEEP_MS=5000 spawn "$TMP/gw_a.log" "$GW" --listen "127.0.0.1:$HP" \
  --worker-endpoint "tcp://127.0.0.1:$ZP" --model "m=$MODEL" --max-seqs 16 --threads 1
GWA=$SPAWNED
if ! wait_for 60 bash -c '[[ -n $(worker_pids m) ]]'; then
  fail "A: the worker registered"; finish
fi
pid_a=$(worker_pids m)
(run_batch 16 a; echo "$N_OK $BATCH_S" >"$TMP/a.n_ok") &
batch=$!
# while the batch runs (steps of 5 s), sample /health (curl only: python
# start-up is slow on a loaded machine); judged afterwards
while kill -0 "$batch" 2>/dev/null; do
  curl -s --max-time 2 "$URL/health" >>"$TMP/a.health"
  echo >>"$TMP/a.health"
  sleep 0.5
done
wait "$batch"
# the oldest heartbeat seen, and the longest stall seen while busy (inside a step)
read -r max_age max_stall n_samples < <(python3 -c '
import json, sys
age = stall = n = 0
for line in open(sys.argv[1]):
    try:
        w = [w for w in json.loads(line)["workers"] if w["model"] == "m"][0]
    except Exception:
        continue
    n += 1
    age = max(age, w["last_heartbeat_ms_ago"])
    p = w.get("progress") or {}
    if p.get("busy"):
        stall = max(stall, p["stall_ms"])
print(age, stall, n)' "$TMP/a.health")
read -r n_ok dt <"$TMP/a.n_ok"
echo "# A: 16 requests with 5 s steps took $dt s; $n_samples /health samples: oldest heartbeat ${max_age} ms, longest stall while busy ${max_stall} ms"
check "A: 16 concurrent requests with 5 s steps and default flags: $n_ok/16 succeed" test "$n_ok" -eq 16
check "A: the worker was never restarted (pid $pid_a, restarts $(metric 'pagoda_worker_restarts_total{model_name="m"}'))" \
  test "$(worker_pids m)" = "$pid_a" -a "$(metric 'pagoda_worker_restarts_total{model_name="m"}')" = 0
check "A: no worker was lost" test "$(metric 'pagoda_workers_lost_total{model_name="m"}')" = 0
check "A: heartbeats kept flowing during 5 s steps (oldest ${max_age} ms < 2500)" test "$max_age" -lt 2500
check "A: /health showed the worker busy inside a step for > 2 s (${max_stall} ms) with fresh heartbeats" \
  test "$max_stall" -gt 2000
if grep -qE "removed|SIGKILL" "$TMP/gw_a.log"; then
  fail "A: gateway log has no removal or kill"; grep -E "removed|SIGKILL" "$TMP/gw_a.log" | head -5 | sed 's/^/# /'
else
  ok "A: gateway log has no removal or kill"
fi
stop_gateway gateway-A "$GWA" "$TMP/gw_a.log"

# --- B. SIGSTOP, heartbeat interval from the gateway --------------------------
HB=200
spawn "$TMP/gw_b.log" "$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
  --heartbeat-ms $HB --model "m=$MODEL" --max-seqs 4 --threads 1 --replica-grace 30
GWB=$SPAWNED
spawn "$TMP/solo_b.log" "$WK" --gateway "tcp://127.0.0.1:$ZP" --model "r=$MODEL" --threads 1
SOLO=$SPAWNED
if ! wait_for 60 bash -c '[[ -n $(worker_pids m) && -n $(worker_pids r) ]]'; then
  fail "B: both workers registered"; finish
fi
sleep 1 # the hand-started worker adopts the interval with the gateway's first heartbeat
pid_m=$(worker_pids m)
check "B: the local worker got --heartbeat-ms $HB (registered with it)" \
  grep -q "worker .*:$pid_m:.* registered: model m, .*heartbeat $HB ms" "$TMP/gw_b.log"
check "B: the hand-started worker adopted the gateway's $HB ms" \
  grep -q "heartbeat interval $HB ms: the gateway's" "$TMP/solo_b.log"
for who in m r; do
  pid=$(worker_pids $who)
  [[ $who == r ]] && pid=$SOLO
  t_stop=$(date +%s%N)
  kill -STOP "$pid"
  if wait_for 10 bash -c "[[ \$(worker_pids $who) != $pid ]]"; then
    # the time of the gateway's decision, from its log (polling adds noise)
    ms=$(python3 -c '
import datetime, re, sys
t_stop = int(sys.argv[1]) / 1e9
for line in open(sys.argv[2], errors="replace"):
    if re.search(r"worker \S+:%s:\S+ \(model %s\) removed: no message for" % (sys.argv[3], sys.argv[4]), line):
        t = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
        print(int((t.timestamp() - t_stop) * 1000))
        break
else:
    print(99999)' "$t_stop" "$TMP/gw_b.log" "$pid" "$who")
    # how soon depends on the machine; what must hold is the order: the
    # decision comes after the stop, and after the gateway's own count of 3
    # silent intervals (the 10 s wait above only catches a hang)
    silent=$(grep -oE "worker \S+:$pid:\S+ \(model $who\) removed: no message for [0-9]+ ms" "$TMP/gw_b.log" |
      grep -oE '[0-9]+ ms' | grep -oE '[0-9]+' | tail -1)
    echo "# B: $who (pid $pid) declared dead $ms ms after SIGSTOP, after ${silent:-?} ms of silence (3 intervals = $((3 * HB)) ms)"
    check "B: SIGSTOPped $who worker declared dead after the stop ($ms ms), for ${silent:-?} ms of silence >= 3 intervals" \
      test "$ms" -ge 0 -a "$ms" -ne 99999 -a "${silent:-0}" -ge $((3 * HB))
  else
    fail "B: SIGSTOPped $who worker declared dead"
  fi
done
kill -CONT "$SOLO" 2>/dev/null
check "B: the stopped local worker is killed and replaced" \
  wait_for 20 bash -c "p=\$(worker_pids m); [[ -n \$p && \$p != $pid_m ]]"
kill -TERM "$SOLO" 2>/dev/null
stop_gateway gateway-B "$GWB" "$TMP/gw_b.log"

# --- C. wedged step: progress deadline ---------------------------------------
touch "$TMP/wedge"
PAGODA_TEST_STEP_WEDGE=$TMP/wedge spawn "$TMP/gw_c.log" "$GW" --listen "127.0.0.1:$HP" \
  --worker-endpoint "tcp://127.0.0.1:$ZP" --heartbeat-ms $HB --progress-timeout-ms 2000 \
  --model "m=$MODEL" --max-seqs 4 --threads 1
GWC=$SPAWNED
if ! wait_for 60 bash -c '[[ -n $(worker_pids m) ]]'; then
  fail "C: the worker registered"; finish
fi
pid_c=$(worker_pids m)
run_batch 4 c
echo "# C: 4 requests across a wedged step took $BATCH_S s"
check "C: the wedge happened (the file was consumed)" test ! -e "$TMP/wedge"
check "C: the wedged worker was declared hung for lack of progress, not silence" \
  grep -q "removed: no step completed for" "$TMP/gw_c.log"
check "C: ... and killed as such" grep -q "(pid $pid_c) made no progress: SIGKILL" "$TMP/gw_c.log"
check "C: all 4 requests were re-dispatched and completed ($N_OK/4)" test "$N_OK" -eq 4
check "C: a new worker serves (restarts $(metric 'pagoda_worker_restarts_total{model_name="m"}'))" \
  test "$(metric 'pagoda_worker_restarts_total{model_name="m"}')" = 1 -a "$(worker_pids m)" != "$pid_c"
stop_gateway gateway-C "$GWC" "$TMP/gw_c.log"
finish
