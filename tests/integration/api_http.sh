#!/usr/bin/env bash
# Raw HTTP edge cases of pagoda-gateway with curl, against real processes
# (gateway + supervised worker on stories260K.gguf):
#   auth (401 missing/bad key, open /health, /metrics for admin keys only, 403 admin, SIGHUP and
#   /admin/reload-keys), 400/404/405/413 bodies, the raw SSE framing,
#   /v1/batch (tier low), 504 for a request stuck in the queue, 503 for a
#   model whose only replica died, supervisor restart of a killed worker,
#   metrics after traffic, /health with and without workers.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent
MODEL_FILE=$SMALL

# py 'expression over j' < json  (python3 without numpy is enough)
py() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
# req METHOD PATH [curl args...] → status in $CODE, body in $TMP/body, headers in $TMP/hdr
req() {
  local m=$1 p=$2; shift 2
  CODE=$(curl -s -o "$TMP/body" -D "$TMP/hdr" -w '%{http_code}' -X "$m" "$URL$p" -H 'Content-Type: application/json' "$@")
}
is_error() { # status type [code]
  [[ $CODE == "$1" ]] && py "set(j['error'])=={'message','type','param','code'} and j['error']['type']=='$2' ${3:+and j['error']['code']=='$3'}" <"$TMP/body"
}
CHAT='{"model":"stories","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":8}'

"$GW" --hash-key alice:high --secret alice-secret | grep -v '^#' >"$TMP/keys.txt"
"$GW" --hash-key ops:normal:admin --secret ops-secret | grep -v '^#' >>"$TMP/keys.txt"
check "--hash-key prints parseable lines (name tier hash [admin])" \
  bash -c "grep -qE '^alice high [0-9a-f]{64}$' '$TMP/keys.txt' && grep -qE '^ops normal [0-9a-f]{64} admin$' '$TMP/keys.txt'"
check "--hash-key refuses an unknown tier" bash -c "! '$GW' --hash-key bob:urgent >/dev/null 2>&1"

HP=$(free_port); ZP=$(free_port)
URL=http://127.0.0.1:$HP
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP --keys "$TMP/keys.txt" \
  --model "stories=$MODEL_FILE" --max-seqs 4 --max-body 4096 --request-timeout 1 --heartbeat-ms 3000 --log-level debug
GPID=$SPAWNED
ready() { curl -sf "$URL/health" | py "j['models']['stories']['replicas']==1"; }
check "gateway up, local worker registered" wait_for 20 ready
A=(-H "Authorization: Bearer alice-secret" -H "Content-Type: application/json")

# --- auth ----------------------------------------------------------------------
req POST /v1/chat/completions -d "$CHAT"
check "no key → 401 authentication_error" is_error 401 authentication_error invalid_api_key
req POST /v1/chat/completions -H "Authorization: Bearer wrong" -d "$CHAT"
check "wrong key → 401" is_error 401 authentication_error invalid_api_key
req POST /v1/chat/completions -H "Authorization: Basic YWxpY2U6eA==" -d "$CHAT"
check "non-Bearer scheme → 401" is_error 401 authentication_error
req GET /v1/models
check "GET /v1/models needs a key (401)" is_error 401 authentication_error
req GET /v1/models "${A[@]}"
check "GET /v1/models with a key lists stories with max_model_len" \
  bash -c "[[ $CODE == 200 ]] && python3 -c \"import json,sys; j=json.load(open('$TMP/body')); sys.exit(0 if j['object']=='list' and j['data'][0]['id']=='stories' and j['data'][0]['max_model_len']>0 else 1)\""
req GET /health
check "/health needs no key (200)" test "$CODE" = 200
req GET /metrics
check "with keys, /metrics needs a key (401)" is_error 401 authentication_error
req GET /metrics "${A[@]}"
check "with keys, /metrics refuses a key without admin/metrics (403)" is_error 403 permission_error
req GET /metrics -H "Authorization: Bearer ops-secret"
check "/metrics with the admin key (200, Prometheus text)" bash -c "[[ $CODE == 200 ]] && grep -qi '^Content-Type: text/plain; version=0.0.4' '$TMP/hdr'"
req POST /admin/reload-keys "${A[@]}"
check "/admin with a non-admin key → 403" is_error 403 permission_error
echo "carol low $(printf 'carol-secret' | sha256sum | cut -d' ' -f1)" >>"$TMP/keys.txt"
req POST /v1/chat/completions -H "Authorization: Bearer carol-secret" -d "$CHAT"
check "a key added to the file is unknown before a reload (401)" test "$CODE" = 401
kill -HUP "$GPID"
carol_ok() { req POST /v1/chat/completions -H "Authorization: Bearer carol-secret" -d "$CHAT"; [[ $CODE == 200 ]]; }
wait_for 10 carol_ok  # the reload happens on the gateway's main thread, some time after the signal
req POST /v1/chat/completions -H "Authorization: Bearer carol-secret" -d "$CHAT"
check "SIGHUP reloads the keys: the new key works (got $CODE)" test "$CODE" = 200
req POST /admin/reload-keys -H "Authorization: Bearer ops-secret"
check "/admin/reload-keys with the admin key → 200, 3 keys" bash -c "[[ $CODE == 200 ]] && grep -q '\"keys\":3' '$TMP/body'"

