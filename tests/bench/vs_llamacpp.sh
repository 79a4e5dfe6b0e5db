#!/usr/bin/env bash
# vs_llamacpp.sh — pagoda and llama.cpp side by side: one run, the same
# machine, the same GGUF file, the same thread count. Not part of `make test`
# (it takes minutes per model and needs a llama.cpp build).
#
# usage: tests/bench/vs_llamacpp.sh LLAMA_BUILD_DIR MODEL.gguf [MODEL.gguf ...]
#
# LLAMA_BUILD_DIR is a llama.cpp CMake build directory (CPU only, e.g.
# `cmake -B build -DGGML_NATIVE=ON && cmake --build build`); its bin/ must
# hold llama-server and llama-bench. For every model, one after the other:
#
#   1. llama-server -np 32 -t THREADS on 127.0.0.1, driven by pagoda-bench:
#      1 stream (N1 requests) and 32 streams (N32 requests), each request a
#      PROMPT_WORDS-word prompt (~32 tokens; the mean prompt_tokens each
#      server reported is printed), 64 new tokens, ignore_eos; then stopped;
#   2. pagoda-gateway --model m=FILE --max-seqs 32 --threads THREADS, the
#      same two loads; then stopped;
#   3. llama-bench -p 512 -n TG -t THREADS (pp512, tgTG, mean of LB_REPS);
#   4. pagoda-run --bench --seqs 1 --prompt-tokens 512 -n 1 (prefill of
#      one 512-token sequence, against pp512) and --prompt-tokens 1 -n TG
#      (decode from an empty context, as llama-bench's tgTG does).
#
# Failed requests (llama-server rejects some random-model outputs with "does not
# match the expected Content-only format") count as if they had produced all
# their tokens: the failing side's rate is an upper bound, never a discount.
#
# Output: a table per run (pagoda, llama.cpp, ratio pagoda / llama.cpp) with
# the load average before each model, and with RUNS > 1 the median of each
# ratio over the runs (ratios are taken within a run, so a slow period hits
# both sides). Output tok/s = generated tokens / wall time of the measured
# requests, prefill included, as pagoda-bench reports it (docs/BENCH.md).
#
# Wait policy: llama.cpp's threads poll for work by default (--poll 50);
# pagoda's OpenMP threads spin ~25 us, then sleep (GOMP_SPINCOUNT=1000,
# docs/FORWARD.md). Both llama-server and llama-bench get --poll LLAMA_POLL,
# default 50 (llama.cpp's own default); LLAMA_POLL=0 stops its polling
# between graphs. On an oversubscribed machine llama.cpp with 2 threads still
# collapses (its barriers between graph nodes spin: the 110M Q8_0 model
# decoded at 0.8-1.1 tok/s in llama-server at load 20, --poll 0 or 50,
# against ~42 tok/s with -t 1); THREADS=1 then gives a comparison that
# measures the kernels rather than the scheduler of the host.
#
# Environment: PAGODA_BUILD (build), THREADS (2), RUNS (1), N1 (8), N32 (64),
# W32 (32: warm-up requests of the 32-stream load, not counted),
# PROMPT_WORDS (9: ~32 tokens with the stories260K tokenizer the generated
# test models carry; 24 is ~32 tokens with a llama-2 tokenizer), TG (32),
# LB_REPS (3), PAGODA_ISA (forces pagoda's int8 kernel path, docs/FORWARD.md),
# OUT (directory for logs and JSON; default a new one under /tmp, kept).
set -uo pipefail

