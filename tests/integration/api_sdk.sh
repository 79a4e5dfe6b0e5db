#!/usr/bin/env bash
# End-to-end with the official `openai` npm SDK (tests/integration/sdk_e2e.mjs)
# against real processes: two pagoda-gateways, each supervising one real
# pagoda-worker on stories260K.gguf, with an API keys file (high/low/admin).
#   gateway A: worker --max-seqs 8 — chat/completions, streams, usage, stop,
#              seeds, logprobs, SDK error classes, 24 concurrent streams,
#              cancellation by aborting the SDK call
#   gateway B: worker --max-seqs 1, --max-queue 7 — priority (high before low,
#              low still completes), 429 RateLimitError, cancel while queued
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in tiny-llama.gguf when ../shared is absent
need_node_packages "SDK tests"
MODEL_FILE=$SMALL

# keys: secrets are fixed strings here; the file holds their hashes only
for k in hi:high lo:low ops:normal:admin; do
  "$GW" --hash-key "$k" --secret "secret-${k%%:*}" | grep -v '^#' >>"$TMP/keys.txt"
done
check "--hash-key lines make a keys file" test "$(wc -l <"$TMP/keys.txt")" -eq 3

PA=$(free_port); ZA=$(free_port); PB=$(free_port); ZB=$(free_port)
spawn "$TMP/gwA.log" "$GW" --listen 127.0.0.1:$PA --worker-endpoint tcp://127.0.0.1:$ZA --keys "$TMP/keys.txt" \
  --model "stories=$MODEL_FILE" --max-seqs 8 --log-level debug
spawn "$TMP/gwB.log" "$GW" --listen 127.0.0.1:$PB --worker-endpoint tcp://127.0.0.1:$ZB --keys "$TMP/keys.txt" \
  --model "stories=$MODEL_FILE" --max-seqs 1 --max-queue 7 --log-level debug
ready() { curl -sf "http://127.0.0.1:$1/health" | grep -q '"replicas":1'; }
check "gateway A: its local worker registered" wait_for 20 ready $PA
check "gateway B: its local worker registered" wait_for 20 ready $PB

URL_A=http://127.0.0.1:$PA URL_B=http://127.0.0.1:$PB KEY_HIGH=secret-hi KEY_LOW=secret-lo KEY_ADMIN=secret-ops \
  MODEL=stories run_node_tap 120 "$ROOT/tests/integration/sdk_e2e.mjs"
check "no worker restarted during the run" bash -c "! grep -q 'restarting in' '$TMP/gwA.log' '$TMP/gwB.log'"
if [[ $N_FAIL -gt 0 ]]; then for f in "$TMP"/gw*.log; do echo "# --- $f"; tail -n 40 "$f" | sed 's/^/# /'; done; fi
finish
