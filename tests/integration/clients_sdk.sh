#!/usr/bin/env bash
# Real clients nobody here wrote (#22 item 6): the Vercel AI SDK (ai 6 +
# @ai-sdk/openai-compatible 2) and LangChain JS (@langchain/openai 1.5) with
# zod 4 schemas, through tests/integration/clients_e2e.mjs, against a real
# gateway supervising two real workers:
#   stories  stories260K.gguf (or its stand-in, tests/lib.sh small_model): text, streaming, structured output, embeddings;
#   tools    a random-weight 110M llama (dim 768, 12 layers, vocab 32000, Q8_0,
#            2048 context, that model's tokenizer) made here by pagoda-mkmodel
#            with the real Qwen2.5 chat template: tool calls.
# Takes ~30-60 s on 2 shared cores (the 110M model is made in ~12 s).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
[[ -x $GW && -x $MK ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
STORIES=$(small_model) || finish
need_node_packages "AI SDK / LangChain client tests"
mk110() {
  "$MK" -o "$TMP/m110.gguf" --type Q8_0 --vocab 32000 --ctx 2048 --seed 5 \
    --tokenizer-from "$STORIES" \
    --chat-template "$ROOT/tests/common/text/chat_templates/qwen2.5.jinja" >"$TMP/mk.log" 2>&1 \
    || { sed 's/^/# /' "$TMP/mk.log"; return 1; }
}
check "mkmodel: random-weight 110M llama, 2048 context, Qwen2.5 template" mk110

HP=$(free_port); ZP=$(free_port)
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP \
  --model "stories=$STORIES" --model "tools=$TMP/m110.gguf" --max-seqs 4 \
  --request-timeout 300
ready() { curl -sf "http://127.0.0.1:$HP/health" | grep -o '"replicas":1' | wc -l | grep -q 2; }
check "gateway up, both models' workers registered" wait_for 60 ready

URL=http://127.0.0.1:$HP TEXT=stories TOOLS=tools DIM=64 run_node_tap 600 "$ROOT/tests/integration/clients_e2e.mjs"
check "no worker restarted during the run" bash -c "! grep -q 'restarting in' '$TMP/gw.log'"
check "no malformed message between workers and gateway" bash -c "! grep -q 'malformed' '$TMP/gw.log'"
[[ $N_FAIL -gt 0 ]] && grep -E "WARN|ERROR|refused" "$TMP/gw.log" | tail -n 30 | sed 's/^/# /'
finish
