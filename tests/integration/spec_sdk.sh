#!/usr/bin/env bash
# Speculative decoding end to end (tests/integration/spec_sdk.mjs, the
# official `openai` npm SDK): one pagoda-gateway supervising a worker with
# `--spec ngram` (model "spec"), and a second pagoda-worker on the same file
# without speculation (model "plain", started here). Greedy and seeded
# completions, streamed and not, a zod json_schema response and a request
# with "speculative": false give the same text on both; a non-boolean
# "speculative" is a 400; /metrics counts the drafts (vllm:spec_decode_*).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
for b in "$GW" "$WK"; do [[ -x $b ]] || { fail "$b not built"; finish; }; done
SMALL=$(small_model)
need_node_packages "SDK tests"
HP=$(free_port); ZP=$(free_port)
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP \
  --model "spec=$SMALL" --max-seqs 4 --spec ngram --spec-max-draft 6 --heartbeat-ms 200
spawn "$TMP/plain.log" "$WK" --gateway tcp://127.0.0.1:$ZP --model "plain=$SMALL" --max-seqs 4 \
  --heartbeat-ms 200 --spec off
# a draft model: the file drafting for itself (greedy drafts are then always right)
spawn "$TMP/drafted.log" "$WK" --gateway tcp://127.0.0.1:$ZP --model "drafted=$SMALL" --max-seqs 4 \
  --heartbeat-ms 200 --draft-model "$SMALL"
ready() { curl -sf "http://127.0.0.1:$HP/health" | python3 -c "
import json, sys
ms = {w['model'] for w in json.load(sys.stdin)['workers']}
sys.exit(0 if {'spec', 'plain', 'drafted'} <= ms else 1)"; }
check "gateway up, the three workers registered" wait_for 20 ready

URL=http://127.0.0.1:$HP run_node_tap 120 "$ROOT/tests/integration/spec_sdk.mjs"

# the worker's counters reach /metrics with its next heartbeat
drafted() { curl -sf "http://127.0.0.1:$HP/metrics" | python3 -c "
import sys
v = {}
for line in sys.stdin:
    if line.startswith('vllm:spec_decode_') and 'model_name=\"$1\"' in line:
        v[line.split('{')[0]] = float(line.split()[-1])
d = v.get('vllm:spec_decode_num_draft_tokens_total', 0)
a = v.get('vllm:spec_decode_num_accepted_tokens_total', -1)
n = v.get('vllm:spec_decode_num_drafts_total', 0)
sys.exit(0 if d > 0 and 0 < a <= d and 0 < n <= d else 1)"; }
check "/metrics: vllm:spec_decode_num_drafts/draft_tokens/accepted_tokens for the spec model" wait_for 10 drafted spec
check "/metrics: the same for the draft-model worker" wait_for 10 drafted drafted
check "/metrics: no drafts counted for the plain model" bash -c \
  "! curl -sf http://127.0.0.1:$HP/metrics | grep '^vllm:spec_decode_num_draft_tokens_total' | grep -q 'model_name=\"plain\"'"
check "no worker restarted during the run" bash -c "! grep -q 'restarting in' '$TMP/gw.log'"
[[ $N_FAIL -gt 0 ]] && tail -n 40 "$TMP/gw.log" | sed 's/^/# /'
finish
