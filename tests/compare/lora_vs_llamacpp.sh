#!/usr/bin/env bash
# lora_vs_llamacpp.sh — pagoda and llama.cpp's llama-server on the same base
# models and LoRA adapters (made by pagoda-mkmodel --lora-for, llama.cpp's
# converter layout), compared as distributions: top-8 log-probabilities at
# every position, teacher forcing after a near-tie, and a tie rule measured on
# each base. Not part of `make test` (CI has no llama.cpp): skips with a
# message when llama-server is absent.
#
# usage: tests/compare/lora_vs_llamacpp.sh [LLAMA_BIN_DIR]
#        (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# Bases (BASES, space-separated; default all three that exist):
#   ../shared/models/stories260K.gguf (F32; else the generated stand-in
#     build/test-models/tiny-llama.gguf),
#   $BUILD/models/m110-q8_0.gguf  (110M shape, Q8_0: tests/bench/lora_bench.sh
#     makes it; docs/BENCH.md),
#   $BUILD/models/w1b-q4_k_m.gguf (1.1B shape, Q4_K_M: tests/large/w1b.sh).
# Per base: adapters rank 8 F32 (alpha = rank) and rank 64 F16 (alpha 16, so
# the scale rule alpha / rank = 0.25 matters), random A and B of standard
# deviation LORA_STD / sqrt(rank) (mkmodel's --lora-std; default 1.0: at its
# own default 0.5 the 1.1B adapters moved the first position's distribution
# by a median 0.41 nats, under 2 x the two programs' base-only distance
# there, so the comparison could not tell an adapter from none), loaded by both servers in the
# same order (ids 0 and 1); cases none (both at scale 0), a8 at scales 1 and
# 0.5, a64 at 1 and 0.5; three prompts each; N (32) positions each: 15 cases
# a base. pagoda: pagoda-gateway --model base=BASE --lora a8=... --lora
# a64=..., /v1/completions with "logprobs": 8 and the per-request "lora"
# list, its default kernels (PAGODA_FLAGS adds worker flags, e.g.
# --exact-matmul). llama-server: -m BASE --lora ... --lora ..., /completion
# with n_probs 8 and the same "lora" list. THREADS (2) for each (they take
# turns: one request at a time).
# The comparison, the distance, the measured tolerance (TOL_MULT x the
# base-only p99, default 2), teacher forcing, the DIST and EFFECT checks:
# tests/compare/lora_cmp.py (its docstring). REF=1 (default): a position
# where the two part past the tolerance is refereed by tests/ref/llama_ref.py
# in float64 (loaded only then; /usr/bin/python3 with NumPy; the 1.1B base
# takes ~9 GB): backed when the reference does not prefer llama-server's
# token by more than the tolerance. REF=0: such a position fails. Output: one line per case, then
# per base "PASS n/15 ..." or "FAIL n/15 ...".
set -u
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
B=${PAGODA_BUILD:-build}
N=${N:-32}
THREADS=${THREADS:-2}
TOL_MULT=${TOL_MULT:-2}
REF=${REF:-1}
LORA_STD=${LORA_STD:-1.0}
PAGODA_FLAGS=${PAGODA_FLAGS-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ ! -x "$LLAMA_BIN/llama-server" ]; then
    echo "SKIP: no $LLAMA_BIN/llama-server (build llama.cpp with its server to compare)"
    exit 0
fi
for b in pagoda-gateway pagoda-mkmodel; do
    [ -x "$B/$b" ] || { echo "FAIL: no $B/$b (make first)"; exit 1; }
done
if [ -z "${BASES:-}" ]; then
    s=$root/../shared/models/stories260K.gguf
    [ -f "$s" ] || s=$root/build/test-models/tiny-llama.gguf
    BASES=
    for f in "$s" "$B/models/m110-q8_0.gguf" "$B/models/w1b-q4_k_m.gguf"; do
        [ -f "$f" ] && BASES="$BASES $f"
    done
fi
[ -n "$BASES" ] || { echo "SKIP: no base model (make test-models writes the stand-in)"; exit 0; }
tmp=$(mktemp -d /tmp/pagoda-lora-cmp-XXXXXX)
srv= gw=
stop() {
    for p in $srv $gw; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    srv= gw=
}
trap 'stop; rm -rf "$tmp"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wflags=()
for f in $PAGODA_FLAGS; do wflags+=("--worker-arg=$f"); done
echo "# N=$N, $THREADS threads each, load: $(cut -d' ' -f1-3 /proc/loadavg)"
fail=0
summary=
for BASE in $BASES; do
    bn=$(basename "$BASE")
    "$B/pagoda-mkmodel" --lora-for "$BASE" -o "$tmp/a8.gguf" --lora-rank 8 --lora-std "$LORA_STD" --seed 3 \
        >/dev/null 2>&1 || exit 1
    "$B/pagoda-mkmodel" --lora-for "$BASE" -o "$tmp/a64.gguf" --lora-rank 64 --lora-alpha 16 --type F16 \
        --lora-std "$LORA_STD" --seed 4 \
        >/dev/null 2>&1 || exit 1
    lp=$(port) hp=$(port) zp=$(port)
    "$LLAMA_BIN/llama-server" -m "$BASE" --lora "$tmp/a8.gguf" --lora "$tmp/a64.gguf" -t "$THREADS" -c 2048 \
        --port "$lp" --no-warmup >"$tmp/srv.log" 2>&1 &
    srv=$!
    "$B/pagoda-gateway" --listen "127.0.0.1:$hp" --worker-endpoint "tcp://127.0.0.1:$zp" --model "base=$BASE" \
        --lora "a8=$tmp/a8.gguf" --lora "a64=$tmp/a64.gguf" --threads "$THREADS" --max-seqs 4 \
        ${wflags[@]+"${wflags[@]}"} >"$tmp/gw.log" 2>&1 &
    gw=$!
    up() {
        curl -sf "127.0.0.1:$lp/health" >/dev/null &&
            curl -s "127.0.0.1:$hp/health" | python3 -c 'import json,sys; sys.exit(not json.load(sys.stdin)["workers"])' 2>/dev/null
    }
    for _ in $(seq 600); do up && break; sleep 1; done
    up || { echo "FAIL $bn: the servers did not start"; tail -5 "$tmp/srv.log" "$tmp/gw.log"; exit 1; }
    ref=()
    [ "$REF" = 1 ] && ref=(--ref-model "$BASE" --a8 "$tmp/a8.gguf" --a64 "$tmp/a64.gguf")
    /usr/bin/python3 "$here/lora_cmp.py" --pagoda "http://127.0.0.1:$hp" --llama "http://127.0.0.1:$lp" --name "$bn" \
        --n "$N" --tol-mult "$TOL_MULT" ${ref[@]+"${ref[@]}"} | tee "$tmp/out.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || fail=1
    stop
    summary="$summary$(grep -E '^(PASS|FAIL) [^ ]+: ' "$tmp/out.txt" | tail -1)"$'\n'
done
echo "# summary"
printf %s "$summary"
[ $fail = 0 ] && echo "PASS: pagoda == llama-server on every base, adapter, scale and prompt (within the measured tolerance)"
exit $fail
