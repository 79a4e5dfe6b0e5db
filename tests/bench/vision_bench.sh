#!/usr/bin/env bash
# vision_bench.sh — image-encode time per image and time to first token with
# an image: pagoda-run beside llama-mtmd-cli on the same files (when
# llama.cpp's build is there). Prints numbers; asserts nothing.
#
# usage: tests/bench/vision_bench.sh [LLAMA_BIN_DIR]
#   (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# The pair is written by pagoda-mkmodel: a gemma3 text model (DIM, LAYERS)
# and its projector at VIS_SIZE px, VIS_PATCH px patches, width VIS_DIM,
# VIS_LAYERS blocks, VIS_FFN (defaults: 224 px, 14 px patches, 384 wide, 6
# blocks, 1536 — 256 patches, 16 rows per image; Gemma 3's real encoder is
# VIS_SIZE=896 VIS_PATCH=14 VIS_DIM=1152 VIS_LAYERS=27 VIS_HEADS=16
# VIS_FFN=4304, 4096 patches and 256 rows, minutes per image on 2 cores).
# Three images (tests/compare/vision_images.py), REPS runs each, THREADS
# threads, N generated tokens; the median of the runs per image.
set -u
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
B=${PAGODA_BUILD:-build}
THREADS=${THREADS:-2} REPS=${REPS:-3} N=${N:-8} TYPE=${TYPE:-F16}
DIM=${DIM:-256} LAYERS=${LAYERS:-4}
VIS_SIZE=${VIS_SIZE:-224} VIS_PATCH=${VIS_PATCH:-14} VIS_DIM=${VIS_DIM:-384} VIS_LAYERS=${VIS_LAYERS:-6}
VIS_HEADS=${VIS_HEADS:-6} VIS_FFN=${VIS_FFN:-1536}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/pagoda-vision-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/compare/vision_images.py" "$tmp" "$VIS_SIZE" || exit 1
"$B/pagoda-mkmodel" -o "$tmp/text.gguf" --arch gemma3 --dim "$DIM" --layers "$LAYERS" --heads 4 --kv-heads 2 \
    --ffn $((DIM * 4)) --ctx 1024 --vocab 512 --type "$TYPE" --seed 7 --untied --logit-scale 8 \
    --chat-template "$here/compare/gemma_turns.jinja" --mmproj "$tmp/mmproj.gguf" --vis-size "$VIS_SIZE" \
    --vis-patch "$VIS_PATCH" --vis-dim "$VIS_DIM" --vis-layers "$VIS_LAYERS" --vis-heads "$VIS_HEADS" \
    --vis-ffn "$VIS_FFN" > "$tmp/mk.log" 2>&1 || { cat "$tmp/mk.log"; exit 1; }
llama=0
[ -x "$LLAMA_BIN/llama-mtmd-cli" ] && llama=1
[ $llama = 0 ] && echo "# no $LLAMA_BIN/llama-mtmd-cli: pagoda only"
median() { sort -n | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] : "?"}'; }
echo "# gemma3 projector ${VIS_SIZE}px/${VIS_PATCH}px, width $VIS_DIM, $VIS_LAYERS blocks, $TYPE; text dim $DIM;" \
     "$THREADS threads; median of $REPS; ms"
printf '%-9s %14s %12s %14s %12s\n' image pagoda-encode pagoda-ttft llama-encode llama-ttft
for img in gradient checker noise; do
    : > "$tmp/pe"; : > "$tmp/pt"; : > "$tmp/le"; : > "$tmp/lt"
    for r in $(seq "$REPS"); do
        "$B/pagoda-run" -m "$tmp/text.gguf" --mmproj "$tmp/mmproj.gguf" --image "$tmp/$img.ppm" -p "what is it" \
            -n "$N" --temp 0 --threads "$THREADS" > /dev/null 2> "$tmp/p.err"
        sed -n 's/.*image encoded in \([0-9.]*\) ms.*/\1/p' "$tmp/p.err" >> "$tmp/pe"
        sed -n 's/.*first token after \([0-9.]*\) ms.*/\1/p' "$tmp/p.err" >> "$tmp/pt"
        if [ $llama = 1 ]; then
            "$LLAMA_BIN/llama-mtmd-cli" -m "$tmp/text.gguf" --mmproj "$tmp/mmproj.gguf" --image "$tmp/$img.ppm" \
                -p "what is it" -n "$N" --temp 0 -t "$THREADS" -c 1024 --jinja > /dev/null 2> "$tmp/l.err"
            # libmtmd's timings: "image slice encoded in X ms", "image decoded (batch 1/1) in Y ms";
            # llama's prompt eval: TTFT ~ encode + decode of the image + the text prefill
            sed -n 's/.*image slice encoded in \([0-9.]*\) ms.*/\1/p' "$tmp/l.err" | head -1 >> "$tmp/le"
            awk '/image slice encoded in/ {for (i=1;i<=NF;i++) if ($i=="in") e=$(i+1)}
                 /image decoded/ {for (i=1;i<=NF;i++) if ($i=="in") d=$(i+1)}
                 /prompt eval time/ {for (i=1;i<=NF;i++) if ($i=="=") {p=$(i+1); break}}
                 END {if (e != "") print e + d + p}' "$tmp/l.err" >> "$tmp/lt"
        fi
    done
    printf '%-9s %14s %12s %14s %12s\n' "$img" "$(median < "$tmp/pe")" "$(median < "$tmp/pt")" \
        "$( [ $llama = 1 ] && median < "$tmp/le" || echo -)" "$( [ $llama = 1 ] && median < "$tmp/lt" || echo -)"
done
