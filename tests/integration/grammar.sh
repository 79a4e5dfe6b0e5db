#!/usr/bin/env bash
# Constrained decoding end to end (tests/integration/grammar_e2e.mjs): real
# gateways and workers on a random-weight model (pagoda-mkmodel, stories260K's
# tokenizer) and on stories260K.gguf; many seeds × several schemas at
# temperature 1, every output parsed and validated by ajv (an independent
# JSON Schema validator) and required to finish with "stop"; the openai SDK's
# zodResponseFormat + chat.completions.parse; bad schemas and grammars → 400.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent
need_node_packages "grammar tests"
REAL=$SMALL
RAND=$TMP/random.gguf
check "pagoda-mkmodel makes a random-weight model" "$BUILD/pagoda-mkmodel" -o "$RAND" --dim 64 --layers 2 \
  --heads 4 --kv-heads 2 --ffn 128 --ctx 1024 --type F32 --seed 11 --tokenizer-from "$REAL"

PR=$(free_port); ZR=$(free_port); PS=$(free_port); ZS=$(free_port)
spawn "$TMP/gw_rand.log" "$GW" --listen 127.0.0.1:$PR --worker-endpoint tcp://127.0.0.1:$ZR \
  --model "rand=$RAND" --max-seqs 16
spawn "$TMP/gw_real.log" "$GW" --listen 127.0.0.1:$PS --worker-endpoint tcp://127.0.0.1:$ZS \
  --model "stories=$REAL" --max-seqs 16
ready() { curl -sf "http://127.0.0.1:$1/health" | grep -q '"replicas":1'; }
check "random-model gateway: worker registered" wait_for 30 ready $PR
check "stories gateway: worker registered" wait_for 30 ready $PS

URL_RAND=http://127.0.0.1:$PR URL_REAL=http://127.0.0.1:$PS SEEDS=${GRAMMAR_SEEDS:-12} \
  run_node_tap 600 "$ROOT/tests/integration/grammar_e2e.mjs"
check "no worker restarted during the run" bash -c "! grep -q 'restarting in' '$TMP/gw_rand.log' '$TMP/gw_real.log'"
if [[ $N_FAIL -gt 0 ]]; then
  for f in "$TMP"/gw*.log; do echo "# --- $f"; tail -n 30 "$f" | sed 's/^/# /'; done
  # the gateways' and workers' own complaints, for tests/run.sh's digest
  grep -hE ' (WARN|ERROR|FATAL) ' "$TMP"/gw*.log | grep -v 'no --keys file' | tail -n 4 | cut -c1-200 | sed 's/^/# why: /'
fi
finish
