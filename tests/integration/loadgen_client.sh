#!/usr/bin/env bash
# loadgen_client.sh — tests/bench/loadgen.py (the independent Python load
# generator of vs_llamacpp.sh) against tests/bench/fake_server.mjs, whose
# delays, token counts and failures are known: counts, token accounting from
# usage and from chunks, fragmented SSE, closed-loop concurrency, error kinds,
# and latencies no shorter than the server's delays (lower bounds only: no
# check depends on the machine's speed). ~3 s.
source "$(dirname "$0")/../lib.sh"

LG=$ROOT/tests/bench/loadgen.py
if ! command -v node >/dev/null; then skip "node not installed: skipping loadgen.py tests"; exit 0; fi
source "$ROOT/tests/bench/fake_server_lib.sh"

fake basic --ttft-ms 50 --itl-ms 10 --fragment
U=http://127.0.0.1:$PORT_basic
$PY "$LG" --url "$U" --model fake -c 4 -n 12 --warmup 4 --words 24 --max-tokens 16 --json \
  --dump "$TMP/dump.jsonl" >"$TMP/basic.json" 2>"$TMP/basic.err"
check "plain run exits 0" test $? -eq 0
curl -sf "http://127.0.0.1:$PORT_basic/stats" >"$TMP/stats.json"
jcheck "12 ok, 0 errors" "$TMP/basic.json" 'd["ok"]==12 and d["errors"]==0'
jcheck "server saw 16 requests (4 warm-up), at most 4 at once (and 4 reached)" "$TMP/stats.json" \
  'd["requests"]==16 and d["max_in_flight"]==4'
jcheck "every request asked for ignore_eos, include_usage and max_tokens 16" "$TMP/stats.json" \
  'd["ignore_eos"]==16 and d["include_usage"]==16 and set(d["max_tokens_seen"])=={16}'
jcheck "16 distinct prompts" "$TMP/stats.json" 'd["distinct_prompts"]==16'
jcheck "tokens: 12 x 16 from usage and from the chunks of a fragmented stream" "$TMP/basic.json" \
  'd["output_tokens"]==192 and d["tokens_usage"]==192 and d["tokens_chunks"]==192 and d["usage_reported"]==12'
jcheck "prompt tokens = 24 words (server-reported)" "$TMP/basic.json" 'd["prompt_tokens_mean"]==24'
jcheck "TTFT p50 >= 50 ms, ITL p50 >= 9.5 ms, E2E p50 >= 200 ms (the server's delays)" "$TMP/basic.json" \
  'd["ttft_ms_p50"]>=50 and d["itl_ms_p50"]>=9.5 and d["e2e_ms_p50"]>=200'
jcheck "rate = tokens / wall" "$TMP/basic.json" 'abs(d["output_tok_per_s"]-192/d["wall_s"])<0.01*d["output_tok_per_s"]'
check "--dump wrote 12 lines" test "$(wc -l <"$TMP/dump.jsonl")" -eq 12

fake bad --ttft-ms 5 --itl-ms 1 --fail-500-every 3 --sse-error-every 5
$PY "$LG" --url "http://127.0.0.1:$PORT_bad" --model fake -c 2 -n 10 --max-tokens 8 --json >"$TMP/bad.json" 2>"$TMP/bad.err"
check "a run with some failures exits 0" test $? -eq 0
jcheck "10 requests: 3 HTTP 500 (every 3rd), 2 SSE errors (every 5th), 5 ok with 8 tokens each" "$TMP/bad.json" \
  'd["ok"]==5 and d["errors"]==5 and d["output_tokens"]==40 and sum(v for k,v in d["error_messages"].items() if k.startswith("HTTP 500"))==3 and sum(v for k,v in d["error_messages"].items() if "SSE error" in k)==2'

port=$(free_port)
$PY "$LG" --url "http://127.0.0.1:$port" --model fake -c 1 -n 2 --json >"$TMP/refused.json" 2>"$TMP/refused.err"
check "nothing listening: exit 1" test $? -eq 1
jcheck "nothing listening: 2 transport errors" "$TMP/refused.json" \
  'd["errors"]==2 and all(k.startswith("transport") for k in d["error_messages"])'
$PY "$LG" --url "http://127.0.0.1:$port" -c 0 >/dev/null 2>&1
check "-c 0 is a usage error (exit 2)" test $? -eq 2
finish
