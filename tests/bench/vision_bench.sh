#!/usr/bin/env bash
# vision_bench.sh — image-encode time per image and time to first token with
# an image: pagoda beside llama.cpp on the same files (when llama.cpp's build
# is there). Prints numbers; asserts nothing.
#
# usage: tests/bench/vision_bench.sh [LLAMA_BIN_DIR]
#   (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# Columns (ms, median of REPS): pagoda-encode — pagoda-run's "image encoded
# in" (vision_encode of every encoder image of the picture: its tiles and
# global image for idefics3; the fast matmul paths unless EXACT=1 passes
# --exact-matmul); pagoda-ttft — pagoda-run's "first token after" (encode +
# prefill, from after the loads); server-ttft — pagoda-gateway's (and its
# worker's) time from sending a streamed /v1/chat/completions request with
# the picture as an image_url PNG data URL to its first content chunk;
# llama-encode — llama-mtmd-cli's "image slice encoded in" summed over the
# picture's slices (builds that batch print "batch encoding done in");
# llama-ttft — llama-server's time for the same request; pagoda-cpu and
# llama-cpu — user + system CPU seconds of the whole pagoda-run and
# llama-mtmd-cli process (loads, encode, N tokens; /usr/bin/time), which a
# loaded machine inflates far less than wall time: on a shared machine
# compare these. Each server is
# started once; every request starts with a system message of its own, so
# no prefix cache holds the picture (and llama-server gets cache_prompt
# false), and every run encodes it again.
#
# PRESET=gemma3 sets Gemma 3's real encoder shape (896 px, 14 px patches,
# width 1152, 27 blocks, 16 heads, FFN 4304: 4096 patches, 256 rows per
# image; any VIS_* given still wins, e.g. VIS_LAYERS=4 for a shorter run).
# PRESET=smolvlm sets SmolVLM-256M's: an idefics3 projector (PROJ=idefics3,
# text model --arch llama, ChatML template), 512 px tiles, 16 px patches,
# width 768, 12 blocks, 12 heads, FFN 3072, scale_factor 4 (64 rows per
# encoder image), preproc_image_size VIS_PREPROC (default 1024: a square
# picture is 2 x 2 tiles + the global image = 5 encoder images, 320 rows;
# SmolVLM's own 2048 gives 4 x 4 + 1 = 17).
#
# The pair is written by pagoda-mkmodel: a gemma3 text model (DIM, LAYERS)
# and its projector at VIS_SIZE px, VIS_PATCH px patches, width VIS_DIM,
# VIS_LAYERS blocks, VIS_FFN (defaults: 224 px, 14 px patches, 384 wide, 6
# blocks, 1536 — 256 patches, 16 rows per image; Gemma 3's real encoder is
# VIS_SIZE=896 VIS_PATCH=14 VIS_DIM=1152 VIS_LAYERS=27 VIS_HEADS=16
# VIS_FFN=4304, 4096 patches and 256 rows, minutes per image on 2 cores).
# SERVERS=0 starts neither server (no server-ttft, llama-ttft columns):
# half the run time when only the encoders are measured.
# Three images (tests/compare/vision_images.py), REPS runs each, THREADS
# threads, N generated tokens; the median of the runs per image.
set -u
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
B=${PAGODA_BUILD:-build}
THREADS=${THREADS:-2} REPS=${REPS:-3} N=${N:-8} TYPE=${TYPE:-F16}
DIM=${DIM:-256} LAYERS=${LAYERS:-4}
if [ "${PRESET:-}" = gemma3 ]; then
    VIS_SIZE=${VIS_SIZE:-896} VIS_PATCH=${VIS_PATCH:-14} VIS_DIM=${VIS_DIM:-1152} VIS_LAYERS=${VIS_LAYERS:-27}
    VIS_HEADS=${VIS_HEADS:-16} VIS_FFN=${VIS_FFN:-4304}
fi
if [ "${PRESET:-}" = smolvlm ]; then
    PROJ=idefics3
    VIS_SIZE=${VIS_SIZE:-512} VIS_PATCH=${VIS_PATCH:-16} VIS_DIM=${VIS_DIM:-768} VIS_LAYERS=${VIS_LAYERS:-12}
    VIS_HEADS=${VIS_HEADS:-12} VIS_FFN=${VIS_FFN:-3072} VIS_MERGE=${VIS_MERGE:-4} VIS_PREPROC=${VIS_PREPROC:-1024}
