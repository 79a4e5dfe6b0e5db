#!/usr/bin/env bash
# The official `openai` npm SDK's embeddings.create (tests/integration/
# embeddings_sdk.mjs) against real processes: a pagoda-gateway with an API
# keys file supervising one real pagoda-worker on stories260K.gguf.
# float / base64 / the SDK default, string / array / token-id input, usage,
# hostile rows → BadRequestError and the server keeps serving.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent
need_node_packages "SDK tests"
"$GW" --hash-key emb:normal --secret secret-emb | grep -v '^#' >"$TMP/keys.txt"
HP=$(free_port); ZP=$(free_port)
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP --keys "$TMP/keys.txt" \
  --model "stories=$SMALL" --max-seqs 4 --log-level debug
ready() { curl -sf "http://127.0.0.1:$HP/health" | grep -q '"replicas":1'; }
check "gateway up, local worker registered" wait_for 20 ready

URL=http://127.0.0.1:$HP KEY=secret-emb MODEL=stories DIM=64 \
  run_node_tap 120 "$ROOT/tests/integration/embeddings_sdk.mjs"
check "no worker restarted during the run" bash -c "! grep -q 'restarting in' '$TMP/gw.log'"
[[ $N_FAIL -gt 0 ]] && tail -n 40 "$TMP/gw.log" | sed 's/^/# /'
finish
