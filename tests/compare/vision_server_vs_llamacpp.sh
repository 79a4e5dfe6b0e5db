#!/usr/bin/env bash
# vision_server_vs_llamacpp.sh — the same greedy text from pagoda's server and
# llama.cpp's server for generated text model + mmproj pairs and three
# images, sent as Chat Completions image_url data URLs (PNG). The server
# sibling of vision_vs_llamacpp.sh (pagoda-run vs llama-mtmd-cli). Not part
# of `make test` (CI has no llama.cpp): skips with a message when
# llama-server is absent.
#
# usage: tests/compare/vision_server_vs_llamacpp.sh [LLAMA_BIN_DIR]
#        (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# The pairs are vision_vs_llamacpp.sh's (pagoda-mkmodel, random weights,
# dim 64, 7 px patches, ChatML / Gemma turn templates): PROJS (default
# "idefics3 smolvlm gemma3") x TYPES (default "F32 F16"); idefics3 has 56 px tiles,
# pixel shuffle 2x2 and preproc_image_size 112, so each 112 px picture is
# 2 x 2 tiles + the global image, which the gateway cuts
# (gateway/request_image.c) and llama-server's libmtmd cuts on its own.
# Each server is started once per pair: `llama-server -m --mmproj` and
# `pagoda-gateway --model m=… --mmproj m=…`; for each image, one request
# with temperature 0 and max_tokens N to each.
#
# The prompt: pagoda joins a message's parts with "\n" (as it joins text
# parts); llama-server joins them with "\n" too but writes none after a
# media marker. So llama-server gets the text part "\n" + PROMPT, and both
# render `<image>\nPROMPT` in the same template. The image tokens' text
# (CONTROL tokens a random model may generate) is removed before comparing,
# as in vision_vs_llamacpp.sh. Prints ok/FAIL per case and `PASS k/n`.
# A case whose texts part where llama.cpp took one of pagoda's top 5
# alternatives within TIE nats (0.01) of pagoda's pick is reported as a
# near-tie ("tie", not counted in k and not a failure): the two programs sum
# floats in different orders, so such a token is a coin flip.
set -u
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
B=${PAGODA_BUILD:-build}
N=${N:-24}
PROMPT=${PROMPT:-describe the picture}
TYPES=${TYPES:-F32 F16}
PROJS=${PROJS:-idefics3 smolvlm gemma3}
if [ ! -x "$LLAMA_BIN/llama-server" ]; then
    echo "SKIP: no $LLAMA_BIN/llama-server (build llama.cpp with its tools to compare)"
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/pagoda-vision-srv-cmp-XXXXXX)
lpid= gpid=
stop() {
    [ -n "$lpid" ] && kill "$lpid" 2>/dev/null && wait "$lpid" 2>/dev/null
    [ -n "$gpid" ] && kill "$gpid" 2>/dev/null && wait "$gpid" 2>/dev/null
    lpid= gpid=
}
trap 'stop; rm -rf "$tmp"' EXIT
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
/usr/bin/python3 "$here/vision_images.py" "$tmp" 112 || exit 1
# the same pixels as PNG (the gateway takes PNG, JPEG, WebP, GIF)
/usr/bin/python3 "$here/vision_png.py" "$tmp" gradient checker noise || exit 1
# ask URL MODEL IMAGE TEXT [JSON]: the greedy text of one image_url
# request, trimmed and without the image tokens' text; with JSON, also the
# reply (its logprobs: top 5 per token) written there
ask() {
    /usr/bin/python3 - "$1" "$2" "$3" "$4" "$N" "${5:-}" <<'PY'
import base64, json, re, sys, urllib.request
url, model, img, text, n, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
data = "data:image/png;base64," + base64.b64encode(open(img, "rb").read()).decode()
body = {"model": model, "max_tokens": n, "temperature": 0, "messages": [{"role": "user", "content": [
    {"type": "image_url", "image_url": {"url": data}}, {"type": "text", "text": text}]}]}
if out:
    body.update(logprobs=True, top_logprobs=5)
req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
try:
    j = json.load(urllib.request.urlopen(req, timeout=1800))
    t = j["choices"][0]["message"]["content"] or ""
except Exception as e:
    print(f"<error: {e}>")
    sys.exit(1)
if out:
    json.dump(j, open(out, "w"))
print(re.sub(r"<row_[0-9]+_col_[0-9]+>|<global-img>|<fake_token_around_image>|<image>", "", t).strip())
PY
}
# near_tie REPLY.json LLAMA_TEXT: exits 0 when the texts part at a token
# where llama.cpp's continuation starts with one of pagoda's top 5
# alternatives within TIE (default 0.01) nats of the token pagoda chose (the
# two programs' float sums differ in order, so such a pick is a coin flip);
# prints where
near_tie() {
    /usr/bin/python3 - "$1" "$2" "${TIE:-0.01}" <<'PY'
import json, re, sys
j, want, eps = json.load(open(sys.argv[1])), sys.argv[2], float(sys.argv[3])
strip = lambda t: re.sub(r"<row_[0-9]+_col_[0-9]+>|<global-img>|<fake_token_around_image>|<image>", "", t).lstrip()
prefix = ""
for i, c in enumerate(j["choices"][0]["logprobs"]["content"]):
    if want.startswith(strip(prefix + c["token"])):
        prefix += c["token"]
        continue
    for alt in c["top_logprobs"]:  # the first token where the texts part
        t = strip(prefix + alt["token"])
        if alt["token"] != c["token"] and t != strip(prefix) and want.startswith(t) and \
                c["logprob"] - alt["logprob"] <= eps:
            print(f"token {i}: pagoda {c['token']!r} ({c['logprob']:.4f}), llama.cpp {alt['token']!r} "
                  f"({alt['logprob']:.4f})")
            sys.exit(0)
    break
sys.exit(1)
PY
}
up() { for _ in $(seq 600); do curl -sf "$1" > /dev/null 2>&1 && return 0; sleep 1; done; return 1; }
fail=0 n_ok=0 n_all=0 n_tie=0
for pj in $PROJS; do
for t in $TYPES; do
    case $pj in
        gemma3) pargs=(--arch gemma3 --chat-template "$here/gemma_turns.jinja" --vis-size 112 --vis-merge 4) ;;
        idefics3) pargs=(--arch llama --chat-template "$here/chatml_turns.jinja" --projector idefics3
                         --vis-size 56 --vis-merge 2 --vis-preproc 112) ;;
        smolvlm) pargs=(--arch llama --chat-template "$here/../common/text/chat_templates/smolvlm.jinja"
                        --projector idefics3 --vis-size 56 --vis-merge 2 --vis-preproc 112) ;;
        *) echo "unknown projector $pj"; exit 1 ;;
    esac
    "$B/pagoda-mkmodel" -o "$tmp/text-$t.gguf" "${pargs[@]}" --dim 64 --layers 2 --heads 4 --kv-heads 2 \
        --ffn 128 --ctx 512 --vocab 512 --type "$t" --seed 40 --untied --mute-special --logit-scale 8 \
        --mmproj "$tmp/mmproj-$t.gguf" --vis-patch 7 --vis-dim 64 --vis-layers 2 \
        --vis-heads 4 --vis-ffn 128 > "$tmp/mk.log" 2>&1 || { cat "$tmp/mk.log"; exit 1; }
    lp=$(port) gp=$(port) zp=$(port)
    "$LLAMA_BIN/llama-server" -m "$tmp/text-$t.gguf" --mmproj "$tmp/mmproj-$t.gguf" -t 2 -c 512 -np 1 \
        --host 127.0.0.1 --port "$lp" --no-warmup > "$tmp/llama.log" 2>&1 &
    lpid=$!
    "$B/pagoda-gateway" --listen "127.0.0.1:$gp" --worker-endpoint "tcp://127.0.0.1:$zp" --threads 2 \
        --model "m=$tmp/text-$t.gguf" --mmproj "m=$tmp/mmproj-$t.gguf" > "$tmp/pagoda.log" 2>&1 &
    gpid=$!
    if ! up "http://127.0.0.1:$lp/health" || ! up "http://127.0.0.1:$gp/health"; then
        echo "FAIL $pj $t: a server did not come up"; tail -5 "$tmp/llama.log" "$tmp/pagoda.log"; fail=1; stop; continue
    fi
    # the gateway's /health answers before the worker registers: wait for it
    for _ in $(seq 300); do
        curl -sf "http://127.0.0.1:$gp/health" | grep -q '"replicas": *1' && break; sleep 1
    done
    for img in gradient checker noise; do
        n_all=$((n_all + 1))
        name="$pj $t 112px $img"
        a=$(ask "http://127.0.0.1:$gp" m "$tmp/$img.png" "$PROMPT" "$tmp/reply.json")
        b=$(ask "http://127.0.0.1:$lp" m "$tmp/$img.png" $'\n'"$PROMPT")
        if [ "$a" = "$b" ]; then
            echo "ok   $name: $(printf %s "$a" | head -c 80)"
            n_ok=$((n_ok + 1))
        elif tie=$(near_tie "$tmp/reply.json" "$b"); then
            echo "tie  $name: a near-tie, $tie"
            n_tie=$((n_tie + 1))
        else
            echo "FAIL $name"
            echo "  pagoda: $(printf %s "$a" | head -c 200)"
            echo "  llama:  $(printf %s "$b" | head -c 200)"
            fail=1
        fi
    done
    stop
done
done
echo "PASS $n_ok/$n_all (pagoda-gateway == llama-server; $n_tie more differ at a near-tie)"
exit $fail
