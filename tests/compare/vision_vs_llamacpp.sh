#!/usr/bin/env bash
# vision_vs_llamacpp.sh — the same greedy text from pagoda and llama.cpp for
# a Gemma 3 text model + mmproj pair and three images. Not part of `make
# test` (CI has no llama.cpp): skips with a message when llama-mtmd-cli is
# absent.
#
# usage: tests/compare/vision_vs_llamacpp.sh [LLAMA_BIN_DIR]
#        (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# pagoda-mkmodel writes a random-weight gemma3 text model (dim 64, 2 layers,
# the builtin tokenizer with Gemma 3's image tokens, the Gemma turn template
# tests/compare/gemma_turns.jinja) and its projector (--mmproj: 112 px
# images, 7 px patches, 16 rows per image) for each TYPES entry;
# tests/compare/vision_images.py writes three 112 px PPM images. For each
# pair and image, `pagoda-run --mmproj --image -p PROMPT -n N --temp 0` and
# `llama-mtmd-cli -m --mmproj --image -p PROMPT -n N --temp 0` must print
# the same text on stdout (surrounding whitespace trimmed). pagoda-run runs
# with --exact-matmul (float kernels, no int8 activation rounding).
set -u
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
B=${PAGODA_BUILD:-build}
N=${N:-24}
PROMPT=${PROMPT:-describe the picture}
TYPES=${TYPES:-F32 F16}
if [ ! -x "$LLAMA_BIN/llama-mtmd-cli" ]; then
    echo "SKIP: no $LLAMA_BIN/llama-mtmd-cli (build llama.cpp with its tools to compare)"
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/pagoda-vision-cmp-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/vision_images.py" "$tmp" 112 || exit 1
fail=0
for t in $TYPES; do
    "$B/pagoda-mkmodel" -o "$tmp/text-$t.gguf" --arch gemma3 --dim 64 --layers 2 --heads 4 --kv-heads 2 \
        --ffn 128 --ctx 512 --vocab 512 --type "$t" --seed 40 --untied --mute-special --logit-scale 8 --chat-template "$here/gemma_turns.jinja" \
        --mmproj "$tmp/mmproj-$t.gguf" --vis-size 112 --vis-patch 7 --vis-dim 64 --vis-layers 2 \
        --vis-heads 4 --vis-ffn 128 > "$tmp/mk.log" 2>&1 || { cat "$tmp/mk.log"; exit 1; }
    for img in gradient checker noise; do
        "$B/pagoda-run" -m "$tmp/text-$t.gguf" --mmproj "$tmp/mmproj-$t.gguf" --image "$tmp/$img.ppm" \
            -p "$PROMPT" -n "$N" --temp 0 --threads 2 --exact-matmul > "$tmp/pagoda.txt" 2> "$tmp/pagoda.err" ||
            { echo "FAIL $t $img: pagoda-run failed"; cat "$tmp/pagoda.err"; fail=1; continue; }
        "$LLAMA_BIN/llama-mtmd-cli" -m "$tmp/text-$t.gguf" --mmproj "$tmp/mmproj-$t.gguf" --image "$tmp/$img.ppm" \
            -p "$PROMPT" -n "$N" --temp 0 -t 2 -c 512 --jinja --no-warmup > "$tmp/llama.txt" 2> "$tmp/llama.err" ||
            { echo "FAIL $t $img: llama-mtmd-cli failed"; tail -5 "$tmp/llama.err"; fail=1; continue; }
        # llama-mtmd-cli's stdout is the continuation (its logs go to stderr,
        # a newline comes first); both compared with the whitespace around the
        # whole text trimmed
        trim() { /usr/bin/python3 -c 'import sys; sys.stdout.write(open(sys.argv[1], "rb").read().replace(b"\0", b"").decode("utf-8", "replace").strip())' "$1"; }
        a=$(trim "$tmp/pagoda.txt")
        b=$(trim "$tmp/llama.txt")
        if [ "$a" = "$b" ]; then
            echo "ok   $t $img: $(printf %s "$a" | head -c 80)"
        else
            echo "FAIL $t $img"
            echo "  pagoda: $(printf %s "$a" | head -c 200)"
            echo "  llama:  $(printf %s "$b" | head -c 200)"
            fail=1
        fi
    done
done
[ $fail = 0 ] && echo "PASS: pagoda == llama-mtmd-cli on every pair and image"
exit $fail