fi
PROJ=${PROJ:-gemma3}
VIS_SIZE=${VIS_SIZE:-224} VIS_PATCH=${VIS_PATCH:-14} VIS_DIM=${VIS_DIM:-384} VIS_LAYERS=${VIS_LAYERS:-6}
VIS_HEADS=${VIS_HEADS:-6} VIS_FFN=${VIS_FFN:-1536}
IMAGES=${IMAGES:-gradient checker noise}
EXACT_FLAG=
[ "${EXACT:-0}" = 1 ] && EXACT_FLAG=--exact-matmul
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/pagoda-vision-bench-XXXXXX)
srv=
gw=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; [ -n "$gw" ] && kill "$gw" 2>/dev/null; rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/compare/vision_images.py" "$tmp" "$VIS_SIZE" || exit 1
# the same pixels as PNG, for the gateway (PNG, JPEG, WebP, GIF)
/usr/bin/python3 "$here/compare/vision_png.py" "$tmp" $IMAGES || exit 1
if [ "$PROJ" = idefics3 ]; then
    pargs=(--arch llama --chat-template "$here/compare/chatml_turns.jinja" --projector idefics3
           --vis-merge "${VIS_MERGE:-2}" --vis-preproc "${VIS_PREPROC:-$((2 * VIS_SIZE))}")
else
    pargs=(--arch gemma3 --chat-template "$here/compare/gemma_turns.jinja")
fi
"$B/pagoda-mkmodel" -o "$tmp/text.gguf" "${pargs[@]}" --dim "$DIM" --layers "$LAYERS" --heads 4 --kv-heads 2 \
    --ffn $((DIM * 4)) --ctx 2048 --vocab 512 --type "$TYPE" --seed 7 --untied --logit-scale 8 \
    --mmproj "$tmp/mmproj.gguf" --vis-size "$VIS_SIZE" \
    --vis-patch "$VIS_PATCH" --vis-dim "$VIS_DIM" --vis-layers "$VIS_LAYERS" --vis-heads "$VIS_HEADS" \
    --vis-ffn "$VIS_FFN" > "$tmp/mk.log" 2>&1 || { cat "$tmp/mk.log"; exit 1; }
freeport() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# pagoda-gateway once, for the server-ttft column
gport=
if [ "${SERVERS:-1}" != 0 ]; then
    gport=$(freeport)
    "$B/pagoda-gateway" --listen "127.0.0.1:$gport" --worker-endpoint "tcp://127.0.0.1:$(freeport)" \
        --threads "$THREADS" --model "m=$tmp/text.gguf" --mmproj "m=$tmp/mmproj.gguf" > "$tmp/gw.log" 2>&1 &
    gw=$!
    for _ in $(seq 600); do curl -sf "http://127.0.0.1:$gport/health" | grep -q '"replicas": *1' && break; sleep 1; done
    curl -sf "http://127.0.0.1:$gport/health" | grep -q '"replicas": *1' || { echo "# pagoda-gateway did not come up"; gport=; }
fi
llama=0
[ -x "$LLAMA_BIN/llama-mtmd-cli" ] && llama=1
[ $llama = 0 ] && echo "# no $LLAMA_BIN/llama-mtmd-cli: pagoda only"
# llama-server once, for the TTFT column
port=
if [ $llama = 1 ] && [ -x "$LLAMA_BIN/llama-server" ] && [ "${SERVERS:-1}" != 0 ]; then
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$LLAMA_BIN/llama-server" -m "$tmp/text.gguf" --mmproj "$tmp/mmproj.gguf" -t "$THREADS" -c 2048 --jinja \
        --host 127.0.0.1 --port "$port" --no-warmup > "$tmp/srv.log" 2>&1 &
    srv=$!
    for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break; sleep 1; done
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 || { echo "# llama-server did not come up"; port=; }
fi
# ttft PORT IMAGE.png: ms from the request to the first streamed content
# chunk; a system message of its own so no prefix cache holds the picture
ttft() {
    /usr/bin/python3 - "$1" "$2" "$N" <<'PY'
import base64, json, sys, time, urllib.request, uuid
port, img, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
url = "data:image/png;base64," + base64.b64encode(open(img, "rb").read()).decode()
body = {"model": "m", "messages": [{"role": "system", "content": "run " + uuid.uuid4().hex},
                                   {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                                {"type": "text", "text": "what is it"}]}],
        "max_tokens": n, "temperature": 0, "stream": True, "cache_prompt": False}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
