#!/usr/bin/env bash
# Soak: mixed traffic against pagoda-gateway supervising one real pagoda-worker, for a
# bounded time, then checks that nothing was lost or leaked.
#
#   SOAK_SECONDS=600 bash tests/soak/soak.sh      # a long run (default 120 s)
#   make test runs the 20 s version: tests/integration/soak_short.sh
#
# Traffic (tests/soak/soak.py): chat + completions + /v1/batch, streaming and not, all
# three tiers through three API keys, random client aborts, stop strings, seeded probes
# re-sent while the batch around them changes; a small KV pool (--kv-blocks) so the
# scheduler must preempt.
# Checks at the end:
#   - every request is accounted for: completed, cancelled (by us) or refused with an
#     OpenAI-shaped 429; none failed (wrong answer, cut stream, reset, timeout) or hung;
#   - the gateway agrees: every request it accepted finished (pagoda_requests_total =
#     Σ vllm:request_success_total), and once idle nothing is queued, running or assigned;
#   - every KV block is free or cached once idle (worker load kv_blocks_used = 0 and
#     vllm:kv_cache_usage_perc = 0);
#   - seeded probes gave the same text every time; stop strings never leak into output;
#   - no worker restart (same pid, pagoda_worker_restarts_total = 0);
#   - RSS growth after warm-up below RSS_BOUND_KB for gateway and worker (not under ASan,
#     whose quarantine keeps freed memory);
#   - both exit cleanly on SIGTERM with no sanitizer report (tests/lib_proc.sh).
source "$(dirname "$0")/../lib.sh"
source "$ROOT/tests/lib_proc.sh"

SOAK_SECONDS=${SOAK_SECONDS:-120}
WARM_SECONDS=${WARM_SECONDS:-$(( SOAK_SECONDS / 4 < 15 ? (SOAK_SECONDS / 4 > 3 ? SOAK_SECONDS / 4 : 3) : 15 ))}
CLIENTS=${CLIENTS:-6}
RSS_BOUND_KB=${RSS_BOUND_KB:-16384}   # growth allowed after warm-up, each process
KV_BLOCKS=${KV_BLOCKS:-20}            # 8 seqs of up to ~6 blocks want 48: the scheduler must preempt

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
MODEL_FILE=$(small_model)

for k in high normal low; do
  "$GW" --hash-key "soak-$k:$k" --secret "soak-secret-$k" | grep -v '^#' >>"$TMP/keys.txt"
done
export KEY_HIGH=soak-secret-high KEY_NORMAL=soak-secret-normal KEY_LOW=soak-secret-low
# /metrics needs a key flagged metrics (or admin) when keys are on (docs/SECURITY.md)
"$GW" --hash-key "soak-prom:normal:metrics" --secret soak-secret-prom | grep -v '^#' >>"$TMP/keys.txt"

HP=$(free_port); ZP=$(free_port)
URL=http://127.0.0.1:$HP
# --kv-type f32: the seeded probes must agree bit for bit whatever the batch around
# them; stories260K has float weights (sgemm, whose rounding depends on the batch
# shape at ~1e-7), and an f16 cache turns that into an occasional half-ulp that moved
# a sampled token (docs/KV_CACHE.md#element-type). Also checks that the gateway
# forwards the setting to its supervised worker.
spawn "$TMP/gateway.log" "$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
  --keys "$TMP/keys.txt" --model "m=$MODEL_FILE" --max-seqs 8 --kv-blocks "$KV_BLOCKS" --heartbeat-ms 200 \
  --kv-type f32
GPID=$SPAWNED
health() { curl -s --max-time 5 "$URL/health"; }
hq() { health | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)" 2>/dev/null; }
metric() { # sum of a metric family's samples (optionally filtered by a label substring)
  curl -s --max-time 5 -H "Authorization: Bearer soak-secret-prom" "$URL/metrics" | awk -v n="$1" -v f="${2:-}" \
    '$1 ~ "^"n"([{]|$)" && index($1, f) {s += $NF} END {printf "%.6g\n", s + 0}'
}
if ! wait_for 30 bash -c "curl -sf '$URL/health' | grep -q '\"state\":\"ready\"'"; then
  fail "gateway + supervised worker ready"; tail -n 30 "$TMP/gateway.log" | sed 's/^/# /'; finish
fi
WPID=$(hq 'j["workers"][0]["pid"]')
ok "gateway (pid $GPID) + supervised worker (pid $WPID) ready; ${CLIENTS} clients, ${SOAK_SECONDS} s after ${WARM_SECONDS} s warm-up"

export PAGODA_URL=$URL PAGODA_MODEL=m CLIENTS
DRIVER=$ROOT/tests/soak/soak.py

# settled: nothing queued/running/assigned, worker idle, no KV block in use
settled() {
  health | python3 -c '
import json, sys
j = json.load(sys.stdin)
m = j["models"]["m"]; w = j["workers"][0]; l = w["load"] or {}
vals = (m["queued"], m["running"], w["assigned"], l.get("running", -1), l.get("waiting", -1), l.get("kv_blocks_used", -1))
print("queued %d running %d assigned %d worker-running %d worker-waiting %d kv-used %d" % vals)
sys.exit(0 if vals == (0, 0, 0, 0, 0, 0) else 1)'
}

