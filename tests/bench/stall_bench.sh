#!/usr/bin/env bash
# stall_bench.sh — stall-free serving (issue #38): running streams' inter-token
# gaps while long prompts prefill, and a high-tier request's TTFT during a
# low-tier prefill, with the worker's step time budget off and on.
# Not part of `make test`: numbers depend on the machine (and its load).
#
# usage: tests/bench/stall_bench.sh [MODEL.gguf]
#        URL=http://127.0.0.1:8081 tests/bench/stall_bench.sh    (any OpenAI-compatible
#                                    server, e.g. llama-server: no gateway is started)
#
# MODEL defaults to the 1.1B-shape Q4_K_M model tests/large/w1b.sh makes
# ($BUILD/models/w1b-q4_k_m.gguf; made here the same way when absent). For
# each BUDGETS value (default "0 auto": the token budget only, then the time
# budget) a gateway is started with two API keys (high and low tier) and
# --step-budget-ms VALUE passed to its supervised worker, and
# tests/bench/stall_bench.py runs both scenarios against it:
#   interference: STREAMS (8) decoding streams, then LONG (2) prompts of
#                 WORDS (560; ~1,300 tokens) words arrive: gap p50/p99 before / during,
#                 the long prompts' TTFT;
#   priority:     a short high-tier request DELAY (1.0) s into a low-tier
#                 prefill of WORDS words: its TTFT vs on the idle server,
#                 medians of REPS (1; the idle one of max(REPS, 3)); the low
#                 prompt is cancelled once the high one's first token is in
#                 (CANCEL=0 waits for the low prompt's own first token).
# BUDGETS values are --step-budget-ms values: 0 is the token budget alone
# (MAX_BATCH_TOKENS rows a step, the "token budget of 512" of issue #38),
# auto the default, N a fixed N ms target (BUDGETS=512 is a 512 ms target,
# not the token budget). REPS repeats the priority scenario only; run the
# script again for more interference samples. With PAGODA_LOG=debug in the
# environment the worker logs one "step cost:" line per step (rows, target,
# predicted and measured ms; docs/BATCHING.md) into the kept gw-B.log.
# Environment: PAGODA_BUILD (build), THREADS (2), MAX_BATCH_TOKENS (512),
# BUDGETS, STREAMS, LONG, WORDS, SETTLE (8), DELAY, REPS, CANCEL (1), URL,
# MODEL_NAME (for URL), MODE (both; interference or priority runs one
# scenario), KV_MB (the worker's --kv-budget-mb; empty = sized from free
# memory), GW_ARGS (more gateway flags).
#
# The priority bar of issue #38 (a 7B-shape Q4_K_M file, an ~8,000-token low prompt):
#   MODE=priority BUDGETS=auto WORDS=8000 REPS=3 KV_MB=2048 \
#     tests/bench/stall_bench.sh /work/models/m7b-q4_k_m.gguf
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PAGODA_BUILD:-$ROOT/build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
PY="python3 $ROOT/tests/bench/stall_bench.py --streams ${STREAMS:-8} --long ${LONG:-2} \
  --long-words ${WORDS:-560} --settle ${SETTLE:-8} --delay ${DELAY:-1.0} --mode ${MODE:-both} --reps ${REPS:-1}"
[[ ${CANCEL:-1} == 0 ]] && PY="$PY --no-cancel"

if [[ -n ${URL:-} ]]; then
  exec $PY --url "$URL" --model "${MODEL_NAME:-}" --label "$URL"
fi

MODEL=${1:-$BUILD/models/w1b-q4_k_m.gguf}
if [[ ! -f $MODEL ]]; then
  TOK=$ROOT/../shared/models/stories260K.gguf
  [[ -f $TOK ]] || TOK=builtin
  mkdir -p "$(dirname "$MODEL")"
  echo "# making $MODEL (1.1B shape, Q4_K_M, seeded random weights)"
  "$BUILD/pagoda-mkmodel" -o "$MODEL.tmp" --type Q4_K_M --dim 2048 --layers 22 --heads 32 \
    --kv-heads 4 --ffn 5632 --vocab 32000 --ctx 2048 --seed 1 --tokenizer-from "$TOK" >/dev/null &&
    mv "$MODEL.tmp" "$MODEL" || { echo "pagoda-mkmodel failed" >&2; exit 1; }
fi
TMP=$(mktemp -d /tmp/stall_bench.XXXXXX)
GW=$BUILD/pagoda-gateway
SEC_H=stall-bench-high-secret-0123456789
SEC_L=stall-bench-low-secret-0123456789
{ "$GW" --hash-key hi:high --secret "$SEC_H"; "$GW" --hash-key lo:low --secret "$SEC_L"; } |
  grep -v '^#' >"$TMP/keys.txt"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for B in ${BUDGETS:-0 auto}; do
  HP=$(port)
  ZP=$(port)
  GB=$B
  [[ $B == auto ]] && GB=-1
  "$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" --keys "$TMP/keys.txt" \
    --model "m=$MODEL" --threads "${THREADS:-2}" --max-batch-tokens "${MAX_BATCH_TOKENS:-512}" \
    --step-budget-ms "$GB" ${KV_MB:+--kv-budget-mb "$KV_MB"} ${GW_ARGS:-} >"$TMP/gw-$B.log" 2>&1 &
  GPID=$!
  for _ in $(seq 600); do
    curl -s "http://127.0.0.1:$HP/health" 2>/dev/null |
      python3 -c 'import json,sys; sys.exit(not json.load(sys.stdin)["workers"])' 2>/dev/null && break
    sleep 0.5
  done
  echo "# $(grep -m1 -o 'scheduler: .*' "$TMP/gw-$B.log")"
  $PY --url "http://127.0.0.1:$HP" --model m --key-high "$SEC_H" --key-low "$SEC_L" \
    --label "pagoda step-budget-ms=$B"
  kill -TERM "$GPID"
  wait "$GPID"
done
echo "# logs: $TMP"