# --- request errors ------------------------------------------------------------------
req POST /v1/chat/completions "${A[@]}" -d '{"model":"stories","messages":'
check "truncated JSON → 400 invalid_request_error" is_error 400 invalid_request_error
req POST /v1/chat/completions "${A[@]}" -d '{"messages":[{"role":"user","content":"x"}]}'
check "missing model → 400 with param model" bash -c "[[ $CODE == 400 ]] && grep -q '\"param\":\"model\"' '$TMP/body'"
req POST /v1/chat/completions "${A[@]}" -d '{"model":"nope","messages":[{"role":"user","content":"x"}]}'
check "unknown model → 404 model_not_found" is_error 404 not_found_error model_not_found
req POST /v1/completions "${A[@]}" -d "{\"model\":\"stories\",\"prompt\":\"$(head -c 5000 /dev/zero | tr '\0' a)\"}"
check "body over --max-body → 413" is_error 413 invalid_request_error request_too_large
req GET /v1/chat/completions "${A[@]}"
check "GET on a POST route → 405 with Allow: POST" bash -c "[[ $CODE == 405 ]] && grep -qi '^Allow: POST' '$TMP/hdr'"
req GET /v2/anything
check "unknown path → 404 (invalid_request_error, as OpenAI)" is_error 404 invalid_request_error not_found
req POST /v1/chat/completions "${A[@]}" -d '{"model":"stories","messages":[{"role":"user","content":"x"}],"max_tokens":4,"ignore_eos":true}'
check "ignore_eos passes through: exactly max_tokens, finish length" \
  py "j['usage']['completion_tokens']==4 and j['choices'][0]['finish_reason']=='length'" <"$TMP/body"

# --- raw SSE framing -------------------------------------------------------------------
curl -sN "${A[@]}" "$URL/v1/chat/completions" -D "$TMP/sse.hdr" -o "$TMP/sse" \
  -d '{"model":"stories","messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}'
check "stream: Content-Type text/event-stream" grep -qi '^Content-Type: text/event-stream' "$TMP/sse.hdr"
check "stream: every event is 'data: …' + blank line, last is [DONE]" python3 - "$TMP/sse" <<'EOF'
import json, sys
raw = open(sys.argv[1]).read()
assert raw.endswith("data: [DONE]\n\n"), raw[-60:]
events = raw.split("\n\n")[:-1]
assert all(e.startswith("data: ") and "\n" not in e for e in events)
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
assert all("usage" in c for c in chunks)
EOF