# --- warm-up, then the baseline RSS ----------------------------------------------------
SOAK_SEED=1000 python3 "$DRIVER" run "$WARM_SECONDS" >"$TMP/warm.out"
wait_for 10 settled
rss_g0=$(rss_kb "$GPID"); rss_w0=$(rss_kb "$WPID")
acc0=$(metric pagoda_requests_total); fin0=$(metric vllm:request_success_total)

# --- the soak ------------------------------------------------------------------------------
python3 "$DRIVER" run "$SOAK_SECONDS" | tee "$TMP/soak.out" | grep -vE '^(measure|summary) '
m() { awk -v k="$1" '$1 == "measure" && $2 == k {print $3}' "$TMP/soak.out"; }
m4() { awk -v k="$1" '$1 == "measure" && $2 == k {print $'"$2"'}' "$TMP/soak.out"; }
n_req=$(m requests); n_done=$(m completed); n_cancel=$(m cancelled); n_ref=$(m refused); n_fail=$(m failed)
check "soak: ${n_req:-?} requests in $(m seconds) s — ${n_done:-?} completed, ${n_cancel:-?} cancelled, ${n_ref:-?} refused (429), ${n_fail:-?} failed; $(m tokens) tokens" \
  test "${n_fail:-1}" -eq 0 -a "${n_req:-0}" -gt 0 -a "${n_done:-0}" -gt 0
check "every request accounted for (completed + cancelled + refused + failed = requests)" \
  test $(( ${n_done:-0} + ${n_cancel:-0} + ${n_ref:-0} + ${n_fail:-0} )) -eq "${n_req:--1}"
check "no client thread hung" test "$(m hung_clients)" = 0
check "traffic mixed: some aborts and some stop strings exercised (${n_cancel:-0} cancelled, $(m stop_checked) stop-string answers)" \
  test "${n_cancel:-0}" -ge 1 -a "$(m stop_checked)" -ge 1
check "seeded probes reproducible: $(m4 probes 3) answers to $(m4 probes 4) probes, $(m4 probes 5) diverged" \
  test "$(m4 probes 5)" = 0 -a "$(m4 probes 3)" -ge 2

# --- idle: everything settles --------------------------------------------------------------
if wait_for 15 settled; then
  ok "idle: all requests settled and every KV block free or cached ($(settled))"
else
  fail "idle: not settled 15 s after the last request: $(settled)"
fi
kv=$(metric vllm:kv_cache_usage_perc)
check "/metrics vllm:kv_cache_usage_perc = 0 once idle (got $kv)" awk "BEGIN{exit !($kv == 0)}"
check "/metrics: nothing running or waiting once idle" \
  test "$(metric vllm:num_requests_running)" = 0 -a "$(metric vllm:num_requests_waiting)" = 0
acc=$(( $(metric pagoda_requests_total) - acc0 )); fin=$(( $(metric vllm:request_success_total) - fin0 ))
check "gateway accounting: $acc requests accepted into the queue during the soak, $fin finished (stop/length/abort)" \
  test "$acc" -eq "$fin" -a "$acc" -gt 0
echo "# finished by reason: stop $(metric vllm:request_success_total stop) length $(metric vllm:request_success_total length) abort $(metric vllm:request_success_total abort); 429s $(metric pagoda_rejected_queue_full_total)"
n_pre=$(metric vllm:num_preemptions_total)
check "KV pressure exercised: $n_pre preemptions with $KV_BLOCKS KV blocks (and the probes above still agreed)" test "$n_pre" -ge 1

# --- no restart, bounded memory ------------------------------------------------------------
check "worker never restarted: pid $WPID still serving, pagoda_worker_restarts_total = $(metric pagoda_worker_restarts_total)" \
  test "$(hq 'j["workers"][0]["pid"]')" = "$WPID" -a "$(metric pagoda_worker_restarts_total)" = 0
rss_g1=$(rss_kb "$GPID"); rss_w1=$(rss_kb "$WPID")
dg=$((rss_g1 - rss_g0)); dw=$((rss_w1 - rss_w0))
echo "# RSS after warm-up → end: gateway ${rss_g0} → ${rss_g1} KiB (${dg}), worker ${rss_w0} → ${rss_w1} KiB (${dw})"
if is_sanitized "$GW"; then
  skip "RSS bound not applied to ASan builds (the quarantine keeps freed memory); growth was gateway ${dg} KiB, worker ${dw} KiB"
else
  check "gateway RSS growth ${dg} KiB ≤ ${RSS_BOUND_KB} KiB" test "$dg" -le "$RSS_BOUND_KB"
  check "worker RSS growth ${dw} KiB ≤ ${RSS_BOUND_KB} KiB" test "$dw" -le "$RSS_BOUND_KB"
fi

# --- clean exit (the supervised worker's stderr is in the gateway log) -------------------------
stop_and_check pagoda-gateway "$GPID" "$TMP/gateway.log"
check "the supervised worker exited with the gateway" bash -c "! kill -0 $WPID 2>/dev/null"
if [[ $N_FAIL -gt 0 ]]; then echo "# --- gateway.log"; tail -n 40 "$TMP/gateway.log" | sed 's/^/# /'; fi
finish