t0 = time.monotonic()
with urllib.request.urlopen(req, timeout=3600) as r:
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ch = json.loads(line[6:]).get("choices") or [{}]
        if ch[0].get("delta", {}).get("content"):
            print(f"{(time.monotonic() - t0) * 1e3:.1f}")
            break
PY
}
median() { sort -n | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] : "?"}'; }
echo "# $PROJ projector ${VIS_SIZE}px/${VIS_PATCH}px, width $VIS_DIM, $VIS_LAYERS blocks, $VIS_HEADS heads," \
     "FFN $VIS_FFN${VIS_PREPROC:+, preproc ${VIS_PREPROC}px}, $TYPE; text dim $DIM; $THREADS threads;" \
     "pagoda ${EXACT_FLAG:-fast paths}; median of $REPS; ms per picture"
printf '%-9s %14s %12s %12s %14s %12s %11s %10s\n' image pagoda-encode pagoda-ttft server-ttft llama-encode \
    llama-ttft pagoda-cpu llama-cpu
# cputime FILE CMD...: CMD with its user + system seconds appended to FILE
cputime() {
    local f=$1
    shift
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -o "$tmp/time" -f '%U %S' "$@"
        local rc=$?
        awk '{printf "%.2f\n", $1 + $2}' "$tmp/time" >> "$f"
        return $rc
    fi
    "$@"
}
for img in $IMAGES; do
    : > "$tmp/pe"; : > "$tmp/pt"; : > "$tmp/st"; : > "$tmp/le"; : > "$tmp/lt"; : > "$tmp/pc"; : > "$tmp/lc"
    for r in $(seq "$REPS"); do
        cputime "$tmp/pc" "$B/pagoda-run" -m "$tmp/text.gguf" --mmproj "$tmp/mmproj.gguf" --image "$tmp/$img.ppm" -p "what is it" \
            -n "$N" --temp 0 --threads "$THREADS" $EXACT_FLAG > /dev/null 2> "$tmp/p.err"
        sed -n 's/.*image encoded in \([0-9.]*\) ms.*/\1/p' "$tmp/p.err" >> "$tmp/pe"
        sed -n 's/.*first token after \([0-9.]*\) ms.*/\1/p' "$tmp/p.err" >> "$tmp/pt"
        [ -n "$gport" ] && ttft "$gport" "$tmp/$img.png" >> "$tmp/st"
        if [ $llama = 1 ]; then
            cputime "$tmp/lc" "$LLAMA_BIN/llama-mtmd-cli" -m "$tmp/text.gguf" --mmproj "$tmp/mmproj.gguf" --image "$tmp/$img.ppm" \
                -p "what is it" -n "$N" --temp 0 -t "$THREADS" -c 2048 --jinja > /dev/null 2> "$tmp/l.err"
            # "image slice encoded in N ms" per slice (older builds), "mtmd
            # batch encoding done in N ms" per batch (the Aug 2026 build):
            # summed over the picture
            { grep -q 'image slice encoded in' "$tmp/l.err" &&
                sed -n 's/.*image slice encoded in \([0-9.]*\) ms.*/\1/p' "$tmp/l.err" ||
                sed -n 's/.*batch encoding done in \([0-9.]*\) ms.*/\1/p' "$tmp/l.err"; } |
                awk '{s += $1} END {if (NR) printf "%.1f\n", s}' >> "$tmp/le"
            [ -n "$port" ] && ttft "$port" "$tmp/$img.png" >> "$tmp/lt"
        fi
    done
    printf '%-9s %14s %12s %12s %14s %12s %11s %10s\n' "$img" "$(median < "$tmp/pe")" "$(median < "$tmp/pt")" \
        "$( [ -n "$gport" ] && median < "$tmp/st" || echo -)" \
        "$( [ $llama = 1 ] && median < "$tmp/le" || echo -)" "$( [ -n "$port" ] && median < "$tmp/lt" || echo -)" \
        "$( [ -s "$tmp/pc" ] && median < "$tmp/pc" || echo -)" "$( [ -s "$tmp/lc" ] && median < "$tmp/lc" || echo -)"
done
