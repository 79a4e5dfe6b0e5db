#!/usr/bin/env bash
# Limits and abuse checks against real processes (pagoda-gateway + pagoda-worker on a
# small real model):
#   1. every documented size limit at the limit and one past it
#      (tests/integration/limits.cases, same driver and format as hostile_http.cases);
#   2. the per-model queue bound: a flood past --max-queue gets 429 rate_limit_exceeded
#      with Retry-After, everything else completes, /metrics counts the 429s;
#   3. per-key rate limiting (token bucket → 429 + Retry-After) when the gateway has it;
#   4. API keys at rest: the keys file holds only SHA-256 digests; secrets (good or
#      wrong) never show up in logs, /metrics or /health; a keys file with a plaintext
#      secret in the digest column is refused at start-up, naming file:line;
#   5. admin routes: no key 401, a non-admin key 403, the admin key 200; without a keys
#      file admin routes are closed (403);
#   6. the default listen address is 127.0.0.1 (not 0.0.0.0) — when port 8080 is free;
#   7. a poison request — one that stalls its worker past the heartbeat liveness on
#      every dispatch (a 4 MiB prompt to tokenize, with 50 ms heartbeats) — is answered
#      within seconds and dispatched a bounded number of times, not re-queued forever;
#   8. all processes exit 0 on SIGTERM with no sanitizer report (tests/lib_proc.sh).
source "$(dirname "$0")/../lib.sh"
source "$ROOT/tests/lib_proc.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
MODEL_FILE=$(small_model)
DRIVER=$ROOT/tests/integration/hostile_http.py
# seconds per case; ASan builds copy request bodies slowly (a 17 MiB body takes ~12 s)
CASE_TIMEOUT=10
is_sanitized "$GW" && CASE_TIMEOUT=60
FLOOD=$ROOT/tests/integration/abuse_limits.py

# Known gaps (see hostile_http.sh for the mechanism; PAGODA_STRICT=1 makes them fail).
# None are open (messages_2048 and poison_request were fixed; see docs/RELIABILITY.md).
KNOWN_GAPS=${KNOWN_GAPS-""}
gap() {
  if [[ " $KNOWN_GAPS " == *" $1 "* && -z ${PAGODA_STRICT:-} ]]; then skip "KNOWN GAP $1: $2"; else fail "$1: $2"; fi
}

# secrets live only in this script; the files get digests
SECRET_N=limits-normal-7f3a9c SECRET_A=limits-admin-51e0bd SECRET_WRONG=wrong-secret-c0ffee
"$GW" --hash-key user1:normal --secret "$SECRET_N" >"$TMP/hash.out"
"$GW" --hash-key ops:high:admin --secret "$SECRET_A" >>"$TMP/hash.out"
grep -v '^#' "$TMP/hash.out" >"$TMP/keys.txt"