# --- /tokenize and /detokenize (vLLM shapes), through the worker's tokenizer ------------------
P='Once upon a time, there was a little fox'
req POST /tokenize "${A[@]}" -d "{\"model\":\"stories\",\"prompt\":\"$P\"}"
cp "$TMP/body" "$TMP/tok.json"
req POST /v1/completions "${A[@]}" -d "{\"model\":\"stories\",\"prompt\":\"$P\",\"max_tokens\":1}"
check "/tokenize: tokens, count = usage.prompt_tokens of the same prompt, max_model_len" python3 -c "
import json; t = json.load(open('$TMP/tok.json')); c = json.load(open('$TMP/body'))
assert t['count'] == len(t['tokens']) == c['usage']['prompt_tokens'] > 0, (t, c['usage'])
assert t['max_model_len'] > 0 and all(isinstance(i, int) for i in t['tokens'])"
req POST /tokenize "${A[@]}" -d "{\"model\":\"stories\",\"prompt\":\"$P\",\"add_special_tokens\":false}"
cp "$TMP/body" "$TMP/tok_nobos.json"
check "/tokenize add_special_tokens false: the same ids without the leading BOS" python3 -c "
import json; a = json.load(open('$TMP/tok.json'))['tokens']; b = json.load(open('$TMP/tok_nobos.json'))['tokens']
assert a[1:] == b and len(a) == len(b) + 1, (a, b)"
req POST /detokenize "${A[@]}" -d "{\"model\":\"stories\",\"tokens\":$(python3 -c "import json; print(json.load(open('$TMP/tok_nobos.json'))['tokens'])")}"
check "/detokenize(/tokenize(text)) gives the text back" python3 -c "
import json; p = json.load(open('$TMP/body'))['prompt']; assert p.strip() == '$P', repr(p)"
req POST /tokenize "${A[@]}" -d '{"model":"stories","messages":[{"role":"user","content":"Hi"}]}'
cp "$TMP/body" "$TMP/tokc.json"
req POST /v1/chat/completions "${A[@]}" -d '{"model":"stories","messages":[{"role":"user","content":"Hi"}],"max_tokens":1}'
check "/tokenize with messages: the chat template is applied (count = chat usage.prompt_tokens)" python3 -c "
import json; t = json.load(open('$TMP/tokc.json')); c = json.load(open('$TMP/body'))
assert t['count'] == c['usage']['prompt_tokens'], (t['count'], c['usage'])"
req POST /detokenize "${A[@]}" -d '{"model":"stories","tokens":[1,99999999]}'
check "/detokenize of a token out of the vocabulary → 400" is_error 400 invalid_request_error
req POST /tokenize "${A[@]}" -d '{"model":"nope","prompt":"x"}'
check "/tokenize for an unknown model → 404 model_not_found" is_error 404 not_found_error model_not_found
req POST /tokenize -d '{"model":"stories","prompt":"x"}'
check "/tokenize needs a key like the API (401)" is_error 401 authentication_error

# --- batch route: tier low -----------------------------------------------------------------
OPS=(-H "Authorization: Bearer ops-secret")
low_count() { curl -s "${OPS[@]}" "$URL/metrics" | sed -n 's/^pagoda_requests_total{model_name="stories",tier="low"} //p'; }
low0=$(low_count)
req POST /v1/batch/chat/completions "${A[@]}" -d "$CHAT"
check "/v1/batch/chat/completions answers like chat (200)" py "j['object']=='chat.completion'" <"$TMP/body"
req POST /v1/batch/completions "${A[@]}" -d '{"model":"stories","prompt":"Once","max_tokens":3}'
check "/v1/batch/completions answers like completions (200)" py "j['object']=='text_completion'" <"$TMP/body"
metrics() { curl -s "${OPS[@]}" "$URL/metrics"; }
low1=$(low_count)
check "batch requests are counted at tier low although alice's key is high ($low0 → $low1)" \
  test "$low1" -eq $(( ${low0:-0} + 2 ))

