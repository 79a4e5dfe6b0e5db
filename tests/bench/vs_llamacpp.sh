#!/usr/bin/env bash
# vs_llamacpp.sh — pagoda and llama.cpp (and optionally ik_llama.cpp) side by
# side: one run, the same machine, the same GGUF file, the same thread count.
# Not part of `make test` (it takes minutes per model and needs a llama.cpp
# build).
#
# usage: tests/bench/vs_llamacpp.sh LLAMA_BUILD_DIR MODEL.gguf [MODEL.gguf ...]
#
# LLAMA_BUILD_DIR is a llama.cpp CMake build directory (CPU only, e.g.
# `cmake -B build -DGGML_NATIVE=ON && cmake --build build`); its bin/ must
# hold llama-server and llama-bench. IK_BUILD=DIR adds an ik_llama.cpp build
# as a third column (its llama-server and llama-bench run with -rtr, its
# run-time repacking, unless IK_RTR=0; it has no --poll flag).
# For every run (RUNS) and model, one after the other:
#
#   1. for each of two workloads: llama-server -np 32 -c 8192 -t THREADS on
#      127.0.0.1 (256 positions per slot), then pagoda-gateway --max-seqs 32
#      --threads THREADS (then ik_llama.cpp's llama-server like llama.cpp's),
#      each started fresh for the workload (so neither workload runs on a KV
#      cache the other one filled), driven at 1 then 32 streams, stopped:
#      - "bench": pagoda-bench, the load this script has always run: streamed
#        /v1/completions, PROMPT_WORDS-word prompts from pagoda-bench's list
#        (~32 tokens with the stories260K tokenizer the generated models
#        carry), 64 new tokens, ignore_eos, no temperature (each server's
#        default: sampled), N1 requests after 1 warm-up at 1 stream, N32
#        after W32 warm-ups at 32;
#      - "loadgen": tests/bench/loadgen.py, an independent Python client
#        (no code shared with pagoda-bench): streamed /v1/completions,
#        LG_WORDS-word prompts of its own word list (~96 tokens with that
#        tokenizer), 64 new tokens, ignore_eos, temperature 0, LG_N1 and
#        LG_N32 requests after LG_W1 / LG_W32 warm-ups;
#   2. llama-bench -p 512 -n TG -t THREADS (pp512, tgTG, mean of LB_REPS),
#      and ik_llama.cpp's with -rtr 1;
#   3. pagoda-run --bench --seqs 1 --prompt-tokens 512 -n 1 (prefill of one
#      512-token sequence, against pp512) and --prompt-tokens 1 -n TG
#      (decode from an empty context, as llama-bench's tgTG does).
#
# Output tok/s, both clients: generated tokens of the measured requests /
# wall time from their first send to the last response's end (prefill and
# queueing included). A failed request counts as if it had produced all its
# tokens (some llama-server versions end random-model streams with an error
# after generating them): the failing side's rate is an upper bound, never
# a discount; the error counts are printed.
#
# Output: one Markdown table (and $OUT/table.md): per model and row, the
# median over RUNS of each side's rate, and the median of the per-run ratios
# pagoda / llama.cpp (and pagoda / ik_llama.cpp) with every run's ratio.
# Ratios are taken within a run, so a slow minute of a shared host hits both
# sides of a ratio more often than not; the per-run ratios show the spread.
# Progress and per-run rates go to stderr and $OUT/results.tsv.
#
# Why the two workloads give different ratios: docs/BENCH.md, "Two workloads".
# Time per run with IK_BUILD, 2 threads: ~3 min for a 110M file, ~11 min for
# the 1.1B Q4_K_M (llama.cpp's 32-stream loads dominate). llama-server (build
# 4748) aborts when stopped ("terminate called without an active
# exception", and bash reports "Aborted"): harmless, its loads are done.
#
# Wait policy: llama.cpp's threads poll for work by default (--poll 50);
# pagoda's OpenMP threads spin ~25 us, then sleep (GOMP_SPINCOUNT=1000,
# docs/FORWARD.md). llama-server and llama-bench get --poll LLAMA_POLL,
# default 50 (llama.cpp's own default). On an oversubscribed machine
# llama.cpp with 2 threads collapses (its barriers between graph nodes spin:
# 16 tok/s at 32 streams on the 110M Q8_0 file at load 6, against ~300 on a
# quiet one); THREADS=1 then gives a comparison that measures the kernels
# rather than the host's scheduler.
#
# Environment: PAGODA_BUILD (build), THREADS (2), RUNS (1), IK_BUILD (unset),
# IK_RTR (1), N1 (8), N32 (64), W32 (32), PROMPT_WORDS (9), LG_N1 (8),
# LG_N32 (64), LG_W1 (0), LG_W32 (0), LG_WORDS (24), TG (32), LB_REPS (3),
# LLAMA_POLL (50), WORKLOADS ("bench loadgen"; one of them to save time),
# PAGODA_ISA (forces pagoda's int8 kernel path, docs/FORWARD.md), OUT
# (directory for logs and JSON; default a new one under /tmp, kept).
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
IK=${IK_BUILD:-}
IK_RTR=${IK_RTR:-1}
N1=${N1:-8}
N32=${N32:-64}
W32=${W32:-32}
PROMPT_WORDS=${PROMPT_WORDS:-9}
LG_N1=${LG_N1:-8}
LG_N32=${LG_N32:-64}
LG_W1=${LG_W1:-0}
LG_W32=${LG_W32:-0}
LG_WORDS=${LG_WORDS:-24}
LLAMA_POLL=${LLAMA_POLL:-50}
TG=${TG:-32}
LB_REPS=${LB_REPS:-3}
WORKLOADS=${WORKLOADS:-bench loadgen}
OUT=${OUT:-$(mktemp -d /tmp/vs_llamacpp.XXXXXX)}
mkdir -p "$OUT"
LOADGEN=$ROOT/tests/bench/loadgen.py