# start_pair NAME GATEWAY-ARGS... -- WORKER-ARGS... : gateway + external worker, ready
# (heartbeats: the default 1000 ms unless given; the worker's must be passed to both)
start_pair() {
  local name=$1; shift
  local gargs=() wargs=()
  while [[ $# -gt 0 && $1 != -- ]]; do gargs+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  wargs=("$@")
  local hp zp
  hp=$(free_port); zp=$(free_port)
  spawn "$TMP/gw-$name.log" "$GW" --listen "127.0.0.1:$hp" --worker-endpoint "tcp://127.0.0.1:$zp" \
    --log-level debug "${gargs[@]}"
  eval "GPID_$name=$SPAWNED"
  spawn "$TMP/wk-$name.log" "$WK" --gateway "tcp://127.0.0.1:$zp" --model "m=$MODEL_FILE" "${wargs[@]}"
  eval "WPID_$name=$SPAWNED"
  eval "URL_$name=http://127.0.0.1:$hp"
  wait_for 30 bash -c "curl -sf http://127.0.0.1:$hp/health | grep -q '\"state\":\"ready\"'"
}

# --- 1. limits table -----------------------------------------------------------------
if start_pair L --keys "$TMP/keys.txt" -- --max-seqs 8; then
  ok "gateway L (keys, default 16 MiB body limit) + worker ready"
else
  fail "gateway L + worker ready"; tail -n 20 "$TMP"/*.log | sed 's/^/# /'; finish
fi
N_CTX=$(curl -s "$URL_L/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["workers"][0]["n_ctx"])')
PAGODA_URL=$URL_L PAGODA_KEY=$SECRET_N PAGODA_MODEL=m PAGODA_N_CTX=$N_CTX PAGODA_CASE_TIMEOUT=$CASE_TIMEOUT \
  PAGODA_KNOWN_GAPS=$KNOWN_GAPS python3 "$DRIVER" table "$ROOT/tests/integration/limits.cases" | tee "$TMP/limits.out"
N_FAIL=$((N_FAIL + $(grep -c '^not ok' "$TMP/limits.out")))
check "limits table ran ($(grep -cE '^(ok|not ok|skip) - ' "$TMP/limits.out") cases)" \
  test "$(grep -cE '^(ok|not ok|skip) - ' "$TMP/limits.out")" -ge 30

# --- 4. keys at rest and secrets in logs ---------------------------------------------------
check "keys file: every entry is 'name tier <64 hex>[ admin]', nothing else" \
  bash -c "! grep -vE '^[A-Za-z0-9._@-]+[[:space:]]+(high|normal|low)[[:space:]]+[0-9a-f]{64}([[:space:]]+admin)?$' '$TMP/keys.txt'"
check "keys file: holds SHA-256 of the secret, not the secret" \
  bash -c "grep -q \"\$(printf %s '$SECRET_N' | sha256sum | cut -d' ' -f1)\" '$TMP/keys.txt' && ! grep -qF '$SECRET_N' '$TMP/keys.txt' && ! grep -qF '$SECRET_A' '$TMP/keys.txt'"
curl -s -o /dev/null -H "Authorization: Bearer $SECRET_WRONG" "$URL_L/v1/models"
curl -s -o /dev/null -H "Authorization: Bearer $SECRET_N" "$URL_L/v1/models"
curl -s -o "$TMP/metrics.txt" -H "Authorization: Bearer $SECRET_A" "$URL_L/metrics"
curl -s -o "$TMP/health.json" "$URL_L/health"
check "no secret (valid or wrong) in the gateway's debug log, /metrics or /health" \
  bash -c "! grep -qF -e '$SECRET_N' -e '$SECRET_A' -e '$SECRET_WRONG' '$TMP/gw-L.log' '$TMP/wk-L.log' '$TMP/metrics.txt' '$TMP/health.json'"
cp "$TMP/keys.txt" "$TMP/keys-plain.txt"
echo "bob normal $SECRET_N" >>"$TMP/keys-plain.txt"
hp=$(free_port); zp=$(free_port)
timeout 10 "$GW" --listen "127.0.0.1:$hp" --worker-endpoint "tcp://127.0.0.1:$zp" --keys "$TMP/keys-plain.txt" >"$TMP/plain.log" 2>&1
rc=$?
check "a keys file with a plaintext secret is refused: exit 1 (got $rc), error names keys-plain.txt:3" \
  bash -c "[[ $rc -eq 1 ]] && grep -q 'keys-plain.txt:3' '$TMP/plain.log'"

# --- 5. admin routes ---------------------------------------------------------------------
code() { curl -s -o "$TMP/body" -w '%{http_code}' "$@"; }
shape() { python3 -c "import json,sys; sys.path.insert(0,'$ROOT/tests/support'); import httpc; sys.exit(1 if httpc.oai_error_shape(json.load(open('$TMP/body'))) else 0)"; }
c=$(code -X POST "$URL_L/admin/reload-keys")
check "admin route without a key → 401 OpenAI-shaped (got $c)" eval '[[ $c == 401 ]] && shape'
c=$(code -X POST -H "Authorization: Bearer $SECRET_N" "$URL_L/admin/reload-keys")
check "admin route with a non-admin key → 403 permission_error (got $c)" \
  bash -c "[[ $c == 403 ]] && grep -q '\"permission_error\"' '$TMP/body'"
c=$(code -X POST -H "Authorization: Bearer $SECRET_A" "$URL_L/admin/reload-keys")
check "admin route with the admin key → 200 (got $c)" test "$c" = 200

# --- 2. queue bound: 429 + Retry-After ----------------------------------------------------------
# TEST ONLY: the worker's steps last >= 5 ms (worker.h): a 48-token request holds the one
# slot for >= 240 ms, so the flood finds the queue full on a machine of any speed
if PAGODA_TEST_STEP_SLEEP_MS=5 start_pair Q --keys "$TMP/keys.txt" --max-queue 2 -- --max-seqs 1; then
  ok "gateway Q (--max-queue 2) + worker (--max-seqs 1) ready"
  PAGODA_URL=$URL_Q PAGODA_KEY=$SECRET_N PAGODA_MODEL=m python3 "$FLOOD" queue 16 48 >"$TMP/queue.out"
  # at least the 2 queue places complete; the running slot adds a third only
  # when the gateway dispatched the first request before the queue filled
  # (on a loaded machine all 16 can arrive first: 2 completed, 14 × 429)
  read -r _ _ q200 q429 qbad qwhy < <(grep '^measure queue' "$TMP/queue.out")
  check "queue flood: 16 at once → ${q200:-?} completed, ${q429:-?} got 429, ${qbad:-?} anything else ($qwhy)" \
    test "${qbad:-1}" -eq 0 -a "${q429:-0}" -ge 1 -a "${q200:-0}" -ge 2
  m429=$(curl -s -H "Authorization: Bearer $SECRET_A" "$URL_Q/metrics" | awk '/^pagoda_rejected_queue_full_total[{ ]/ {s += $NF} END {print s + 0}')
  check "/metrics pagoda_rejected_queue_full_total counts the 429s ($m429 = ${q429:-?})" test "$m429" = "${q429:-x}"
  check "after the flood a request is served again" \
    env PAGODA_URL="$URL_Q" PAGODA_KEY="$SECRET_N" PAGODA_MODEL=m python3 "$DRIVER" good
else
  fail "gateway Q + worker ready"
fi

# --- 3. per-key rate limiting ----------------------------------------------------------------------
# A gateway limited to 5 requests/s per key: a burst of back-to-back requests from one key gets
# well-formed 429s with Retry-After; another key is not affected; after Retry-After the first
# key is served again.
if grep -qiE 'rate[- ]limit' <<<"$("$GW" --help 2>&1)"; then
  if start_pair R --keys "$TMP/keys.txt" --rate-limit-per-key 5 -- --max-seqs 8; then
    PAGODA_URL=$URL_R PAGODA_MODEL=m python3 "$FLOOD" burst "$SECRET_N" 60 >"$TMP/burst.out"
    read -r _ _ b_ok b_429 b_other b_ra < <(grep '^measure burst' "$TMP/burst.out")
    check "per-key rate limit: 60 back-to-back requests → ${b_429:-?} × 429 with Retry-After ${b_ra:-?} (${b_ok:-?} ok, ${b_other:-?} other)" \
      test "${b_429:-0}" -ge 30 -a "${b_ok:-0}" -ge 5 -a "${b_other:-1}" -eq 0 -a "${b_ra:--}" != -
    check "per-key rate limit: another key is served while the first is limited" \
      env PAGODA_URL="$URL_R" PAGODA_KEY="$SECRET_A" PAGODA_MODEL=m python3 "$DRIVER" good
    sleep "${b_ra:-1}"
    check "per-key rate limit: the limited key is served again after Retry-After" \
      env PAGODA_URL="$URL_R" PAGODA_KEY="$SECRET_N" PAGODA_MODEL=m python3 "$DRIVER" good
  else
    fail "gateway R (rate limited) + worker ready"
  fi
else
  fail "pagoda-gateway --help has no rate-limit option"
fi

# --- 6. default listen address: loopback only ---------------------------------------------------------
if ss -ltnH 2>/dev/null | awk '{print $4}' | grep -qE '[:.]8080$'; then
  skip "port 8080 is busy: cannot check the default listen address"
else
  zp=$(free_port)
  spawn "$TMP/gw-D.log" "$GW" --worker-endpoint "tcp://127.0.0.1:$zp"
  GPID_D=$SPAWNED
  if wait_for 10 curl -s -o /dev/null http://127.0.0.1:8080/health; then
    listen=$(ss -ltnpH 2>/dev/null | grep "pid=$GPID_D," | awk '{print $4}' | sort -u | tr '\n' ' ')
    check "default listen address is loopback (pagoda-gateway listens on: $listen)" \
      bash -c "[[ '$listen' == *127.0.0.1:8080* ]] && ! grep -qE '(0\.0\.0\.0|\*|\[::\]):8080' <<<'$listen'"
    c=$(code -X POST http://127.0.0.1:8080/admin/reload-keys)
    check "without a keys file admin routes are closed (403, got $c)" test "$c" = 403
    stop_and_check "pagoda-gateway (default listen)" "$GPID_D" "$TMP/gw-D.log"
  else
    skip "gateway without --listen did not come up on 8080 (taken meanwhile?): $(tail -n 2 "$TMP/gw-D.log")"
  fi
fi

# --- 7. poison request --------------------------------------------------------------------------------------------
if start_pair P --heartbeat-ms 50 -- --heartbeat-ms 50 --max-seqs 2; then
  python3 -c 'import json; print(json.dumps({"model": "m", "prompt": "a" * 4194304}))' >"$TMP/poison.json"
  c=$(curl -s -o "$TMP/body" -w '%{http_code}' --max-time 15 "$URL_P/v1/completions" -H 'Content-Type: application/json' -H 'Expect:' \
    --data-binary @"$TMP/poison.json")
  n_disp=$(grep -cE 'request 1 \(normal\) →' "$TMP/gw-P.log")
  if [[ $c =~ ^[45][0-9][0-9]$ ]] && shape && [[ $n_disp -le 3 ]]; then
    ok "poison request: answered $c $(python3 -c "import json; e=json.load(open('$TMP/body'))['error']; print(e['type'], e['code'])") after $n_disp dispatch(es)"
  else
    gap poison_request "a 4 MiB prompt that stalls the worker past its 150 ms liveness got ${c/#000/no answer} within 15 s; dispatched $n_disp times (worker lost → re-queued → dispatched again...)"
  fi
  check "poison request over: the model is served again" wait_for 20 \
    env PAGODA_URL="$URL_P" PAGODA_MODEL=m python3 "$DRIVER" good
else
  fail "gateway P + worker (50 ms heartbeats) ready"
fi

# --- 8. clean exits ------------------------------------------------------------------------------------------
for p in L Q P; do
  g=GPID_$p w=WPID_$p
  [[ -n ${!g:-} ]] && stop_and_check "pagoda-gateway $p" "${!g}" "$TMP/gw-$p.log"
  [[ -n ${!w:-} ]] && stop_and_check "pagoda-worker $p" "${!w}" "$TMP/wk-$p.log"
done
if [[ $N_FAIL -gt 0 ]]; then for f in "$TMP"/*.log; do echo "# --- $f"; tail -n 20 "$f" | sed 's/^/# /'; done; fi
finish
