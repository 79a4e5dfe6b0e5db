#!/usr/bin/env bash
# bench_client.sh — pagoda-bench (the load-generating client) against
# tests/bench/fake_server.mjs, a tiny streaming server whose delays, token
# counts and failures are known, so every number the client reports can be
# checked against what the server did (its /stats) or was told to do.
source "$(dirname "$0")/../lib.sh"

BENCH=$BUILD/pagoda-bench
if [[ ! -x $BENCH ]]; then fail "$BENCH not built"; finish; fi
if ! command -v node >/dev/null; then skip "node not installed: skipping pagoda-bench tests"; exit 0; fi
source "$ROOT/tests/bench/fake_server_lib.sh"
stats() { curl -sf "http://127.0.0.1:$1/stats" >"$2"; }
bench() { "$BENCH" --model fake --no-progress "$@"; }

# ---- plain run: counts, token accounting, timing -------------------------
fake basic --ttft-ms 50 --itl-ms 10
U=http://127.0.0.1:$PORT_basic
bench --url "$U" -c 4 -n 20 --max-tokens 16 --prompt-tokens 24 --ignore-eos --json \
  --dump "$TMP/dump.jsonl" >"$TMP/basic.json" 2>"$TMP/basic.err"
check "plain run exits 0" test $? -eq 0
stats "$PORT_basic" "$TMP/basic_stats.json"
jcheck "-n 20 -c 4: 20 ok, 0 errors" "$TMP/basic.json" 'd["requests_ok"]==20 and d["requests_err"]==0'
jcheck "server saw exactly 20 requests, at most 4 at once (and 4 reached)" "$TMP/basic_stats.json" \
  'd["requests"]==20 and d["max_in_flight"]==4'
jcheck "every request asked for ignore_eos, include_usage and max_tokens 16" "$TMP/basic_stats.json" \
  'd["ignore_eos"]==20 and d["include_usage"]==20 and set(d["max_tokens_seen"])=={16}'
jcheck "20 distinct prompts with 20 distinct 16-word prefixes" "$TMP/basic_stats.json" \
  'd["distinct_prompts"]==20 and d["distinct_prefixes"]==20'
jcheck "output tokens = 20 x 16 from usage" "$TMP/basic.json" \
  'd["output_tokens"]==320 and d["output_tokens_source"]=="usage"'
jcheck "prompt tokens mean = 24 (server-reported word count)" "$TMP/basic.json" \
  'd["prompt_tokens_mean"]==24 and d["prompt_tokens_source"]=="usage"'
# Timing checks are causal lower bounds only (a token cannot arrive before the
# server sends it; how much later is the machine's load, printed, not checked).
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print("# TTFT p50 %.1f ms, ITL p50 %.1f ms, E2E p50 %.1f ms (server: 50 ms, every 10 ms, 50 + 15 x 10 ms)" % (
    d["ttft_ms"]["p50"], d["itl_ms"]["p50"], d["e2e_ms"]["p50"]))' "$TMP/basic.json"
jcheck "TTFT of every request >= 45 ms (server waits 50 ms before the first token)" "$TMP/basic.json" \
  '45<=d["ttft_ms"]["min"] and d["ttft_ms"]["n"]==20'
jcheck "ITL: 20x15 gaps" "$TMP/basic.json" 'd["itl_ms"]["n"]==300'
jcheck "E2E of every request >= 190 ms (the last token is sent at 50 + 15 x 10 ms)" "$TMP/basic.json" \
  '190<=d["e2e_ms"]["min"]'
jcheck "ordering p50<=p90<=p99<=max for every latency" "$TMP/basic.json" \
  'all(d[k]["min"]<=d[k]["p50"]<=d[k]["p90"]<=d[k]["p99"]<=d[k]["max"] for k in ("ttft_ms","itl_ms","tpot_ms","e2e_ms"))'