need=("$LLAMA/bin/llama-server" "$LLAMA/bin/llama-bench" "$BUILD/pagoda-gateway" "$BUILD/pagoda-worker"
      "$BUILD/pagoda-bench" "$BUILD/pagoda-run")
[[ -n $IK ]] && need+=("$IK/bin/llama-server" "$IK/bin/llama-bench")
for b in "${need[@]}"; do
  [[ -x $b ]] || { echo "missing $b" >&2; exit 2; }
done
for m in "$@"; do [[ -f $m ]] || { echo "missing model $m" >&2; exit 2; }; done
for w in $WORKLOADS; do [[ $w = bench || $w = loadgen ]] || { echo "WORKLOADS: bench and/or loadgen" >&2; exit 2; }; done
SIDES="llama pagoda"
[[ -n $IK ]] && SIDES="llama pagoda ik"
IK_FLAGS=()
((IK_RTR)) && IK_FLAGS=(-rtr)

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
  local deadline=$((SECONDS + $1)) url=$2 cond=$3
  while ((SECONDS < deadline)); do
    kill -0 "$PID" 2>/dev/null || return 1
    curl -sf "$url" 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($cond) else 1)" \
      2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}

# load URL TAG WORKLOAD: 1 then 32 streams, JSON into $OUT/TAG-WORKLOAD-c{1,32}.json
load() {
  local url=$1 tag=$2 wl=$3
  if [[ $wl = bench ]]; then
    "$BUILD/pagoda-bench" --url "$url" --model m -c 1 -n "$N1" --warmup 1 --max-tokens 64 \
      --prompt-tokens "$PROMPT_WORDS" --ignore-eos --no-progress --json >"$OUT/$tag-bench-c1.json" 2>>"$OUT/$tag.log"
    "$BUILD/pagoda-bench" --url "$url" --model m -c 32 -n "$N32" --warmup "$W32" --max-tokens 64 \
      --prompt-tokens "$PROMPT_WORDS" --ignore-eos --no-progress --json >"$OUT/$tag-bench-c32.json" 2>>"$OUT/$tag.log"
  else
    # seeds of their own: the 32-stream prompts never repeat the 1-stream ones (no prefix-cache hits)
    python3 "$LOADGEN" --url "$url" --model m -c 1 -n "$LG_N1" --warmup "$LG_W1" --seed 101 --words "$LG_WORDS" \
      --max-tokens 64 --temperature 0 --json >"$OUT/$tag-loadgen-c1.json" 2>>"$OUT/$tag.log"
    python3 "$LOADGEN" --url "$url" --model m -c 32 -n "$LG_N32" --warmup "$LG_W32" --seed 132 --words "$LG_WORDS" \
      --max-tokens 64 --temperature 0 --json >"$OUT/$tag-loadgen-c32.json" 2>>"$OUT/$tag.log"
  fi
}