# --- 504: stuck in the queue past --request-timeout (1 s) ----------------------------------------
# (the gateway runs with --heartbeat-ms 3000, so the stopped worker is not
# declared lost — and replaced by a supervisor restart that would answer
# the request — during this section, however slowly the machine runs it)
WPID=$(curl -s "$URL/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["workers"][0]["pid"])')
kill -STOP "$WPID"
for i in 1 2 3 4; do  # 4 slots: these take them
  curl -s -o /dev/null "${A[@]}" "$URL/v1/completions" -d '{"model":"stories","prompt":"Once","max_tokens":3}' &
done
running4() { curl -sf "$URL/health" | py "j['models']['stories']['running']==4"; }
wait_for 20 running4
t0=$(date +%s%3N)
req POST /v1/completions "${A[@]}" -d '{"model":"stories","prompt":"Once","max_tokens":3}'
dt=$(( $(date +%s%3N) - t0 ))
# not before its deadline; the upper bound only tells a deadline from a hang
check "queued past its deadline → 504 timeout after ${dt} ms" bash -c "[[ $CODE == 504 ]] && (( $dt >= 700 && $dt < 20000 ))"
check "504 body is OpenAI-shaped (server_error, timeout)" is_error 504 server_error timeout
kill -CONT "$WPID"
wait_for 5 bash -c "curl -s $URL/health | python3 -c \"import json,sys; sys.exit(0 if json.load(sys.stdin)['models']['stories']['running']==0 else 1)\""

# --- supervisor: a killed local worker comes back ---------------------------------------------------
kill -9 "$WPID"
newpid() { curl -s "$URL/health" | python3 -c "import json,sys; w=json.load(sys.stdin)['workers']; sys.exit(0 if w and w[0]['pid']!=$WPID else 1)"; }
check "kill -9 the local worker: the supervisor starts a new one that registers" wait_for 15 newpid
check "pagoda_worker_restarts_total{model_name=\"stories\"} is 1" \
  bash -c "curl -s -H 'Authorization: Bearer ops-secret' $URL/metrics | grep -q '^pagoda_worker_restarts_total{model_name=\"stories\"} 1$'"
req POST /v1/chat/completions "${A[@]}" -d "$CHAT"
check "the restarted worker serves requests" test "$CODE" = 200

# --- metrics after all that ------------------------------------------------------------------
metrics >"$TMP/metrics"
has() { grep -qE "$1" "$TMP/metrics"; }
check "metrics: request_success_total by finished_reason" has '^vllm:request_success_total\{model_name="stories",finished_reason="length"\} [1-9]'
check "metrics: TTFT, ITL, e2e and queue-time histograms observed" bash -c \
  "grep -qE '^vllm:time_to_first_token_seconds_count\{model_name=\"stories\"\} [1-9]' '$TMP/metrics' && grep -qE '^vllm:inter_token_latency_seconds_count\{model_name=\"stories\"\} [1-9]' '$TMP/metrics' && grep -qE '^vllm:e2e_request_latency_seconds_count\{model_name=\"stories\"\} [1-9]' '$TMP/metrics' && grep -qE '^vllm:request_queue_time_seconds_count\{model_name=\"stories\"\} [1-9]' '$TMP/metrics'"
check "metrics: prompt and generation tokens counted" bash -c \
  "grep -qE '^vllm:prompt_tokens_total\{model_name=\"stories\"\} [1-9]' '$TMP/metrics' && grep -qE '^vllm:generation_tokens_total\{model_name=\"stories\"\} [1-9]' '$TMP/metrics'"
check "metrics: running/waiting gauges and replicas" bash -c \
  "grep -qE '^vllm:num_requests_running\{model_name=\"stories\"\} 0' '$TMP/metrics' && grep -qE '^vllm:num_requests_waiting\{model_name=\"stories\"\} 0' '$TMP/metrics' && grep -qE '^pagoda_workers_connected\{model_name=\"stories\"\} 1' '$TMP/metrics'"
check "metrics: HTTP responses by code (401, 413, 504)" bash -c \
  "grep -qE '^pagoda_http_responses_total\{code=\"401\"\} [1-9]' '$TMP/metrics' && grep -qE '^pagoda_http_responses_total\{code=\"413\"\} 1' '$TMP/metrics' && grep -qE '^pagoda_http_responses_total\{code=\"504\"\} [1-9]' '$TMP/metrics'"

# --- an open gateway; a model whose only (hand-started) replica died → 503 -------------------------
HP2=$(free_port); ZP2=$(free_port)
URL=http://127.0.0.1:$HP2
spawn "$TMP/gw2.log" "$GW" --listen 127.0.0.1:$HP2 --worker-endpoint tcp://127.0.0.1:$ZP2 --replica-grace 0.5 --heartbeat-ms 200
check "open gateway (no --keys) logs that it is open" wait_for 5 grep -q 'open to anyone' "$TMP/gw2.log"
req GET /health
check "/health without workers → 503, status no_workers" bash -c "[[ $CODE == 503 ]] && grep -q no_workers '$TMP/body'"
spawn "$TMP/solo.log" "$WK" --gateway tcp://127.0.0.1:$ZP2 --model "solo=$MODEL_FILE" --heartbeat-ms 200
SOLO=$SPAWNED
check "a hand-started worker joins as a replica" wait_for 15 bash -c "curl -sf $URL/health | grep -q '\"solo\"'"
req POST /v1/chat/completions -d '{"model":"solo","messages":[{"role":"user","content":"Hi"}],"max_tokens":3}'
check "open gateway serves without a key (200)" test "$CODE" = 200
kill -9 "$SOLO"
# once the gateway has noticed (no replica left), a request waits out what
# is left of --replica-grace and gets 503
solo_gone() { curl -s "$URL/health" | py "j['models']['solo']['replicas']==0"; }
wait_for 20 solo_gone
req POST /v1/chat/completions -d '{"model":"solo","messages":[{"role":"user","content":"Hi"}],"max_tokens":3}'
check "its only replica died longer than --replica-grace ago → 503" is_error 503 server_error service_unavailable

kill -TERM "$GPID"
wait "$GPID"
rc=$?
check "gateway exits 0 on SIGTERM, stopping its worker (got $rc)" test "$rc" -eq 0
[[ $N_FAIL -gt 0 ]] && for f in "$TMP"/*.log; do echo "# --- $f"; tail -n 30 "$f" | sed 's/^/# /'; done
finish
