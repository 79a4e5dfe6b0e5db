#!/usr/bin/env bash
# --request-timeout bounds a running request's time *without progress*, not
# its run (docs/API.md "Queue and failures"). Real gateway + supervised worker
# on the small model, --request-timeout 3 and the worker's test-only step
# knobs (worker.c, TEST ONLY):
#   PAGODA_TEST_STEP_SLEEP_MS=300  every step sleeps 300 ms first, so a request
#                                  of 16 tokens (>= 16 steps) runs >= 4.8 s,
#                                  longer than the timeout by construction,
#                                  while each step is a tenth of it
#   PAGODA_TEST_STEP_WEDGE=FILE    the first step that finds FILE never returns
#  A. progressing requests (plain and streamed) run past --request-timeout and
#     complete with 200 / finish_reason "length";
#  B. a wedged step (heartbeats keep coming, no step completes; the progress
#     watchdog is off with --progress-timeout-ms 0 so only the request timeout
#     acts): the request gets 504 `timeout` "made no progress", in the
#     OpenAI error shape.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

for b in pagoda-gateway pagoda-worker; do
  [[ -x $BUILD/$b ]] || { fail "$b not built in $BUILD"; finish; }
done
TIMEOUT_S=3 MAX_TOK=16
HP=$(free_port) ZP=$(free_port)
URL=http://127.0.0.1:$HP

PAGODA_TEST_STEP_SLEEP_MS=300 PAGODA_TEST_STEP_WEDGE=$TMP/wedge \
  spawn "$TMP/gw.log" "$BUILD/pagoda-gateway" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
  --model "m=$(small_model)" --threads 1 --request-timeout "$TIMEOUT_S" --progress-timeout-ms 0
GWP=$SPAWNED
ready() {
  curl -s --max-time 5 "$URL/health" | grep -q '"state":"ready"'
}
if ! wait_for 120 ready; then
  fail "the worker registered"; sed 's/^/# /' "$TMP/gw.log" | tail -20; finish
fi

# body STREAM: a completion of MAX_TOK tokens that ignores EOS
body() {
  echo "{\"model\":\"m\",\"prompt\":\"Once upon a time\",\"max_tokens\":$MAX_TOK,\"ignore_eos\":true,\"temperature\":0,\"stream\":$1}"
}

# --- A. progressing requests outlive the timeout -----------------------------
t0=$(date +%s.%N)
code=$(curl -s -o "$TMP/a.json" -w '%{http_code}' --max-time 300 "$URL/v1/completions" \
  -H 'Content-Type: application/json' -d "$(body false)")
dt=$(python3 -c "import sys; print('%.1f' % ($(date +%s.%N) - $t0))")
echo "# A: $MAX_TOK tokens with 300 ms steps took $dt s (--request-timeout $TIMEOUT_S)"
check "A: a request that runs $dt s (>= $MAX_TOK x 0.3 s by the step hook) past --request-timeout $TIMEOUT_S completes: HTTP $code" \
  bash -c "[[ $code == 200 ]] && grep -q '\"finish_reason\":\"length\"' '$TMP/a.json'"
check "A: it ran longer than the timeout ($dt s > $TIMEOUT_S s)" \
  python3 -c "import sys; sys.exit(not $dt > $TIMEOUT_S)"
code=$(curl -s -N -o "$TMP/a_stream.txt" -w '%{http_code}' --max-time 300 "$URL/v1/completions" \
  -H 'Content-Type: application/json' -d "$(body true)")
check "A: the same request streamed completes: HTTP $code, finish_reason length, [DONE], no error event" \
  bash -c "[[ $code == 200 ]] && grep -q '\"finish_reason\":\"length\"' '$TMP/a_stream.txt' &&
           grep -q '^data: \[DONE\]' '$TMP/a_stream.txt' && ! grep -q '\"error\"' '$TMP/a_stream.txt'"
if grep -q "made no progress" "$TMP/gw.log"; then
  fail "A: no request was timed out"; grep "made no progress" "$TMP/gw.log" | sed 's/^/# /'
else
  ok "A: no request was timed out"
fi

# --- B. a wedged step: 504 after the timeout without progress ----------------
touch "$TMP/wedge"
code=$(curl -s -o "$TMP/b.json" -w '%{http_code}' --max-time 120 "$URL/v1/completions" \
  -H 'Content-Type: application/json' -d "$(body false)")
echo "# B: HTTP $code: $(head -c 300 "$TMP/b.json")"
check "B: the step wedged (the hook consumed its file)" test ! -e "$TMP/wedge"
check "B: a request on a wedged worker gets 504 timeout in the OpenAI error shape" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
e = j["error"]
sys.exit(not (sys.argv[2] == "504" and e["code"] == "timeout" and e["type"] == "server_error"
              and "made no progress" in e["message"]))' "$TMP/b.json" "$code"
check "B: the gateway log names the request that made no progress" grep -q "made no progress for" "$TMP/gw.log"
check "B: the gateway still answers" bash -c "curl -s --max-time 5 '$URL/health' | grep -q status"

# the wedged worker never ends its step: the supervisor kills it at shutdown
stop_and_check gateway "$GWP" "$TMP/gw.log" 60
finish
