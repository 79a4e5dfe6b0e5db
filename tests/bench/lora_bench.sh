#!/usr/bin/env bash
# lora_bench.sh — mixed LoRA adapters in one continuous batch (issue #39):
# 32 concurrent greedy streams spread over 8 adapters and the base model,
# against the same 32 streams on the base model alone, and optionally
# against llama-server with the same adapter files.
# Not part of `make test`: numbers depend on the machine (and its load).
#
# usage: tests/bench/lora_bench.sh [BASE.gguf]
#        LLAMA_SERVER=/work/ext/llama.cpp/build/bin/llama-server tests/bench/lora_bench.sh
#
# BASE defaults to the 110M-shape Q8_0 model (dim 768, 12 layers, 12 heads,
# FFN 2048, vocabulary 32000 with the stories260K tokenizer; docs/BENCH.md),
# made by pagoda-mkmodel as $BUILD/models/m110-q8_0.gguf when absent. The
# 1.1B-shape Q4_K_M model of tests/large/w1b.sh ($BUILD/models/w1b-q4_k_m.gguf)
# is the other size this was measured on.
# Adapters: a1..a8 from `pagoda-mkmodel --lora-for BASE` (llama.cpp's
# converter layout, F16, every projection), odd ones rank 8, even ones rank
# 64 with alpha 16. Stream i selects a((i mod 9) + 1), or the base model when
# i mod 9 = 8: a1..a5 get 4 streams, a6..a8 and the base 3.
# pagoda: one gateway (--model base=BASE --lora aK=FILE ..., --max-seqs 32,
# --threads THREADS), adapters chosen by model name. tests/bench/lora_bench.py
# runs REPS rounds of (mixed, base-only), prints each phase's tok/s and the
# best-of ratio mixed / base-only (the issue's bar: >= 0.8), then runs each
# mixed stream alone and checks its text equals the mixed run's (CHECK=0
# skips it). With LLAMA_SERVER set: llama-server -m BASE --lora a1 ... --lora
# a8 --parallel 32 -t THREADS, streams sending the same prompts and N to its
# native /completion with the per-request "lora" field; its mixed tok/s, each
# side's failed-request count and pagoda's ratio to it (bar: >= 3), or
# INVALID when any request failed on either side.
# Environment: PAGODA_BUILD (build), THREADS (2), N (32 new tokens per
# stream), WORDS (12 prompt words), REPS (2), CHECK (1), LLAMA_SERVER,
# LLAMA_ARGS (more llama-server flags, e.g. "--poll 0": its threads then
# sleep instead of spinning between steps, which matters on a loaded machine).
# GW_ARGS (more pagoda-gateway flags, e.g. "--step-budget-ms 0").
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PAGODA_BUILD:-$ROOT/build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
THREADS=${THREADS:-2}
N=${N:-32}
WORDS=${WORDS:-12}
REPS=${REPS:-2}
GW_ARGS=${GW_ARGS-}
CHECK=${CHECK:-1}
MK=$BUILD/pagoda-mkmodel
GW=$BUILD/pagoda-gateway
for b in "$MK" "$GW"; do [[ -x $b ]] || { echo "missing $b (make first)" >&2; exit 2; }; done

BASE=${1:-$BUILD/models/m110-q8_0.gguf}
# the 110M shape (docs/BENCH.md), stories260K's tokenizer padded to 32000 words
shape=(--type Q8_0 --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000 --ctx 2048 --seed 1)
tok=$ROOT/../shared/models/stories260K.gguf
if [[ ! -f $BASE ]]; then
  echo "# making $BASE (110M shape, Q8_0, seeded random weights)"
  mkdir -p "$(dirname "$BASE")" && "$MK" -o "$BASE.tmp" "${shape[@]}" --tokenizer-from "$([[ -f $tok ]] && echo "$tok" || echo builtin)" \
    >/dev/null && mv "$BASE.tmp" "$BASE" || { echo "pagoda-mkmodel failed" >&2; exit 1; }
fi
TMP=$(mktemp -d /tmp/lora_bench.XXXXXX)
GPID=
LPID=
trap '[[ -n $GPID ]] && kill "$GPID" 2>/dev/null; [[ -n $LPID ]] && kill "$LPID" 2>/dev/null' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

