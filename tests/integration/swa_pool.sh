#!/usr/bin/env bash
# A model whose every layer has a sliding window serves generations longer
# than its KV pool, end to end: pagoda-mkmodel writes two small random llama
# models (Q8_0, builtin tokenizer, context 2048) that differ only in
# --window 32; each is served by one pagoda-worker with an 8-block pool
# (256 positions) behind one pagoda-gateway (real ZeroMQ, real HTTP), and:
#   - windowed: two concurrent greedy /v1/completions of 600 tokens each
#     finish by length with 600 completion tokens (the worker releases the
#     blocks behind each sequence's window; docs/BATCHING.md), and each equals
#     the same request run alone;
#   - dense: the same request cannot get 600 tokens from that pool (its
#     sequences are limited to the pool's 256 positions).
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

spawn "$TMP/gateway.log" "$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
  --heartbeat-ms 500
for m in swa dense; do
  win=()
  [[ $m == swa ]] && win=(--window 32)
  if ! "$MK" -o "$TMP/$m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --ctx 2048 \
      --type Q8_0 --seed 5 "${win[@]}" >"$TMP/mk-$m.log" 2>&1; then
    fail "pagoda-mkmodel $m"
    sed 's/^/# /' "$TMP/mk-$m.log"
    finish
  fi
  spawn "$TMP/worker-$m.log" "$WK" --gateway "tcp://127.0.0.1:$ZP" --model "$m=$TMP/$m.gguf" \
    --heartbeat-ms 500 --max-seqs 2 --max-batch-tokens 64 --kv-blocks 8 --threads 1
done

listed() { curl -s --max-time 2 "$URL/health" | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if any(w['model']=='$1' for w in j['workers']) else 1)"; }
for m in swa dense; do
  if ! wait_for 30 listed "$m"; then
    fail "$m: worker registers"
    sed 's/^/# /' "$TMP/worker-$m.log" | tail -n 20
    finish
  fi
done

# complete MODEL N OUT : one greedy completion of N tokens into OUT
complete() {
  curl -s --max-time 120 "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"prompt\":\"Once upon a time there was a little tree in the sun\",\"max_tokens\":$2,\"temperature\":0,\"ignore_eos\":true}" >"$3"
}
# summary < body: "finish completion_tokens" or the error message
summary() {
  python3 -c "
import json, sys
j = json.load(sys.stdin)
if 'error' in j:
    print('error', j['error']['message'])
else:
    print(j['choices'][0]['finish_reason'], j['usage']['completion_tokens'])"
}
text() { python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['choices'][0]['text']))"; }

complete swa 600 "$TMP/a.json" &
pa=$!
complete swa 600 "$TMP/b.json" &
pb=$!
wait "$pa" "$pb"
for x in a b; do
  s=$(summary <"$TMP/$x.json" 2>&1)
  check "windowed model, 8-block pool: 600-token completion $x finishes by length ($s)" test "$s" = "length 600"
done
complete swa 600 "$TMP/alone.json"
check "windowed: concurrent output == alone" test "$(text <"$TMP/a.json")" = "$(text <"$TMP/alone.json")"

complete dense 600 "$TMP/dense.json"
s=$(summary <"$TMP/dense.json" 2>&1)
if [[ $s == "length 600" ]]; then
  fail "dense model, same pool: got 600 tokens, the pool cannot hold them"
else
  ok "dense model, same pool: no 600-token completion ($s)"
fi
check "gateway still serving" bash -c "curl -s --max-time 2 $URL/health | grep -q workers"
finish