# serve SIDE MODEL TAG WORKLOAD: starts one server, runs one workload, stops it
serve() {
  local side=$1 model=$2 tag=$3 wl=$4 port wport
  port=$(free_port)
  case $side in
    llama | ik)
      local bin=$LLAMA/bin/llama-server extra=(--poll "$LLAMA_POLL")
      [[ $side = ik ]] && bin=$IK/bin/llama-server extra=("${IK_FLAGS[@]}")
      "$bin" -m "$model" -np 32 -c $((32 * 256)) -t "$THREADS" "${extra[@]}" --host 127.0.0.1 --port "$port" \
        >"$OUT/$tag-$side-$wl-server.log" 2>&1 &
      PID=$!
      wait_ok 600 "http://127.0.0.1:$port/health" "j.get('status') == 'ok'" ;;
    pagoda)
      wport=$(free_port)
      "$BUILD/pagoda-gateway" --listen "127.0.0.1:$port" --worker-endpoint "tcp://127.0.0.1:$wport" \
        --model "m=$model" --max-seqs 32 --threads "$THREADS" >"$OUT/$tag-$side-$wl-server.log" 2>&1 &
      PID=$!
      wait_ok 600 "http://127.0.0.1:$port/health" "j['models']['m']['state'] == 'ready'" ;;
  esac || { echo "$side did not come up: $OUT/$tag-$side-$wl-server.log" >&2; stop; exit 1; }
  load "http://127.0.0.1:$port" "$tag-$side" "$wl"
  stop
}

{
  echo "# vs_llamacpp: $(date -u +%FT%TZ), $(nproc) cores, threads $THREADS, runs $RUNS, logs in $OUT"
  echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512dq|avx512vl|avx512_vnni|avx512_bf16|avx512vbmi|avx_vnni|amx_int8|amx_bf16)$' | tr '\n' ' ')"
  echo "# llama.cpp: $LLAMA, $("$LLAMA/bin/llama-server" --version 2>&1 | grep -m1 -i version), --poll $LLAMA_POLL"
  [[ -n $IK ]] && echo "# ik_llama.cpp: $IK, $("$IK/bin/llama-server" --version 2>&1 | grep -m1 -i version), ${IK_FLAGS[*]:-no -rtr}"
  echo "# pagoda: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null), PAGODA_ISA=${PAGODA_ISA:-auto}"
  echo "# bench = pagoda-bench: $PROMPT_WORDS-word prompts, no temperature, warm-up 1 / $W32, $N1 / $N32 requests"
  echo "# loadgen = tests/bench/loadgen.py: $LG_WORDS-word prompts, temperature 0, warm-up $LG_W1 / $LG_W32, $LG_N1 / $LG_N32 requests"
  echo "# both: streamed /v1/completions, 64 tokens, ignore_eos; llama-server -np 32 -c 8192; pagoda --max-seqs 32"
} | tee "$OUT/header.txt"

RESULTS=$OUT/results.tsv
: >"$RESULTS"
for run in $(seq "$RUNS"); do
  for model in "$@"; do
    name=$(basename "$model" .gguf)
    tag=r$run-$name
    load_avg=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "# run $run, $name, load $load_avg: serving ($SIDES)" >&2
    for wl in $WORKLOADS; do
      for side in $SIDES; do serve "$side" "$model" "$tag" "$wl"; done
    done

    echo "# run $run, $name: llama-bench, pagoda-run --bench" >&2
    "$LLAMA/bin/llama-bench" -m "$model" -p 512 -n "$TG" -t "$THREADS" --poll "$LLAMA_POLL" -r "$LB_REPS" -o json \
      >"$OUT/$tag-llama-bench.json" 2>"$OUT/$tag-llama-bench.log"
    if [[ -n $IK ]]; then
      "$IK/bin/llama-bench" -m "$model" -p 512 -n "$TG" -t "$THREADS" -rtr "$IK_RTR" -r "$LB_REPS" -o json \
        >"$OUT/$tag-ik-bench.json" 2>"$OUT/$tag-ik-bench.log"
    fi
    "$BUILD/pagoda-run" -m "$model" --bench --seqs 1 --prompt-tokens 512 -n 1 --threads "$THREADS" \
      >"$OUT/$tag-pagoda-run.txt" 2>"$OUT/$tag-pagoda-run.log"
    "$BUILD/pagoda-run" -m "$model" --bench --seqs 1 --prompt-tokens 1 -n "$TG" --threads "$THREADS" \
      >"$OUT/$tag-pagoda-tg.txt" 2>>"$OUT/$tag-pagoda-run.log"

    python3 - "$OUT" "$tag" "$run" "$name" "$load_avg" "$TG" "$SIDES" "$WORKLOADS" >>"$RESULTS" <<'EOF'