lora_args=()
llama_args=()
ids=
for k in 1 2 3 4 5 6 7 8; do
  if ((k % 2)); then rank=(--lora-rank 8); else rank=(--lora-rank 64 --lora-alpha 16); fi
  "$MK" --lora-for "$BASE" -o "$TMP/a$k.gguf" "${rank[@]}" --type F16 --seed $((100 + k)) >/dev/null 2>&1 ||
    { echo "pagoda-mkmodel --lora-for failed" >&2; exit 1; }
  lora_args+=(--lora "a$k=$TMP/a$k.gguf")
  llama_args+=(--lora "$TMP/a$k.gguf")
  ids+="${ids:+,}a$k:$((k - 1))"
done
assign=
for i in $(seq 0 31); do
  m=$((i % 9))
  if ((m == 8)); then s=base; else s=a$((m + 1)); fi
  assign+="${assign:+,}$s"
done
echo "# base: $BASE ($(du -mL "$BASE" | cut -f1) MiB); adapters a1..a8 (rank 8 / 64 alternating, F16): $(du -cm "$TMP"/a*.gguf | tail -1 | cut -f1) MiB"
echo "# 32 streams, $N new tokens each, greedy, ignore_eos, $THREADS threads; load: $(cut -d' ' -f1-3 /proc/loadavg)"
PY=(python3 "$ROOT/tests/bench/lora_bench.py" --assign "$assign" --n "$N" --words "$WORDS" --reps "$REPS")

HP=$(port)
ZP=$(port)
"$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" --model "base=$BASE" "${lora_args[@]}" \
  --threads "$THREADS" --max-seqs 32 $GW_ARGS >"$TMP/gw.log" 2>&1 &
GPID=$!
# ready when /health lists a registered worker (up to 5 minutes: a loaded machine)
has_worker() { curl -s "http://127.0.0.1:$HP/health" | python3 -c 'import json,sys; sys.exit(not json.load(sys.stdin)["workers"])'; }
t_end=$((SECONDS + 300))
until has_worker 2>/dev/null || ((SECONDS > t_end)); do sleep 0.5; done
chk=()
((CHECK)) && chk=(--check)
"${PY[@]}" --url "http://127.0.0.1:$HP" --label pagoda "${chk[@]}" | tee "$TMP/pagoda.txt"
rc=${PIPESTATUS[0]}
kill -TERM "$GPID"
wait "$GPID"
GPID=

if [[ -n ${LLAMA_SERVER:-} ]]; then
  if [[ ! -x $LLAMA_SERVER ]]; then
    echo "SKIP llama-server: $LLAMA_SERVER is not executable"
  else
    LP=$(port)
    # -c: 32 slots of (prompt + N + slack) tokens each (the 12-word prompts are
    # under 100 tokens with the 512-word stories260K vocabulary)
    # shellcheck disable=SC2086 # LLAMA_ARGS is a list of flags
    "$LLAMA_SERVER" -m "$BASE" "${llama_args[@]}" --parallel 32 -c $((32 * (N + 256))) -t "$THREADS" -tb "$THREADS" \
      --timeout 3600 --port "$LP" --host 127.0.0.1 --no-warmup ${LLAMA_ARGS:-} >"$TMP/llama.log" 2>&1 &
    LPID=$!
    for _ in $(seq 600); do curl -sf "http://127.0.0.1:$LP/health" >/dev/null 2>&1 && break; sleep 0.5; done
    "${PY[@]}" --url "http://127.0.0.1:$LP" --label llama-server --llama-ids "$ids" --reps 1 | tee "$TMP/llama.txt"
    kill -TERM "$LPID"
    wait "$LPID" 2>/dev/null
    LPID=
    # RESULT mixed adapters: both rates, each side's failed requests, and the
    # ratio only when no request failed on either side (INVALID otherwise)
    python3 - "$TMP/pagoda.txt" "$TMP/llama.txt" <<'PYEOF'
import re, sys
def side(path):
    m = re.search(r"^RESULT \S+ mixed ([0-9.]+) tok/s, .*failed (\d+)", open(path).read(), re.M)
    return (float(m.group(1)), int(m.group(2))) if m else (0.0, None)
(p, pf), (l, lf) = side(sys.argv[1]), side(sys.argv[2])
fails = f"failed requests: pagoda {'?' if pf is None else pf}, llama-server {'?' if lf is None else lf}"
if pf == 0 and lf == 0 and l > 0:
    print(f"RESULT mixed adapters: pagoda {p:.1f} tok/s, llama-server {l:.1f} tok/s, ratio {p / l:.2f} ({fails})")
else:
    print(f"RESULT mixed adapters: pagoda {p:.1f} tok/s, llama-server {l:.1f} tok/s, INVALID ({fails})")
PYEOF
  fi
fi
echo "# logs: $TMP"
exit "$rc"
