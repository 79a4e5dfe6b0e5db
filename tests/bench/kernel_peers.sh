#!/usr/bin/env bash
# kernel_peers.sh — pagoda's int8 kernels per quant against llama.cpp and
# ik_llama.cpp (issue #38, part 3): one-stream decode (the 1-row kernels)
# and pp512 prefill (the many-row kernels) of each file, side by side, with
# the read bandwidth of the same moment. Not part of `make test`: it needs
# the peers' llama-bench builds and a quiet machine.
#
# usage: [LLAMA_BIN=PATH] [IK_BIN=PATH] tests/bench/kernel_peers.sh [MODEL.gguf ...]
#
# LLAMA_BIN / IK_BIN: the llama-bench binaries of llama.cpp and of
# ik_llama.cpp (either may be absent: its columns print "-"; with neither
# the script says so and exits 0 without measuring). Without arguments the
# models are the 1.1B shape of tests/large/w1b.sh (dim 2048, 22 layers,
# 32/4 heads, FFN 5632, random weights, stories260K tokenizer) in Q4_K_M,
# Q8_0, Q4_0, Q5_K and Q6_K, made with pagoda-mkmodel on first use and
# kept in $PAGODA_BUILD/models/, plus $M7B (default
# /work/models/m7b-q4_k_m.gguf) when that file exists.
#
# Each of REPS rounds runs, per model, one after the other (pagoda first in
# odd rounds, last in even ones, so no program always gets the same slot
# of the host's bandwidth drift):
#   - pagoda-run --bench --bench-bandwidth --seqs 1 --prompt-tokens 1 -n TG:
#     steady one-stream decode, every step followed by a read pass of the
#     bytes it read (the "paired" read speed of the same moment)
#   - pagoda-run --bench --seqs 1 --prompt-tokens PP -n 2 --max-batch-tokens PP
#     (prefill tok/s of one PP-token prompt in one step)
#   - per peer: pagoda-run --bench-bandwidth, llama-bench -p PP -n TG -r 1
#     (ik_llama.cpp with -rtr 1: its run-time repacked layouts), and
#     --bench-bandwidth again; the peer's read speed is the mean of the two
# and prints per model the medians over the rounds: decode tok/s, pp tok/s,
# the read GB/s, each program's decode as a share of its read speed
# (tok/s x MB read per token / GB/s; MB per token is what pagoda-run
# reports one decode step reads: every layer matrix and the output head,
# the same file for all three), the ratios pagoda / peer, and the
# verdict of the issue's bars: where every program reads below 50% of the
# read speed (compute-bound) decode ≥ 1.1x ik and ≥ 1.3x llama.cpp; where
# the peers read at ≥ 85% (bandwidth-bound) pagoda ≥ 90% and ≥ 0.97x ik;
# prefill ≥ 1.5x the faster peer.
#
# Environment: PAGODA_BUILD (build), THREADS (2), CPUS (a taskset CPU list
# for every program, e.g. CPUS=1 THREADS=1 for one core; default none),
# TG (128), PP (512), REPS (3), M7B, OUT (log directory, default a new one
# under /tmp, kept).
set -uo pipefail

