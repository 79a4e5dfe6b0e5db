#!/usr/bin/env bash
# vision_vs_llamacpp.sh — the same greedy text from pagoda and llama.cpp for
# each supported projector's text model + mmproj pair and three images. Not part of `make
# test` (CI has no llama.cpp): skips with a message when llama-mtmd-cli is
# absent.
#
# usage: tests/compare/vision_vs_llamacpp.sh [LLAMA_BIN_DIR]
#        (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# pagoda-mkmodel writes, for each PROJS and TYPES entry, a random-weight
# text model (dim 64, 2 layers, the builtin tokenizer with the projector's
# image tokens) and its projector (--mmproj, 7 px patches):
#   gemma3   --arch gemma3, the Gemma turn template tests/compare/gemma_turns.jinja,
#            112 px images, 4x4 pooling: 16 rows per image;
#   idefics3 --arch llama (SmolLM2's), a ChatML template (pagoda renders no
#            SmolVLM "User:" family) tests/compare/chatml_turns.jinja, 56 px tiles, pixel shuffle 2x2
#            (16 rows per tile), preproc_image_size 112: the 112 px images
#            are 2 x 2 tiles + the global image (5 x 16 rows), the 100 px
#            ones the same after the bicubic scaling up to 112;
# tests/compare/vision_images.py writes the three PPM images. For each
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
PROJS=${PROJS:-gemma3 idefics3}
if [ ! -x "$LLAMA_BIN/llama-mtmd-cli" ]; then
    echo "SKIP: no $LLAMA_BIN/llama-mtmd-cli (build llama.cpp with its tools to compare)"
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/pagoda-vision-cmp-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/112" "$tmp/100"
/usr/bin/python3 "$here/vision_images.py" "$tmp/112" 112 || exit 1
/usr/bin/python3 "$here/vision_images.py" "$tmp/100" 100 || exit 1
fail=0
n_ok=0
n_all=0
for pj in $PROJS; do
for t in $TYPES; do
    case $pj in
        gemma3) pargs=(--arch gemma3 --chat-template "$here/gemma_turns.jinja" --vis-size 112 --vis-merge 4)
                sizes="112" ;;
        idefics3) pargs=(--arch llama --chat-template "$here/chatml_turns.jinja" --projector idefics3
                         --vis-size 56 --vis-merge 2 --vis-preproc 112)
                  sizes="112 100" ;;
        *) echo "unknown projector $pj"; exit 1 ;;
    esac
    "$B/pagoda-mkmodel" -o "$tmp/text-$t.gguf" "${pargs[@]}" --dim 64 --layers 2 --heads 4 --kv-heads 2 \
        --ffn 128 --ctx 512 --vocab 512 --type "$t" --seed 40 --untied --mute-special --logit-scale 8 \
        --mmproj "$tmp/mmproj-$t.gguf" --vis-patch 7 --vis-dim 64 --vis-layers 2 \
        --vis-heads 4 --vis-ffn 128 > "$tmp/mk.log" 2>&1 || { cat "$tmp/mk.log"; exit 1; }
    for sz in $sizes; do
    for img in gradient checker noise; do
        n_all=$((n_all + 1))
        name="$pj $t ${sz}px $img"
        "$B/pagoda-run" -m "$tmp/text-$t.gguf" --mmproj "$tmp/mmproj-$t.gguf" --image "$tmp/$sz/$img.ppm" \
            -p "$PROMPT" -n "$N" --temp 0 --threads 2 --exact-matmul > "$tmp/pagoda.txt" 2> "$tmp/pagoda.err" ||
            { echo "FAIL $name: pagoda-run failed"; cat "$tmp/pagoda.err"; fail=1; continue; }
        "$LLAMA_BIN/llama-mtmd-cli" -m "$tmp/text-$t.gguf" --mmproj "$tmp/mmproj-$t.gguf" --image "$tmp/$sz/$img.ppm" \
            -p "$PROMPT" -n "$N" --temp 0 -t 2 -c 512 --jinja --no-warmup > "$tmp/llama.txt" 2> "$tmp/llama.err" ||
            { echo "FAIL $name: llama-mtmd-cli failed"; tail -5 "$tmp/llama.err"; fail=1; continue; }
        # llama-mtmd-cli's stdout is the continuation (its logs go to stderr,
        # a newline comes first); both compared with the whitespace around the
        # whole text trimmed, and without the idefics3 image tokens' text: a
        # random model generates them (CONTROL tokens), llama-mtmd-cli prints
        # them and pagoda-run, like llama-server, does not
        trim() { /usr/bin/python3 -c 'import re, sys; t = open(sys.argv[1], "rb").read().replace(b"\0", b"").decode("utf-8", "replace"); sys.stdout.write(re.sub(r"<row_[0-9]+_col_[0-9]+>|<global-img>|<fake_token_around_image>|<image>", "", t).strip())' "$1"; }
        a=$(trim "$tmp/pagoda.txt")
        b=$(trim "$tmp/llama.txt")
        if [ "$a" = "$b" ]; then
            echo "ok   $name: $(printf %s "$a" | head -c 80)"
            n_ok=$((n_ok + 1))
        else
            echo "FAIL $name"
            echo "  pagoda: $(printf %s "$a" | head -c 200)"
            echo "  llama:  $(printf %s "$b" | head -c 200)"
            fail=1
        fi
    done
    done
done
done
echo "PASS $n_ok/$n_all (pagoda == llama-mtmd-cli)"
exit $fail
