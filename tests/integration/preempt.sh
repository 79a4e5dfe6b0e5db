#!/usr/bin/env bash
# Preemption by priority through real processes (issue #38, docs/BATCHING.md
# "Prefill priority and aging"): a high-tier request that arrives while a
# low-tier prompt's prefill step is in flight stops that step between two
# layers; the high tier is served, the low tier's prompt resumes, and
# neither answer changes.
#
# Two gateway + worker pairs on one small real model, keys of tier low and
# high on both:
#   S (solo): each request alone gives the reference texts;
#   P: the worker runs with PAGODA_TEST_ARMED_HOLD=FILE (worker/worker.c): a
#      step a better tier may stop waits before its forward pass while FILE
#      exists. The test holds the low tier's first prefill step there, sends
#      the high-tier request, waits until the worker's link thread has made
#      its offer (its debug line), then lets the step go: the forward pass
#      must stop at its first layer check. No timing is assumed: every wait
#      polls for a state.
# Checks: the low and high texts equal the solo ones; the worker logged a
# stopped step; /metrics' pagoda_steps_stopped_total for the model reaches
# 1 (and stays 0 on the solo pair).
source "$(dirname "$0")/../lib.sh"
source "$ROOT/tests/lib_proc.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
MODEL_FILE=$(small_model) || finish

SECRET_LO=preempt-low-2b71c4 SECRET_HI=preempt-high-93d0ae SECRET_MON=preempt-metrics-5e11f0
"$GW" --hash-key batchjob:low --secret "$SECRET_LO" >"$TMP/hash.out"
"$GW" --hash-key chat:high --secret "$SECRET_HI" >>"$TMP/hash.out"
"$GW" --hash-key prom:low:metrics --secret "$SECRET_MON" >>"$TMP/hash.out"
grep -v '^#' "$TMP/hash.out" >"$TMP/keys.txt"
HOLD=$TMP/armed-hold

# start_pair NAME [ENV=VAL...] : gateway + external worker on MODEL_FILE, ready
start_pair() {
  local name=$1; shift
  local hp zp
  hp=$(free_port); zp=$(free_port)
  spawn "$TMP/gw-$name.log" "$GW" --listen "127.0.0.1:$hp" --worker-endpoint "tcp://127.0.0.1:$zp" \
    --keys "$TMP/keys.txt"
  spawn "$TMP/wk-$name.log" env "$@" "$WK" --gateway "tcp://127.0.0.1:$zp" --model "m=$MODEL_FILE" \
    --max-seqs 4 --log-level debug
  eval "URL_$name=http://127.0.0.1:$hp"
  wait_for 30 bash -c "curl -sf http://127.0.0.1:$hp/health | grep -q '\"state\":\"ready\"'"
}

# a prompt long enough for a prefill step of many rows (the model's context
# is 512 tokens: about 130 here, about 290 with the generated stand-in's byte-level
# tokenizer), and a short one
LONG_PROMPT=$(python3 -c 'print(" ".join(["Once upon a time there was a little dog named Spot who liked to run."] * 8))')
SHORT_PROMPT="Lily went to the park"
body() { # prompt max_tokens
  python3 -c 'import json,sys; print(json.dumps({"model":"m","prompt":sys.argv[1],"max_tokens":int(sys.argv[2]),"temperature":0}))' "$1" "$2"
}
body "$LONG_PROMPT" 16 >"$TMP/low.json"
body "$SHORT_PROMPT" 12 >"$TMP/high.json"
post() { # url secret body-file out-file
  curl -s -o "$4" -w '%{http_code}' -H "Authorization: Bearer $2" -H 'Content-Type: application/json' \
    --data-binary "@$3" "$1/v1/completions"
}
text_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$1" 2>/dev/null; }

if start_pair S PAGODA_LOG=info && start_pair P "PAGODA_TEST_ARMED_HOLD=$HOLD"; then
  ok "two gateway + worker pairs ready (keys of tier low and high)"
else
  fail "gateway + worker pairs ready"; tail -n 20 "$TMP"/*.log | sed 's/^/# /'; finish
fi

# --- the reference texts, each request alone ----------------------------------
c1=$(post "$URL_S" "$SECRET_LO" "$TMP/low.json" "$TMP/low-solo.out")
c2=$(post "$URL_S" "$SECRET_HI" "$TMP/high.json" "$TMP/high-solo.out")
LOW_SOLO=$(text_of "$TMP/low-solo.out") HIGH_SOLO=$(text_of "$TMP/high-solo.out")
if [[ $c1 == 200 && $c2 == 200 && -n $LOW_SOLO && -n $HIGH_SOLO ]]; then
  ok "solo: both requests answered 200 with text"
else
  fail "solo answers ($c1 $c2)"; head -c 300 "$TMP"/*-solo.out | sed 's/^/# /'; finish
fi

# --- the low tier's prefill step held, the high tier arrives ------------------
touch "$HOLD"
post "$URL_P" "$SECRET_LO" "$TMP/low.json" "$TMP/low-p.out" >"$TMP/low-p.code" &
LOW_CURL=$!
if wait_for 60 grep -q 'TEST ONLY: armed step held' "$TMP/wk-P.log"; then
  ok "the low tier's prefill step is armed and held before its forward pass"
else
  fail "no armed step held (the low-tier prompt's step was not armed)"; tail -n 20 "$TMP/wk-P.log" | sed 's/^/# /'
  rm -f "$HOLD"; wait "$LOW_CURL"; finish
fi
post "$URL_P" "$SECRET_HI" "$TMP/high.json" "$TMP/high-p.out" >"$TMP/high-p.code" &
HIGH_CURL=$!
check "the worker's link thread offered the high tier's SUBMIT to the held step, which it stops" \
  wait_for 60 grep -q 'SUBMIT of priority 0 stops the running step' "$TMP/wk-P.log"
rm -f "$HOLD"
wait "$HIGH_CURL"; wait "$LOW_CURL"
check "the forward pass stopped and the step's rows were not counted" \
  grep -q 'step stopped for a better tier' "$TMP/wk-P.log"
check "the high tier's answer is 200 and equals its text alone" \
  test "$(cat "$TMP/high-p.code")" = 200 -a "$(text_of "$TMP/high-p.out")" = "$HIGH_SOLO"
check "the low tier's prompt resumed: 200 and its text alone" \
  test "$(cat "$TMP/low-p.code")" = 200 -a "$(text_of "$TMP/low-p.out")" = "$LOW_SOLO"
stopped_metric() {
  curl -s -H "Authorization: Bearer $SECRET_MON" "$URL_P/metrics" | awk '/^pagoda_steps_stopped_total\{.*model_name="m"/ { if ($NF >= 1) f = 1 } END { exit !f }'
}
if wait_for 30 stopped_metric; then
  ok "/metrics: pagoda_steps_stopped_total{model_name=\"m\"} reaches 1"
else
  fail "/metrics: pagoda_steps_stopped_total{model_name=\"m\"} reaches 1"
  curl -s -H "Authorization: Bearer $SECRET_MON" "$URL_P/metrics" | grep -E 'steps_stopped|num_preemptions' | sed 's/^/# /'
fi
solo_metrics=$(curl -s -H "Authorization: Bearer $SECRET_MON" "$URL_S/metrics")
check "/metrics on the solo pair (read with the metrics key): the family is there, no step stopped" \
  bash -c 'grep -q "^# HELP pagoda_steps_stopped_total" <<<"$1" && ! grep -E "^pagoda_steps_stopped_total\{" <<<"$1" | grep -qvE " 0$"' _ "$solo_metrics"
finish