jcheck "rates are counts / duration" "$TMP/basic.json" \
  'abs(d["req_per_s"]*d["duration_s"]-20)<1e-6 and abs(d["output_tok_per_s"]*d["duration_s"]-320)<1e-6 and abs(d["prompt_tok_per_s"]*d["duration_s"]-480)<1e-6'
# duration is bounded below by 5 rounds of 4 requests, each >= 200 ms
jcheck "duration >= 5 rounds x 0.2 s" "$TMP/basic.json" '1.0<=d["duration_s"]'

# Percentiles recomputed independently (numpy) from the per-request dump.
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 - "$TMP/dump.jsonl" "$TMP/basic.json" >"$TMP/numpy.out" 2>&1 <<'PYEOF'
import json, sys, numpy as np
recs = [json.loads(l) for l in open(sys.argv[1])]
d = json.load(open(sys.argv[2]))
assert len(recs) == 20, len(recs)
ttft = np.array([r["ttft_ms"] for r in recs]); e2e = np.array([r["e2e_ms"] for r in recs])
itl = np.array([g for r in recs for g in r["itl_ms"]])
tpot = np.array([(r["e2e_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1) for r in recs])
bad = []
for name, x in (("ttft_ms", ttft), ("itl_ms", itl), ("e2e_ms", e2e), ("tpot_ms", tpot)):
    for p in (50, 90, 99):
        want, got = np.percentile(x, p), d[name]["p%d" % p]
        if abs(want - got) > 1e-6 * max(1, abs(want)): bad.append((name, p, want, got))
    if abs(x.mean() - d[name]["mean"]) > 1e-6 * max(1, abs(x.mean())): bad.append((name, "mean"))
print("mismatch", bad) if bad else print("match")
PYEOF
  check "p50/p90/p99/mean of TTFT, ITL, TPOT, E2E match numpy on the --dump records (1e-6)" \
    grep -qx match "$TMP/numpy.out"
  [[ -s $TMP/numpy.out ]] && ! grep -qx match "$TMP/numpy.out" && cat "$TMP/numpy.out"
else
  skip "/usr/bin/python3 has no numpy: percentile cross-check skipped"
fi

# ---- human table ----------------------------------------------------------
bench --url "$U" -c 2 -n 4 --max-tokens 4 --prompt-tokens 8 >"$TMP/human.txt" 2>&1
check "human table has TTFT/ITL/TPOT/E2E rows and '4 ok, 0 errors'" \
  bash -c "grep -q '4 ok, 0 errors' '$TMP/human.txt' && grep -qE '^  TTFT +[0-9]' '$TMP/human.txt' && grep -qE '^  ITL +[0-9]' '$TMP/human.txt' && grep -qE '^  E2E +[0-9]' '$TMP/human.txt'"

# ---- errors: 500, 429 and SSE error events -------------------------------
fake errs --ttft-ms 20 --itl-ms 5 --fail-500-every 5 --fail-429-every 7 --sse-error-every 11
bench --url "http://127.0.0.1:$PORT_errs" -c 4 -n 40 --max-tokens 8 --prompt-tokens 8 --json \
  >"$TMP/errs.json" 2>/dev/null
check "run with some failures exits 0" test $? -eq 0
# expected from the server's rule: arrival k fails with 500 if 5|k, else 429 if 7|k,
# else streams 2 tokens and an SSE error if 11|k
read -r E500 E429 ESSE < <($PY -c '
ks=range(1,41); a=[k for k in ks if k%5==0]; b=[k for k in ks if k%5 and k%7==0]
c=[k for k in ks if k%5 and k%7 and k%11==0]; print(len(a),len(b),len(c))')
jcheck "errors counted: ok = 40 - $E500 - $E429 - $ESSE" "$TMP/errs.json" \
  "d['requests_err']==$((E500 + E429 + ESSE)) and d['requests_ok']==$((40 - E500 - E429 - ESSE))"
jcheck "distinct messages with counts (500: $E500, 429: $E429, SSE: $ESSE)" "$TMP/errs.json" \
  "{e['message']:e['count'] for e in d['errors']}=={'HTTP 500: fake internal failure':$E500,'HTTP 429: fake queue full':$E429,'SSE error: fake worker crashed':$ESSE}"
jcheck "failed requests' tokens are not counted" "$TMP/errs.json" \
  "d['output_tokens']==8*d['requests_ok'] and d['e2e_ms']['n']==d['requests_ok']"
bench --url "http://127.0.0.1:$PORT_errs" -c 4 -n 40 --max-tokens 8 --prompt-tokens 8 >"$TMP/errs.txt" 2>&1
check "human output lists the distinct errors" \
  bash -c "grep -q 'x HTTP 500: fake internal failure' '$TMP/errs.txt' && grep -q 'x SSE error: fake worker crashed' '$TMP/errs.txt'"

# ---- chat, fragmented SSE with CRLF --------------------------------------
fake frag --ttft-ms 30 --itl-ms 10 --fragment
bench --url "http://127.0.0.1:$PORT_frag" --chat -c 3 -n 9 --max-tokens 12 --prompt-tokens 16 \
  --ignore-eos --json >"$TMP/frag.json" 2>/dev/null
jcheck "chat over a stream cut in 1-7 byte pieces (CRLF on half): 9 ok, 12 tokens each" "$TMP/frag.json" \
  'd["requests_ok"]==9 and d["output_tokens"]==108 and d["endpoint"]=="chat"'
jcheck "chat: role-only first chunk is not the first token (TTFT p50 >= 28 ms), 11 gaps each" "$TMP/frag.json" \
  'd["ttft_ms"]["p50"]>=28 and d["itl_ms"]["n"]==99'

# ---- ignore_eos makes the length exact; without it the server may stop early ----
fake eos --ttft-ms 10 --itl-ms 2 --eos-after 5
bench --url "http://127.0.0.1:$PORT_eos" -c 2 -n 4 --max-tokens 20 --json >"$TMP/eos0.json" 2>/dev/null
bench --url "http://127.0.0.1:$PORT_eos" -c 2 -n 4 --max-tokens 20 --ignore-eos --json >"$TMP/eos1.json" 2>/dev/null
jcheck "without --ignore-eos the server stops at its EOS (5 tokens)" "$TMP/eos0.json" 'd["output_tokens_mean"]==5'
jcheck "with --ignore-eos every request makes max_tokens (20)" "$TMP/eos1.json" 'd["output_tokens_mean"]==20'

# ---- shared prefix --------------------------------------------------------
fake shared --ttft-ms 5 --itl-ms 1
bench --url "http://127.0.0.1:$PORT_shared" -c 4 -n 12 --max-tokens 2 --prompt-tokens 40 \
  --shared-prefix --json >/dev/null 2>&1
stats "$PORT_shared" "$TMP/shared_stats.json"
jcheck "--shared-prefix: 12 distinct prompts, 1 distinct 16-word prefix" "$TMP/shared_stats.json" \
  'd["distinct_prompts"]==12 and d["distinct_prefixes"]==1'
# the fake reports as cached the words shared with the previous prompt: 32 of 40
# for every request but the first with --shared-prefix, ~0 without
# (another seed, so the first prompt shares nothing with the run above; a tail word
# may match by chance, 1 in 120)
bench --url "http://127.0.0.1:$PORT_shared" -c 1 -n 6 --max-tokens 2 --prompt-tokens 40 \
  --shared-prefix --seed 5 --json >"$TMP/shared.json" 2>/dev/null
jcheck "--shared-prefix: cached_prompt_tokens ~ 5 x 32 (usage.prompt_tokens_details)" "$TMP/shared.json" \
  '160<=d["cached_prompt_tokens"]<=170'
bench --url "http://127.0.0.1:$PORT_shared" -c 1 -n 6 --max-tokens 2 --prompt-tokens 40 \
  --json >"$TMP/unshared.json" 2>/dev/null
jcheck "default prompts: almost nothing cached (< 5 of 240 tokens)" "$TMP/unshared.json" \
  'd["cached_prompt_tokens"]<5'

# ---- warm-up is sent but not counted --------------------------------------
fake warm --ttft-ms 5 --itl-ms 1
bench --url "http://127.0.0.1:$PORT_warm" -c 2 -n 5 --warmup 3 --max-tokens 2 --json >"$TMP/warm.json" 2>/dev/null
stats "$PORT_warm" "$TMP/warm_stats.json"
jcheck "--warmup 3 -n 5: server got 8 requests" "$TMP/warm_stats.json" 'd["requests"]==8'
jcheck "--warmup 3 -n 5: 5 counted" "$TMP/warm.json" 'd["requests_ok"]==5 and d["e2e_ms"]["n"]==5'

# ---- API key ---------------------------------------------------------------
fake key --ttft-ms 5 --itl-ms 1 --api-key s3cret
bench --url "http://127.0.0.1:$PORT_key" -n 3 --max-tokens 2 --json >"$TMP/key0.json" 2>/dev/null
rc=$?
check "no key: exit status 1 (no request succeeded)" test $rc -eq 1
jcheck "no key: 3 x HTTP 401" "$TMP/key0.json" 'd["requests_err"]==3 and d["errors"][0]["message"]=="HTTP 401: bad api key"'
bench --url "http://127.0.0.1:$PORT_key" -n 3 --max-tokens 2 --api-key s3cret --json >"$TMP/key1.json" 2>/dev/null
jcheck "--api-key sends Authorization: Bearer" "$TMP/key1.json" 'd["requests_ok"]==3'

# ---- transport failures ---------------------------------------------------
DEAD=$(free_port)
bench --url "http://127.0.0.1:$DEAD" -c 2 -n 4 --max-tokens 2 --json >"$TMP/dead.json" 2>/dev/null
rc=$?
check "nothing listening: exit status 1" test $rc -eq 1
jcheck "nothing listening: 4 transport errors" "$TMP/dead.json" \
  'd["requests_err"]==4 and d["errors"][0]["message"].startswith("transport: ")'
bench --url "$U" -c 2 -n 2 --max-tokens 100 --timeout 0.3 --json >"$TMP/timeout.json" 2>/dev/null
jcheck "--timeout 0.3 against 1 s streams: 2 timeouts" "$TMP/timeout.json" \
  'd["requests_err"]==2 and "transport: " in d["errors"][0]["message"] and d["requests_ok"]==0'

# ---- open loop: Poisson arrivals --------------------------------------------
fake rate --ttft-ms 20 --itl-ms 10
bench --url "http://127.0.0.1:$PORT_rate" --rate 40 -n 30 --max-tokens 10 --seed 3 --json \
  >"$TMP/rate.json" 2>/dev/null
stats "$PORT_rate" "$TMP/rate_stats.json"
jcheck "--rate 40 -n 30: 30 ok, rate recorded" "$TMP/rate.json" 'd["requests_ok"]==30 and d["rate"]==40'
# each request lasts ~0.11 s; at 40/s about 4-5 overlap (on an idle machine;
# printed: a loaded one stretches each request, so more overlap)
python3 -c 'import json,sys; print("# --rate 40: the server saw at most %d at once" % json.load(open(sys.argv[1]))["max_in_flight"])' \
  "$TMP/rate_stats.json"
jcheck "--rate 40: 30 seeded arrivals take about 29/40 s (duration >= 0.3 s)" "$TMP/rate.json" \
  '0.3<=d["duration_s"]'

# ---- many concurrent streams on one thread ----------------------------------
# (slow streams: 1.35 s each, so all 256 are open at once even if connecting is slow)
fake wide --ttft-ms 1000 --itl-ms 50
bench --url "http://127.0.0.1:$PORT_wide" -c 256 -n 512 --max-tokens 8 --prompt-tokens 8 \
  --ignore-eos --json >"$TMP/wide.json" 2>"$TMP/wide.err"
stats "$PORT_wide" "$TMP/wide_stats.json"
jcheck "-c 256 -n 512: 512 ok" "$TMP/wide.json" 'd["requests_ok"]==512 and d["output_tokens"]==4096'
jcheck "-c 256: the server saw 256 streams at once" "$TMP/wide_stats.json" 'd["max_in_flight"]==256'

# ---- sweep, chart ---------------------------------------------------------
bench --url "$U" --sweep 1,2,4 -n 4 --max-tokens 4 --prompt-tokens 8 --json \
  --chart "$TMP/sweep.png" >"$TMP/sweep.json" 2>"$TMP/sweep.err"
jcheck "--sweep 1,2,4 --json: array of 3 runs at c=1,2,4, all ok" "$TMP/sweep.json" \
  '[r["concurrency"] for r in d]==[1,2,4] and all(r["requests_ok"]==4 for r in d)'
if command -v gnuplot >/dev/null; then
  check "--sweep writes a PNG chart" \
    bash -c "[[ \$(head -c 8 '$TMP/sweep.png' | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]"
else
  skip "gnuplot not installed: chart not checked"
fi
env PATH=/nonexistent "$BENCH" --model fake --no-progress --url "$U" --sweep 1,2 -n 2 --max-tokens 2 \
  --chart "$TMP/nochart.png" >"$TMP/nognuplot.out" 2>"$TMP/nognuplot.err"
rc=$?
check "without gnuplot: warning, no chart, exit 0" \
  bash -c "[[ $rc -eq 0 && ! -e '$TMP/nochart.png' ]] && grep -q 'gnuplot not found' '$TMP/nognuplot.err'"

# ---- compare: baseline server twice as slow per token ---------------------
fake slow --ttft-ms 50 --itl-ms 20
bench --url "$U" --compare --baseline-url "http://127.0.0.1:$PORT_slow" -c 2 -n 6 --max-tokens 16 \
  --ignore-eos --json >"$TMP/cmp.json" 2>/dev/null
# e2e 50+15*20=350 ms vs 50+15*10=200 ms: about 1.75x on an idle machine (printed;
# the check is that the speedup is the two runs' own ratio)
python3 -c 'import json,sys; print("# --compare: speedup %.2fx in output tok/s" % json.load(open(sys.argv[1]))["speedup"]["output_tok_per_s"])' \
  "$TMP/cmp.json"
jcheck "--compare: both runs complete, speedup = main / baseline output tok/s" "$TMP/cmp.json" \
  'd["baseline"]["requests_ok"]==6 and d["main"]["requests_ok"]==6 and abs(d["speedup"]["output_tok_per_s"]*d["baseline"]["output_tok_per_s"]-d["main"]["output_tok_per_s"])<=1e-6*d["main"]["output_tok_per_s"]'
bench --url "$U" --compare --baseline-url "http://127.0.0.1:$PORT_slow" -c 2 -n 4 --max-tokens 8 >"$TMP/cmp.txt" 2>&1
check "--compare human output prints the speedup" grep -qE 'speedup of .* over baseline' "$TMP/cmp.txt"

# ---- default model from GET /v1/models ------------------------------------------
"$BENCH" --no-progress --url "$U/v1" -n 2 --max-tokens 2 --json >"$TMP/nomodel.json" 2>/dev/null
jcheck "no --model: the first id of /v1/models is used" "$TMP/nomodel.json" \
  'd["model"]=="fake-model" and d["requests_ok"]==2'

# ---- usage errors -------------------------------------------------------------
"$BENCH" --model x >/dev/null 2>&1; rc1=$?  # no --url
"$BENCH" --url "$U" --model x -c 0 >/dev/null 2>&1; rc2=$?
"$BENCH" --url "$U" --model x --compare >/dev/null 2>&1; rc3=$?
"$BENCH" --url "$U" --model x --sweep 1,,x >/dev/null 2>&1; rc4=$?
check "bad usage exits 2 (no --url, -c 0, --compare without baseline, bad --sweep)" \
  test "$rc1$rc2$rc3$rc4" = 2222
finish