import json, os, sys
out, tag, run, name, load, tg, sides, workloads = sys.argv[1:]
sides, workloads = sides.split(), workloads.split()
def http(side, wl, c):
    """(rate, prompt tokens per request, errors) of one load; rate None if it has no ok request"""
    try:
        j = json.load(open(f"{out}/{tag}-{side}-{wl}-c{c}.json"))
    except (OSError, ValueError):
        return None, None, "missing"
    ok = j.get("requests_ok", j.get("ok", 0))
    err = j.get("requests_err", j.get("errors", 0))
    # a failed request counts as if it had produced all its tokens: an upper bound for the failing side
    rate = j["output_tok_per_s"] * (ok + err) / ok if ok else None
    return rate, j.get("prompt_tokens_mean"), err
def llama_bench(path):
    try:
        lb = {(r["n_prompt"], r["n_gen"]): r["avg_ts"] for r in json.load(open(path))}
    except (OSError, ValueError, KeyError, TypeError):
        return None, None
    return lb.get((512, 0)), lb.get((0, int(tg)))
rows = {}  # metric -> {side: (rate, note)}
for wl in workloads:
    for c in (1, 32):
        metric = f"{wl} {c}"
        rows[metric] = {}
        for side in sides:
            rate, pt, err = http(side, wl, c)
            rows[metric][side] = (rate, f"prompt {pt if pt is None else round(pt)} tok, errors {err}")
pp, tgr = {}, {}
pp["llama"], tgr["llama"] = llama_bench(f"{out}/{tag}-llama-bench.json")
if "ik" in sides:
    pp["ik"], tgr["ik"] = llama_bench(f"{out}/{tag}-ik-bench.json")
isa, pp["pagoda"], tgr["pagoda"] = "?", None, None
for line in open(f"{out}/{tag}-pagoda-run.txt"):
    if line.startswith("#") and "isa " in line:
        isa = line.split("isa ")[1].split(",")[0].strip()
    f = line.split()
    if f and f[0] == "1":
        pp["pagoda"] = float(f[1])
for line in open(f"{out}/{tag}-pagoda-tg.txt"):
    f = line.split()
    if f and f[0] == "1":
        tgr["pagoda"] = float(f[2])
rows["pp512"] = {s: (pp.get(s), "") for s in sides}
rows[f"tg{tg}"] = {s: (tgr.get(s), "") for s in sides}
for metric, v in rows.items():
    for side in sides:
        rate, note = v[side]
        print("\t".join([run, name, load, isa, metric, side, "nan" if rate is None else f"{rate:.2f}", note]))
EOF
    awk -F'\t' -v r="$run" -v n="$name" '$1 == r && $2 == n { printf "#   %-12s %-7s %9s  %s\n", $5, $6, $7, $8 }' \
      "$RESULTS" >&2
  done
done

python3 - "$RESULTS" "$SIDES" "$TG" <<'EOF' | tee "$OUT/table.md"
import collections, math, statistics, sys
path, sides, tg = sys.argv[1], sys.argv[2].split(), sys.argv[3]
rate = collections.defaultdict(dict)   # (name, metric) -> {(run, side): rate}
order, loads = [], collections.defaultdict(list)
for line in open(path):
    run, name, load, isa, metric, side, r, note = line.rstrip("\n").split("\t")
    if (name, metric) not in rate:
        order.append((name, metric))
    rate[(name, metric)][(run, side)] = float(r)
    if metric == f"tg{tg}" and side == "pagoda":
        loads[name].append(load.split()[0])
label = {"bench 1": "HTTP 1 stream, pagoda-bench", "bench 32": "HTTP 32 streams, pagoda-bench",
         "loadgen 1": "HTTP 1 stream, loadgen", "loadgen 32": "HTTP 32 streams, loadgen",
         "pp512": "pp512 (engine)", f"tg{tg}": f"tg{tg} (engine)"}
def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")
others = [s for s in sides if s != "pagoda"]
names = {"llama": "llama.cpp", "ik": "ik_llama.cpp"}
head = "| model | tok/s | pagoda | " + " | ".join(f"{names[s]} | pagoda / {names[s]} (runs)" for s in others) + " |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for name, metric in order:
    v = rate[(name, metric)]
    runs = sorted({r for r, _ in v}, key=int)
    cells = [name, label.get(metric, metric), f"{med([v.get((r, 'pagoda'), math.nan) for r in runs]):.1f}"]
    for s in others:
        ratios = [v.get((r, "pagoda"), math.nan) / v.get((r, s), math.nan) if v.get((r, s)) else math.nan for r in runs]
        cells.append(f"{med([v.get((r, s), math.nan) for r in runs]):.1f}")
        cells.append(f"**{med(ratios):.2f}×** (" + " ".join(f"{x:.2f}" for x in ratios) + ")")
    print("| " + " | ".join(cells) + " |")
print()
print("load average (1 min) at the start of each model, by run: " +
      "; ".join(f"{n} {' '.join(l)}" for n, l in loads.items()))
EOF
