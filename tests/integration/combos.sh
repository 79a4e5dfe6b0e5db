#!/usr/bin/env bash
# Seeded property test (#22 item 4, checks in combos_driver.py): random
# combinations of chat request features against a real gateway and real
# workers; each must answer within 30 s with a well-formed 200 or a 4xx
# OpenAI error. COMBO_SEED=S replays a run (the seed is printed first);
# COMBO_N (400) sets the number of combinations.
#
# Models: three tiny random-weight llamas (dim 64, 2 layers, 2048 context,
# pagoda-mkmodel) with the real Qwen2.5, Llama 3.2 and Mistral Nemo chat
# templates, so the three tool-call syntaxes (Hermes <tool_call>, bare JSON,
# [TOOL_CALLS]) are all drawn. A 110M model would check the same shapes
# several times slower; what is under test is the server's answer to each
# combination, which a random model exercises as well as a trained one.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
[[ -x $GW && -x $MK ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
TPL=$ROOT/tests/common/text/chat_templates
for m in qwen:qwen2.5 llama:llama3.2 mistral:mistral-nemo; do
  "$MK" -o "$TMP/${m%%:*}.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --ctx 2048 \
    --type F32 --seed 7 --chat-template "$TPL/${m#*:}.jinja" >"$TMP/mk.log" 2>&1 \
    || { fail "mkmodel with the ${m#*:} template"; cat "$TMP/mk.log"; finish; }
done

HP=$(free_port); ZP=$(free_port)
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP \
  --model "qwen=$TMP/qwen.gguf" --model "llama=$TMP/llama.gguf" --model "mistral=$TMP/mistral.gguf" \
  --max-seqs 8 --request-timeout 120
GPID=$SPAWNED
ready() { curl -sf "http://127.0.0.1:$HP/health" | grep -o '"replicas":1' | wc -l | grep -q 3; }
check "gateway up, the three models' workers registered" wait_for 30 ready

t0=$SECONDS
python3 "$ROOT/tests/integration/combos_driver.py" "http://127.0.0.1:$HP" qwen,llama,mistral
echo "# combos.sh: the driver took $((SECONDS - t0)) s"
check "no worker restarted during the run" bash -c "! grep -q 'restarting in' '$TMP/gw.log'"
check "no malformed message between workers and gateway" bash -c "! grep -q 'malformed' '$TMP/gw.log'"
stop_and_check "gateway (and its workers)" "$GPID" "$TMP/gw.log"
[[ $N_FAIL -gt 0 ]] && grep -E "WARN|ERROR" "$TMP/gw.log" | tail -n 30 | sed 's/^/# /'
finish