[[ ${1:-} == -h || ${1:-} == --help ]] && { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PAGODA_BUILD:-$ROOT/build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
: "${THREADS:=2}" "${TG:=128}" "${PP:=512}" "${REPS:=3}" "${M7B:=/work/models/m7b-q4_k_m.gguf}" "${LLAMA_BIN:=}" "${IK_BIN:=}"
PIN=()
[[ -n ${CPUS:-} ]] && PIN=(taskset -c "$CPUS")

[[ -x $BUILD/pagoda-run && -x $BUILD/pagoda-mkmodel ]] || { echo "no $BUILD/pagoda-run / pagoda-mkmodel (make first)" >&2; exit 2; }
for v in LLAMA_BIN IK_BIN; do
  if [[ -n ${!v} && ! -x ${!v} ]]; then
    echo "# $v=${!v} is not an executable: that peer is left out" >&2
    printf -v "$v" '%s' ""
  fi
done
if [[ -z $LLAMA_BIN && -z $IK_BIN ]]; then
  echo "# skip: no peer to compare with (set LLAMA_BIN to llama.cpp's llama-bench and/or IK_BIN to ik_llama.cpp's)"
  exit 0
fi
OUT=${OUT:-$(mktemp -d /tmp/pagoda-kpeers.XXXXXX)}
mkdir -p "$OUT"

models=("$@")
if ((${#models[@]} == 0)); then
  mkdir -p "$BUILD/models"
  tok=$ROOT/../shared/models/stories260K.gguf
  [[ -f $tok ]] || tok=builtin
  for t in Q4_K_M Q8_0 Q4_0 Q5_K Q6_K; do
    m=$BUILD/models/w1b-${t,,}.gguf
    if [[ ! -f $m ]]; then
      echo "# making $m" >&2
      "$BUILD/pagoda-mkmodel" -o "$m.tmp" --type "$t" --dim 2048 --layers 22 --heads 32 --kv-heads 4 \
        --ffn 5632 --vocab 32000 --ctx 2048 --seed 1 --tokenizer-from "$tok" >"$OUT/mk-$t.log" 2>&1 &&
        mv "$m.tmp" "$m" || { rm -f "$m.tmp"; echo "pagoda-mkmodel failed for $t (see $OUT/mk-$t.log)" >&2; exit 1; }
    fi
    models+=("$m")
  done
  [[ -f $M7B ]] && models+=("$M7B")
fi

ver() { git -C "$1" rev-parse --short HEAD 2>/dev/null || echo "?"; }
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), threads $THREADS${CPUS:+, taskset -c $CPUS}, tg$TG pp$PP, $REPS rounds; logs in $OUT"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|amx)' | sort -u | tr '\n' ' ')"
echo "# pagoda $(ver "$ROOT")${PAGODA_ISA:+ PAGODA_ISA=$PAGODA_ISA}" \
  "${LLAMA_BIN:+| llama.cpp $LLAMA_BIN ($(ver "$(dirname "$(readlink -f "$LLAMA_BIN")")"))}" \
  "${IK_BIN:+| ik_llama.cpp $IK_BIN ($(ver "$(dirname "$(readlink -f "$IK_BIN")")"))}"

bandwidth() { # -> GB/s of pagoda-run's read loop with THREADS threads
  "${PIN[@]}" "$BUILD/pagoda-run" --bench-bandwidth --threads "$THREADS" 2>/dev/null |
    sed -n 's/.*read bandwidth: \([0-9.]*\) GB.*/\1/p'
}

peer() { # BIN LOG EXTRA... -> "pp_tps tg_tps bw_gbs" (empty fields as -)
  local bin=$1 log=$2; shift 2
  local b0 b1 r
  b0=$(bandwidth)
  r=$("${PIN[@]}" "$bin" -m "$model" -p "$PP" -n "$TG" -t "$THREADS" -r 1 -o json "$@" 2>>"$log" |
    python3 -c '
import json, sys
pp = tg = "-"
for r in json.load(sys.stdin):
    if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0: pp = "%.2f" % r["avg_ts"]
    if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0: tg = "%.2f" % r["avg_ts"]
print(pp, tg)' 2>>"$log")
  b1=$(bandwidth)
  echo "${r:-- -} $(python3 -c 'import sys; v=[float(x) for x in sys.argv[1:] if x]; print("%.2f" % (sum(v)/len(v)) if v else "-")' "$b0" "$b1")"
}

run_pagoda() {
  local f=$OUT/$tag-pagoda-$round
  "${PIN[@]}" "$BUILD/pagoda-run" -m "$model" --bench --bench-bandwidth --seqs 1 --prompt-tokens 1 -n "$TG" \
    --threads "$THREADS" >"$f-tg.txt" 2>"$f-tg.log"
  pg_tg=$(sed -n 's/.*steady decode.*: \([0-9.]*\) tok\/s.*/\1/p' "$f-tg.txt")
  mb=$(sed -n 's/.*weights read per decode step: \([0-9.]*\) MB.*/\1/p' "$f-tg.txt")
  pg_pair=$(sed -n 's/.*paired: decode at \([0-9.]*\)% .*read passes median \([0-9.]*\) GB.*/\1 \2/p' "$f-tg.txt")
  "${PIN[@]}" "$BUILD/pagoda-run" -m "$model" --bench --seqs 1 --prompt-tokens "$PP" -n 2 --max-batch-tokens "$PP" \
    --threads "$THREADS" >"$f-pp.txt" 2>"$f-pp.log"
  pg_pp=$(awk '$1 == "1" && NF >= 3 { print $2; exit }' "$f-pp.txt")
}

run_peers() {
  ll="- - -"; ik="- - -"
  [[ -n $LLAMA_BIN ]] && ll=$(peer "$LLAMA_BIN" "$OUT/llama-bench.log")
  # ik_llama.cpp: -rtr 1 repacks the weights at load into its row-interleaved layouts
  [[ -n $IK_BIN ]] && ik=$(peer "$IK_BIN" "$OUT/ik-bench.log" -rtr 1)
}

for model in "${models[@]}"; do
  tag=$(basename "$model" .gguf)
  : >"$OUT/$tag.tsv"
  for round in $(seq "$REPS"); do
    pg_tg=""; pg_pp=""; mb=""; pg_pair=""
    if ((round % 2)); then run_pagoda; run_peers; else run_peers; run_pagoda; fi
    # columns: round mb | pagoda tg pp paired% pairedGBs | llama pp tg bw | ik pp tg bw
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "${mb:--}" "${pg_tg:--}" "${pg_pp:--}" \
      "${pg_pair%% *}" "$([[ $pg_pair == *' '* ]] && echo "${pg_pair##* }")" $ll $ik >>"$OUT/$tag.tsv"
    echo "#   $tag round $round (load $(cut -d' ' -f1 /proc/loadavg)): pagoda tg ${pg_tg:-?} pp ${pg_pp:-?} (paired ${pg_pair:-?});" \
      "llama.cpp pp/tg/bw $ll; ik pp/tg/bw $ik"
  done
  python3 - "$OUT/$tag.tsv" "$tag" <<'EOF'
import statistics, sys
path, tag = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
def col(i):
    v = []
    for r in rows:
        try:
            v.append(float(r[i]))
        except (IndexError, ValueError):
            pass
    return statistics.median(v) if v else None
mb = col(1)
prog = {  # name: (tg, pp, read GB/s, share %)
    "pagoda": (col(2), col(3), col(5), col(4)),
    "llama.cpp": (col(7), col(6), col(8), None),
    "ik_llama.cpp -rtr": (col(10), col(9), col(11), None),
}
for k, (tg, pp, bw, sh) in list(prog.items()):
    if sh is None and tg and bw and mb:
        sh = 100 * tg * mb / 1000 / bw
    prog[k] = (tg, pp, bw, sh)
f = lambda x, d=1: f"{x:.{d}f}" if x is not None else "-"
print(f"\n{tag}: {f(mb)} MB read per token (medians of {len(rows)} rounds; pagoda's read speed is the paired one)")
print("| program | tg tok/s | pp tok/s | read GB/s | decode % of read |")
print("|---|---|---|---|---|")
for k, (tg, pp, bw, sh) in prog.items():
    if tg or pp or k == "pagoda":
        print(f"| {k} | {f(tg)} | {f(pp)} | {f(bw)} | {f(sh, 0)}{'%' if sh is not None else ''} |")
pg = prog["pagoda"]
ll, ik = prog["llama.cpp"], prog["ik_llama.cpp -rtr"]
rat = lambda a, b: a / b if a and b else None
r_ik, r_ll = rat(pg[0], ik[0]), rat(pg[0], ll[0])
peers_pp = [p[1] for p in (ll, ik) if p[1]]
r_pp = rat(pg[1], max(peers_pp)) if peers_pp else None
print(f"decode pagoda / ik {f(r_ik, 2)}x, / llama.cpp {f(r_ll, 2)}x; pp pagoda / faster peer {f(r_pp, 2)}x")
shares = [p[3] for p in (pg, ll, ik) if p[3] is not None]
peer_sh = [p[3] for p in (ll, ik) if p[3] is not None]
ok = lambda c: "ok" if c else "MISSED"
if shares and max(shares) < 50:
    print(f"bar (compute-bound: every program < 50% of its read speed): ik >= 1.1x {ok(r_ik and r_ik >= 1.1)}, "
          f"llama.cpp >= 1.3x {ok(r_ll and r_ll >= 1.3)}", end="")
elif peer_sh and min(peer_sh) >= 85:
    print(f"bar (bandwidth-bound: peers >= 85%): pagoda >= 90% {ok(pg[3] and pg[3] >= 90)}, "
          f">= 0.97x ik {ok(r_ik and r_ik >= 0.97)}", end="")
else:
    print("bar: between the two regimes (some program >= 50%, not every peer >= 85%): decode bar not defined", end="")
print(f"; pp >= 1.5x faster peer {ok(r_pp and r_pp >= 1.5)}")
EOF
done