if (($# < 2)); then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
LLAMA=$1; shift
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PAGODA_BUILD:-$ROOT/build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
THREADS=${THREADS:-2}
RUNS=${RUNS:-1}
N1=${N1:-8}
N32=${N32:-64}
W32=${W32:-32}
LLAMA_POLL=${LLAMA_POLL:-50}
PROMPT_WORDS=${PROMPT_WORDS:-9}
TG=${TG:-32}
LB_REPS=${LB_REPS:-3}
OUT=${OUT:-$(mktemp -d /tmp/vs_llamacpp.XXXXXX)}
mkdir -p "$OUT"

for b in "$LLAMA/bin/llama-server" "$LLAMA/bin/llama-bench" "$BUILD/pagoda-gateway" "$BUILD/pagoda-worker" \
         "$BUILD/pagoda-bench" "$BUILD/pagoda-run"; do
  [[ -x $b ]] || { echo "missing $b" >&2; exit 2; }
done
for m in "$@"; do [[ -f $m ]] || { echo "missing model $m" >&2; exit 2; }; done

PID=
stop() {
  [[ -n $PID ]] || return 0
  kill -TERM "$PID" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
  PID=
}
trap stop EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_ok SECONDS URL PYTHON-CONDITION-ON-j : poll a JSON endpoint
wait_ok() {
  local limit=$1 url=$2 cond=$3 deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    kill -0 "$PID" 2>/dev/null || return 1
    curl -sf "$url" 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($cond) else 1)" \
      2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}

# load URL MODEL TAG: the 1- and 32-stream loads, JSON into $OUT/TAG-c{1,32}.json
load() {
  local url=$1 model=$2 tag=$3
  "$BUILD/pagoda-bench" --url "$url" --model "$model" -c 1 -n "$N1" --warmup 1 --max-tokens 64 \
    --prompt-tokens "$PROMPT_WORDS" --ignore-eos --no-progress --json >"$OUT/$tag-c1.json" 2>>"$OUT/$tag.log"
  "$BUILD/pagoda-bench" --url "$url" --model "$model" -c 32 -n "$N32" --warmup "$W32" --max-tokens 64 \
    --prompt-tokens "$PROMPT_WORDS" --ignore-eos --no-progress --json >"$OUT/$tag-c32.json" 2>>"$OUT/$tag.log"
}

echo "# vs_llamacpp: $(date -u +%FT%TZ), $(nproc) cores, threads $THREADS, logs in $OUT"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512dq|avx512vl|avx512_vnni|avx512_bf16|avx512vbmi|avx_vnni|amx_int8|amx_bf16)$' | tr '\n' ' ')"
echo "# llama.cpp: $LLAMA, $("$LLAMA/bin/llama-server" --version 2>&1 | grep -m1 -i version), --poll $LLAMA_POLL"
echo "# pagoda: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null), PAGODA_ISA=${PAGODA_ISA:-auto}"

RESULTS=$OUT/results.tsv
: >"$RESULTS"
for run in $(seq "$RUNS"); do
  for model in "$@"; do
    name=$(basename "$model" .gguf)
    tag=$OUT/r$run-$name
    load_avg=$(cut -d' ' -f1-3 /proc/loadavg)

    # 1. llama-server
    port=$(free_port)
    "$LLAMA/bin/llama-server" -m "$model" -np 32 -t "$THREADS" --poll "$LLAMA_POLL" -c $((32 * 256)) --host 127.0.0.1 --port "$port" \
      >"$tag-llama-server.log" 2>&1 &
    PID=$!
    if ! wait_ok 300 "http://127.0.0.1:$port/health" "j.get('status') == 'ok'"; then
      echo "llama-server did not come up: $tag-llama-server.log" >&2; stop; exit 1
    fi
    load "http://127.0.0.1:$port" m "r$run-$name-llama"
    stop

    # 2. pagoda
    port=$(free_port); wport=$(free_port)
    "$BUILD/pagoda-gateway" --listen "127.0.0.1:$port" --worker-endpoint "tcp://127.0.0.1:$wport" \
      --model "m=$model" --max-seqs 32 --threads "$THREADS" >"$tag-pagoda.log" 2>&1 &
    PID=$!
    if ! wait_ok 300 "http://127.0.0.1:$port/health" "j['models']['m']['state'] == 'ready'"; then
      echo "pagoda did not come up: $tag-pagoda.log" >&2; stop; exit 1
    fi
    load "http://127.0.0.1:$port" m "r$run-$name-pagoda"
    stop

    # 3. llama-bench, 4. pagoda-run --bench
    "$LLAMA/bin/llama-bench" -m "$model" -p 512 -n "$TG" -t "$THREADS" --poll "$LLAMA_POLL" -r "$LB_REPS" -o json \
      >"$tag-llama-bench.json" 2>"$tag-llama-bench.log"
    "$BUILD/pagoda-run" -m "$model" --bench --seqs 1 --prompt-tokens 512 -n 1 --threads "$THREADS" \
      >"$tag-pagoda-run.txt" 2>"$tag-pagoda-run.log"
    "$BUILD/pagoda-run" -m "$model" --bench --seqs 1 --prompt-tokens 1 -n "$TG" --threads "$THREADS" \
      >"$tag-pagoda-tg.txt" 2>>"$tag-pagoda-run.log"

    python3 - "$OUT" "r$run-$name" "$run" "$name" "$load_avg" "$TG" >>"$RESULTS" <<'EOF'
import json, sys
out, tag, run, name, load, tg = sys.argv[1:]
def bench(side, c):
    j = json.load(open(f"{out}/{tag}-{side}-c{c}.json"))
    ok, err = j["requests_ok"], j["requests_err"]
    # A failed request is counted as if it had produced all its tokens: recent
    # llama-server parses every completion's text and ends some streams of a
    # random-weight model with "does not match the expected Content-only
    # format" (invalid UTF-8 bytes) after generating them. An upper bound for
    # the failing side, so the ratio is never flattered by the other's errors.
    rate = j["output_tok_per_s"] * (ok + err) / ok if ok else 0.0
    return rate, j["prompt_tokens_mean"], err
lb = {(r["n_prompt"], r["n_gen"]): r["avg_ts"] for r in json.load(open(f"{out}/{tag}-llama-bench.json"))}
pp_l, tg_l = lb[(512, 0)], lb[(0, int(tg))]
isa, pp_p, tg_p = "?", None, None
for line in open(f"{out}/{tag}-pagoda-run.txt"):
    if line.startswith("#") and "isa " in line:
        isa = line.split("isa ")[1].split(",")[0].strip()
    f = line.split()
    if f and f[0] == "1":
        pp_p = float(f[1])
for line in open(f"{out}/{tag}-pagoda-tg.txt"):
    f = line.split()
    if f and f[0] == "1":
        tg_p = float(f[2])
rows = []
for c in (1, 32):
    p, pt_p, e_p = bench("pagoda", c)
    l, pt_l, e_l = bench("llama", c)
    rows.append((f"{c} stream{'s' if c > 1 else ''} out tok/s", p, l, f"prompt {pt_p:.0f}/{pt_l:.0f} tok, errors {e_p}/{e_l}"))
rows.append(("pp512 tok/s", pp_p, pp_l, ""))
rows.append((f"tg{tg} tok/s", tg_p, tg_l, ""))
for metric, p, l, note in rows:
    # a side with no successful request (or no pagoda-run line) has no ratio
    ratio = f"{p / l:.2f}" if p and l else "nan"
    print("\t".join([run, name, load, isa, metric, f"{p or 0:.1f}", f"{l or 0:.1f}", ratio, note]))
EOF
    awk -F'\t' -v r="$run" -v n="$name" '$1 == r && $2 == n' "$RESULTS" | awk -F'\t' '
      NR == 1 { printf "\n## run %s, %s (load %s, pagoda isa %s)\n%-22s %10s %10s %7s  %s\n", $1, $2, $3, $4, "metric", "pagoda", "llama.cpp", "ratio", "" }
      { printf "%-22s %10s %10s %6sx  %s\n", $5, $6, $7, $8, $9 }'
  done
done

if ((RUNS > 1)); then
  echo
  echo "## median over $RUNS runs (of each run's ratio)"
  python3 - "$RESULTS" <<'EOF'
import sys, statistics, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    run, name, load, isa, metric, p, l, ratio, note = line.rstrip("\n").split("\t")
    by[(name, metric)].append((float(p), float(l), float(ratio)))
print(f"{'model':<18} {'metric':<22} {'pagoda':>10} {'llama.cpp':>10} {'ratio':>7}  ratios")
for (name, metric), v in by.items():
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"{name:<18} {metric:<22} {med(0):10.1f} {med(1):10.1f} {med(2):6.2f}x  " + " ".join(f"{x[2]:.2f}" for x in v))
EOF
fi
