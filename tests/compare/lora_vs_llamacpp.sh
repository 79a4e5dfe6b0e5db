#!/usr/bin/env bash
# lora_vs_llamacpp.sh — the same greedy text from pagoda and llama.cpp's
# llama-server for base models with LoRA adapters made by pagoda-mkmodel
# (--lora-for, llama.cpp's converter layout). Not part of `make test` (CI
# has no llama.cpp): skips with a message when llama-server is absent.
#
# usage: tests/compare/lora_vs_llamacpp.sh [LLAMA_BIN_DIR]
#        (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# Bases (BASES, space-separated; default all three that exist):
#   ../shared/models/stories260K.gguf (F32; else the generated stand-in
#     build/test-models/tiny-llama.gguf),
#   $BUILD/models/m110-q8_0.gguf  (110M shape, Q8_0: tests/bench/lora_bench.sh
#     and docs/BENCH.md say how it is made),
#   $BUILD/models/w1b-q4_k_m.gguf (1.1B shape, Q4_K_M: tests/large/w1b.sh).
# Per base: adapters rank 8 F32 (alpha = rank) and rank 64 F16 (alpha 16,
# so the scale rule alpha / rank = 0.25 matters), each at scale 1 and 0.5,
# and none; three prompts each; N tokens at temperature 0: 15 cases a base.
# pagoda-run runs with PAGODA_FLAGS (default none: its default kernels,
# which like llama.cpp round activations to 8 bits for quantized weights;
# --exact-matmul keeps them float, and then the 110M Q8_0 base alone parts
# from llama.cpp at the first token of a prompt); llama-server gets the adapters with --lora
# and picks them per request with its "lora" field ([{"id", "scale"}];
# "none" sends both at scale 0: an empty list means the adapters at their
# load-time scale).
# Ties: random weights give near-ties in greedy decoding (and the two
# programs' kernels sum in different orders). llama-server answers with its top
# eight log-probabilities per token (n_probs 8); where the texts part,
# tests/compare/lora_cmp.py counts a TIE when llama-server's top two are
# within TIE_GAP nats (default 0.02) and pagoda took the second — not a
# failure — and a FAIL otherwise; a SKIP when llama-server answers HTTP 500
# because its own text is not valid UTF-8 (its output parser refuses a
# random model's lone byte tokens; pagoda-run has no logit_bias to ban them
# on both sides). Output: one line per case, then per base
# "PASS n/15 equal (k ties), s skipped" or "FAIL ...".
set -u
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
B=${PAGODA_BUILD:-build}
N=${N:-32}
TIE_GAP=${TIE_GAP:-0.02}
PAGODA_FLAGS=${PAGODA_FLAGS-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ ! -x "$LLAMA_BIN/llama-server" ]; then
    echo "SKIP: no $LLAMA_BIN/llama-server (build llama.cpp with its server to compare)"
    exit 0
fi
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
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
summary=
for BASE in $BASES; do
    bn=$(basename "$BASE")
    port=$((20000 + RANDOM % 20000))
    "$B/pagoda-mkmodel" --lora-for "$BASE" -o "$tmp/a8.gguf" --lora-rank 8 --seed 3 >/dev/null 2>&1 || exit 1
    "$B/pagoda-mkmodel" --lora-for "$BASE" -o "$tmp/a64.gguf" --lora-rank 64 --lora-alpha 16 --type F16 --seed 4 \
        >/dev/null 2>&1 || exit 1
    "$LLAMA_BIN/llama-server" -m "$BASE" --lora "$tmp/a8.gguf" --lora "$tmp/a64.gguf" -t 2 -c 1024 --port "$port" \
        --no-warmup >"$tmp/srv.log" 2>&1 &
    srv=$!
    for _ in $(seq 300); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
    curl -sf "127.0.0.1:$port/health" >/dev/null || { echo "FAIL: llama-server did not start"; tail "$tmp/srv.log"; exit 1; }
    ok=0 ties=0 skips=0 total=0 bfail=0
    # name, llama-server lora list, pagoda-run flags
    cases=("none|[{\"id\":0,\"scale\":0},{\"id\":1,\"scale\":0}]|" "a8@1|[{\"id\":0,\"scale\":1},{\"id\":1,\"scale\":0}]|--lora x=$tmp/a8.gguf"
           "a8@0.5|[{\"id\":0,\"scale\":0.5},{\"id\":1,\"scale\":0}]|--lora x=$tmp/a8.gguf:0.5"
           "a64@1|[{\"id\":0,\"scale\":0},{\"id\":1,\"scale\":1}]|--lora x=$tmp/a64.gguf"
           "a64@0.5|[{\"id\":0,\"scale\":0},{\"id\":1,\"scale\":0.5}]|--lora x=$tmp/a64.gguf:0.5")
    for c in "${cases[@]}"; do
        IFS='|' read -r name list flags <<<"$c"
        for p in "Once upon a time" "The little dog" "Lily wanted"; do
            total=$((total + 1))
            # shellcheck disable=SC2086
            "$B/pagoda-run" -m "$BASE" $flags -p "$p" -n "$N" --temp 0 $PAGODA_FLAGS >"$tmp/a.txt" 2>"$tmp/run.err" ||
                { echo "FAIL $bn $name '$p': pagoda-run failed"; cat "$tmp/run.err"; bfail=1; continue; }
            curl -s "127.0.0.1:$port/completion" -o "$tmp/b.json" \
                -d "{\"prompt\":\"$p\",\"n_predict\":$N,\"temperature\":0,\"top_k\":1,\"n_probs\":8,\"lora\":$list}"
            v=$(/usr/bin/python3 "$here/lora_cmp.py" "$tmp/a.txt" "$tmp/b.json" "$TIE_GAP")
            case $v in
            ok) ok=$((ok + 1)); echo "ok   $bn $name '$p': $(head -c 60 "$tmp/a.txt" | tr '\n' ' ')" ;;
            tie*) ok=$((ok + 1)); ties=$((ties + 1)); echo "tie  $bn $name '$p': $v" ;;
            skip*) skips=$((skips + 1)); echo "skip $bn $name '$p': $v" ;;
            *) bfail=1; echo "FAIL $bn $name '$p': $v"
               echo "  pagoda: $(head -c 160 "$tmp/a.txt" | tr '\n' ' ')"
               echo "  llama:  $(/usr/bin/python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["content"][:160])' "$tmp/b.json" | tr '\n' ' ')" ;;
            esac
        done
    done
    kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
    srv=
    [ $bfail = 0 ] || fail=1
    line="$bn: $ok/$total equal ($ties of them ties), $skips skipped"
    [ $bfail = 0 ] && line="PASS $line" || line="FAIL $line"
    echo "$line"
    summary="$summary$line"$'\n'
done
printf %s "$summary"
[ $fail = 0 ] && echo "PASS: pagoda == llama-server on every base, adapter, scale and prompt"
exit $fail
