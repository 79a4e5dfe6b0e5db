#!/usr/bin/env bash
# decode_bench.sh — one-sequence decode of pagoda, llama.cpp and ik_llama.cpp
# side by side (issue #25), next to the read bandwidth of the same machine.
# Not part of `make test`: it needs the peers' builds and a quiet machine.
#
# usage: [LLAMA=DIR] [IK=DIR] tests/bench/decode_bench.sh MODEL.gguf [MODEL.gguf ...]
#
# LLAMA / IK are CMake build directories of llama.cpp and ik_llama.cpp whose
# bin/ holds llama-bench (either may be absent: its column is left out).
# ROUNDS rounds (default 3), each running, per model, one after the other:
#   - pagoda-run --bench-bandwidth   (the 2-thread read loop: the limit)
#   - pagoda-run --bench --seqs 1 --prompt-tokens 1 -n TG   (steady decode)
#   - the same with --bench-bandwidth: every steady step followed by a read
#     pass of the bytes it read, so each step has the read speed of its own
#     moment next to it (the "paired" share: the host's bandwidth moves
#     between ~45 and ~80 GB/s within seconds, so a limit measured before a
#     run and a rate averaged over it can come from different phases)
#   - llama-bench -p 0 -n TG -t THREADS -r 1             (llama.cpp tgTG)
#   - llama-bench -p 0 -n TG -t THREADS -r 1 -rtr 1      (ik_llama.cpp, repacked)
# (pagoda before the peers in odd rounds, after them in even ones) and prints
# per model the median over the rounds of each number, the share of the
# bandwidth limit (tok/s x bytes read per token / GB/s), pagoda's paired
# share (median over the rounds of each run's median step) and the ratios
# pagoda / peer: of the medians, and each round's with their median.
# Bytes per token are the weights pagoda-run reports
# it reads per decode step (all layer matrices and the output head; the
# same file for all three programs).
#
# Environment: PAGODA_BUILD (build), THREADS (2), TG (64), ROUNDS (3),
# LLAMA_POLL (50, llama.cpp's default), OUT (log directory, default a new
# one under /tmp, kept).
set -uo pipefail

