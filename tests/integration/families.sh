#!/usr/bin/env bash
# Every architecture family served end to end: for each of llama (with a
# Mistral-style sliding window), qwen3, qwen2moe, qwen3moe, gemma2, gemma3
# and phi3, pagoda-mkmodel writes a small random model (Q8_0, builtin
# tokenizer with its ChatML template, sliding window 8 where the family has
# one, so a 40-token prompt crosses it), one pagoda-worker serves it behind
# one pagoda-gateway (real ZeroMQ, real HTTP), and:
#   - /v1/chat/completions answers with the OpenAI shape: one choice, an
#     assistant message with string content, finish_reason length, usage
#     counting the 12 generated tokens;
#   - greedy output alone == the same request inside a batch of 4 concurrent
#     ones (the worker batches them into the same steps).
# The numerics of each family are checked against the NumPy reference in
# tests/worker/model/test_forward.c; this checks that they load and serve.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
MK=$BUILD/pagoda-mkmodel
for b in "$GW" "$WK" "$MK"; do
  [[ -x $b ]] || { fail "$b not built"; finish; }
done

HP=$(free_port)
ZP=$(free_port)
URL=http://127.0.0.1:$HP
FAMILIES="llama qwen3 qwen2moe qwen3moe gemma2 gemma3 phi3"

spawn "$TMP/gateway.log" "$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
  --heartbeat-ms 500
for f in $FAMILIES; do
  if ! "$MK" -o "$TMP/$f.gguf" --arch "$f" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 \
      --expert-ffn 64 --experts 4 --window 8 --ctx 256 --type Q8_0 --seed 3 >"$TMP/mk-$f.log" 2>&1; then
    fail "pagoda-mkmodel --arch $f"
    sed 's/^/# /' "$TMP/mk-$f.log"
    continue
  fi
  spawn "$TMP/worker-$f.log" "$WK" --gateway "tcp://127.0.0.1:$ZP" --model "$f=$TMP/$f.gguf" \
    --heartbeat-ms 500 --max-seqs 4 --kv-blocks 64 --threads 1
done

listed() { curl -s --max-time 2 "$URL/health" | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if any(w['model']=='$1' for w in j['workers']) else 1)"; }

# chat FAMILY N : POST one greedy chat request with a long-ish user message
chat() {
  local words="Once upon a time there was a little tree in the sun and the happy people could play"
  curl -s --max-time 60 "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"system\",\"content\":\"$words\"},{\"role\":\"user\",\"content\":\"$words $2\"}],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}"
}
shape_ok() { # body on stdin
  python3 -c "
import json, sys
j = json.load(sys.stdin)
c = j['choices']
ok = (j['object'] == 'chat.completion' and len(c) == 1 and c[0]['message']['role'] == 'assistant'
      and isinstance(c[0]['message']['content'], str) and c[0]['finish_reason'] in ('length', 'stop')
      and j['usage']['completion_tokens'] >= 1 and j['usage']['prompt_tokens'] > 16)
sys.exit(0 if ok else 1)"
}
content() { python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['choices'][0]['message']['content']))"; }

for f in $FAMILIES; do
  [[ -f $TMP/$f.gguf ]] || continue
  if ! wait_for 30 listed "$f"; then
    fail "$f: worker registers"
    sed 's/^/# /' "$TMP/worker-$f.log" | tail -n 20
    continue
  fi
  alone=$(chat "$f" 0)
  if echo "$alone" | shape_ok; then
    ok "$f: chat completion has the OpenAI shape ($(echo "$alone" | content | cut -c1-60))"
  else
    fail "$f: chat completion shape: $alone"
    continue
  fi
  # the same request among three others, all in flight at once
  others=()
  for i in 1 2 3; do chat "$f" "$i" >"$TMP/$f-other$i.json" & others+=($!); done
  batched=$(chat "$f" 0)
  wait "${others[@]}"   # only the curls: a bare wait would wait for the servers too
  a=$(echo "$alone" | content) b=$(echo "$batched" | content)
  check "$f: greedy output alone == in a batch of 4" test "$a" = "$b"
done
check "gateway still serving" bash -c "curl -s --max-time 2 $URL/health | grep -q workers"
finish
