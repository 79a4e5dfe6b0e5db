#!/usr/bin/env bash
# A prompt that can never fit is refused at once with a 400 that names the
# limit, on /v1/chat/completions (OpenAI shape, streamed and not) and
# /v1/messages (Anthropic shape); a prompt that fits still answers; and a
# pool sized from memory (the default) logs its rule. One gateway (real
# ZeroMQ, real HTTP) from a YAML file, two small random models (F32, the
# stories260K tokenizer when ../shared has it, else the builtin one):
#   tiny  context 2048, kv_budget_mb: 1 — a 1 MiB pool of 7 blocks of 32
#         (224 positions): the KV pool, not the context, is the limit
#   ctx   context 256, kv_budget_mb 0 (default): sized from memory, capped
#         by max_seqs full contexts — the model's context is the limit
# About 10 s (30 s on 2 loaded cores, most of it python3 starting).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
for b in "$GW" "$MK" "$BUILD/pagoda-worker"; do
  [[ -x $b ]] || { fail "$b not built"; finish; }
done
TOK=$SHARED/models/stories260K.gguf
[[ -f $TOK ]] || TOK=builtin
mk() { # out ctx
  "$MK" -o "$1" --tokenizer-from "$TOK" --dim 128 --layers 4 --heads 4 --kv-heads 4 --ffn 256 --ctx "$2" \
    --type F32 --seed 3 >"$TMP/mk.log" 2>&1 || { fail "pagoda-mkmodel $1"; sed 's/^/# /' "$TMP/mk.log"; finish; }
}
mk "$TMP/tiny.gguf" 2048
mk "$TMP/ctx.gguf" 256

HP=$(free_port)
ZP=$(free_port)
URL=http://127.0.0.1:$HP
cat >"$TMP/pagoda.yaml" <<EOF
listen: 127.0.0.1:$HP
worker_endpoint: tcp://127.0.0.1:$ZP
models:
  - name: tiny
    path: $TMP/tiny.gguf
    kv_budget_mb: 1
    max_seqs: 2
    threads: 1
  - name: ctx
    path: $TMP/ctx.gguf
    max_seqs: 2
    threads: 1
EOF
spawn "$TMP/gw.log" "$GW" --config "$TMP/pagoda.yaml"
GPID=$SPAWNED
n_registered() { curl -s --max-time 2 "$URL/health" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))'; }
two() { [[ $(n_registered) == 2 ]]; }
if ! wait_for 60 two; then
  fail "both workers register"
  tail -n 30 "$TMP/gw.log" | sed 's/^/# /'
  finish
fi

# the pools: tiny's from its 1 MiB budget, ctx's from memory with the rule in one line
check "tiny: a 7-block pool from --kv-budget-mb 1" grep -q "7 KV blocks of 32 positions" "$TMP/gw.log"
line=$(grep -m1 "kv pool: " "$TMP/gw.log" | sed 's/.*kv pool: //')
echo "# ctx: kv pool: $line"
check "ctx: the gateway shares its memory among 2 local workers" grep -q "memory for 2 local workers: " "$TMP/gw.log"
check "ctx: the pool's rule is logged with the gateway's share (/ 2 workers) and the context cap" \
  bash -c "grep -q ' / 2 workers - weights .*, ctx cap .*: context cap' <<<'$line'"

LONG=$(python3 -c 'print(" ".join(["Once upon a time there was a little girl who liked to play in the park."] * 40))')
# post PATH MODEL CONTENT [STREAM] → status in $TMP/code, body in $TMP/body
post() {
  local body
  if [[ $1 == /v1/messages ]]; then
    body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "max_tokens": 4, "messages": [{"role": "user", "content": sys.argv[2]}]}))' "$2" "$3")
  else
    body=$(python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "max_tokens": 4, "temperature": 0, "stream": sys.argv[3] == "1", "messages": [{"role": "user", "content": sys.argv[2]}]}))' "$2" "$3" "${4:-0}")
  fi
  curl -s --max-time 30 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' \
    -H 'anthropic-version: 2023-06-01' -d "$body" "$URL$1" >"$TMP/code"
}
# err_field SHAPE FIELD < body: the OpenAI or Anthropic error's field
err_field() {
  python3 -c '
import json, sys
j = json.load(sys.stdin)
if sys.argv[1] == "anthropic":
    assert j["type"] == "error", j
print(j["error"].get(sys.argv[2]))' "$1" "$2" <"$TMP/body" 2>/dev/null
}

# ---- the KV pool is the limit -----------------------------------------------------
t0=$SECONDS
post /v1/chat/completions tiny "$LONG"
msg=$(err_field openai message)
echo "# chat, tiny: $(cat "$TMP/code") $msg"
check "chat: a prompt over the KV pool gets 400 at once" test "$(cat "$TMP/code")" = 400 -a $((SECONDS - t0)) -lt 20
check "chat: code context_length_exceeded" test "$(err_field openai code)" = context_length_exceeded
check "chat: the message names the prompt's length and the pool's limit" \
  bash -c "grep -Eq '^prompt is too long: [0-9]+ tokens, but this server.s KV cache holds at most 224 positions per sequence \(--kv-budget-mb 1\), 1 of them for the reply; the model.s context length is 2048$' <<<\"\$1\"" _ "$msg"

post /v1/chat/completions tiny "$LONG" 1
check "chat, streamed: 400 before any event ($(head -c 120 "$TMP/body"))" \
  bash -c "test \"\$(cat '$TMP/code')\" = 400 && grep -q 'at most 224 positions' '$TMP/body'"

post /v1/messages tiny "$LONG"
msg=$(err_field anthropic message)
echo "# messages, tiny: $(cat "$TMP/code") $msg"
check "messages: 400 in the Anthropic error shape" test "$(cat "$TMP/code")" = 400 -a "$(err_field anthropic type)" = invalid_request_error
check "messages: the message names the pool's limit" bash -c "grep -q 'KV cache holds at most 224 positions per sequence (--kv-budget-mb 1)' <<<\"\$1\"" _ "$msg"

post /v1/chat/completions tiny "Hello"
check "chat: a prompt that fits still answers (200)" test "$(cat "$TMP/code")" = 200
post /v1/messages tiny "Hello"
check "messages: a prompt that fits still answers (200)" test "$(cat "$TMP/code")" = 200

# ---- the model's context is the limit ----------------------------------------------
post /v1/chat/completions ctx "$LONG"
msg=$(err_field openai message)
echo "# chat, ctx: $(cat "$TMP/code") $msg"
check "chat: a prompt over the model's context gets 400 context_length_exceeded" \
  test "$(cat "$TMP/code")" = 400 -a "$(err_field openai code)" = context_length_exceeded
check "chat: the message names the context length" \
  bash -c "grep -Eq '^prompt is too long: [0-9]+ tokens, but the model.s context length is 256 tokens, 1 of them for the reply$' <<<\"\$1\"" _ "$msg"
post /v1/messages ctx "Hello"
check "messages, ctx: a prompt that fits still answers (200)" test "$(cat "$TMP/code")" = 200

kill -TERM "$GPID"
wait "$GPID" 2>/dev/null
check "gateway exits 0 on SIGTERM" test $? -eq 0
finish