if (($# < 1)); then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PAGODA_BUILD:-$ROOT/build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
THREADS=${THREADS:-2}
TG=${TG:-64}
ROUNDS=${ROUNDS:-3}
LLAMA_POLL=${LLAMA_POLL:-50}
OUT=${OUT:-$(mktemp -d /tmp/pagoda-decode.XXXXXX)}
mkdir -p "$OUT"
LLAMA=${LLAMA:-}
IK=${IK:-}
[[ -n $LLAMA && ! -x $LLAMA/bin/llama-bench ]] && { echo "no $LLAMA/bin/llama-bench" >&2; exit 2; }
[[ -n $IK && ! -x $IK/bin/llama-bench ]] && { echo "no $IK/bin/llama-bench" >&2; exit 2; }
[[ -x $BUILD/pagoda-run ]] || { echo "no $BUILD/pagoda-run (make first)" >&2; exit 2; }

echo "# $(date -u +%FT%TZ) $(nproc) cores, threads $THREADS, tg$TG, $ROUNDS rounds; logs in $OUT"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); flags: $(grep -o 'avx[^ ]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# pagoda $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$([[ -n $LLAMA ]] && echo ", llama.cpp $(git -C "$LLAMA/.." rev-parse --short HEAD 2>/dev/null)")$([[ -n $IK ]] && echo ", ik_llama.cpp $(git -C "$IK/.." rev-parse --short HEAD 2>/dev/null)")"

lb_tg() { # BIN MODEL EXTRA... -> tok/s of tgTG, or nothing
  local bin=$1 model=$2; shift 2
  "$bin" -m "$model" -p 0 -n "$TG" -t "$THREADS" -r 1 -o json "$@" 2>>"$OUT/llama-bench.log" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["avg_ts"])' 2>/dev/null
}

for model in "$@"; do
  tag=$(basename "$model" .gguf)
  : >"$OUT/$tag.tsv"
  for round in $(seq "$ROUNDS"); do
    bw=$("$BUILD/pagoda-run" --bench-bandwidth --threads "$THREADS" 2>/dev/null | sed -n 's/.*read bandwidth: \([0-9.]*\) GB.*/\1/p')
    run_pagoda() {
      "$BUILD/pagoda-run" -m "$model" --bench --seqs 1 --prompt-tokens 1 -n "$TG" --threads "$THREADS" \
        >"$OUT/$tag-pagoda-$round.txt" 2>"$OUT/$tag-pagoda-$round.log"
      pg=$(sed -n 's/.*steady decode.*: \([0-9.]*\) tok\/s.*/\1/p' "$OUT/$tag-pagoda-$round.txt")
      mb=$(sed -n 's/.*weights read per decode step: \([0-9.]*\) MB.*/\1/p' "$OUT/$tag-pagoda-$round.txt")
      "$BUILD/pagoda-run" -m "$model" --bench --bench-bandwidth --seqs 1 --prompt-tokens 1 -n "$TG" \
        --threads "$THREADS" >"$OUT/$tag-paired-$round.txt" 2>"$OUT/$tag-paired-$round.log"
      ps=$(sed -n 's/.*paired: decode at \([0-9.]*\)% .*read passes median \([0-9.]*\) GB.*/\1 \2/p' "$OUT/$tag-paired-$round.txt")
    }
    run_peers() {
      [[ -n $LLAMA ]] && ll=$(lb_tg "$LLAMA/bin/llama-bench" "$model" --poll "$LLAMA_POLL")
      # ik_llama.cpp: -rtr 1 repacks the weights at load into its row-interleaved
      # layouts (its llama-bench has no --poll: its threads spin between graphs)
      [[ -n $IK ]] && ik=$(lb_tg "$IK/bin/llama-bench" "$model" -rtr 1)
    }
    ll=""; ik=""; ps=""
    # the host's bandwidth drifts within a minute: pagoda runs first in odd
    # rounds and last in even ones, so no program always gets the same slot
    if ((round % 2)); then run_pagoda; run_peers; else run_peers; run_pagoda; fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "${bw:-}" "${mb:-}" "${pg:-}" "${ll:-}" "${ik:-}" \
      "${ps%% *}" "$([[ $ps == *' '* ]] && echo "${ps##* }")" >>"$OUT/$tag.tsv"
    echo "#   $tag round $round (load $(cut -d' ' -f1 /proc/loadavg)): bw ${bw:-?} GB/s, pagoda ${pg:-?}, llama.cpp ${ll:--}, ik_llama.cpp ${ik:--} tok/s; paired ${ps%% *}% at ${ps##* } GB/s"
  done
  python3 - "$OUT/$tag.tsv" "$tag" <<'EOF'
import statistics, sys
path, tag = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
def col(i):
    v = [float(r[i]) for r in rows if len(r) > i and r[i]]
    return statistics.median(v) if v else None
bw, mb, pg, ll, ik = col(1), col(2), col(3), col(4), col(5)
def share(t):
    return f"{100 * t * mb / 1000 / bw:.0f}%" if t and mb and bw else "-"
def fmt(t):
    return f"{t:.1f}" if t else "-"
print(f"\n{tag}: {mb:.1f} MB per token, read bandwidth {bw:.1f} GB/s -> limit {1000 * bw / mb:.1f} tok/s "
      f"(medians of {len(rows)})")
print(f"| program | decode tok/s | share of limit |")
print(f"|---|---|---|")
for name, t in (("pagoda", pg), ("llama.cpp", ll), ("ik_llama.cpp -rtr", ik)):
    if t or name == "pagoda":
        print(f"| {name} | {fmt(t)} | {share(t)} |")
paired = [(float(r[6]), float(r[7])) for r in rows if len(r) > 7 and r[6] and r[7]]
if paired:
    print(f"pagoda paired with read passes: {statistics.median(p for p, _ in paired):.0f}% of the read speed of the "
          f"same moment (per round {' '.join(f'{p:.0f}%@{g:.0f}' for p, g in paired)} GB/s)")
for i, name in ((4, "llama.cpp"), (5, "ik_llama.cpp")):
    per = [float(r[3]) / float(r[i]) for r in rows if len(r) > i and r[3] and r[i]]
    if per:
        # the ratio of the medians, and the median of each round's ratio
        # (the two programs ran back to back: less of the host's drift)
        print(f"pagoda / {name}: {col(3) / col(i):.2f}x; per round "
              f"{' '.join(f'{x:.2f}' for x in per)} -> median {statistics.median(per):.2f}x")
EOF
done
