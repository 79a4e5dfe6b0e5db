#!/usr/bin/env bash
# The recorded coding-agent corpus (tests/agents/corpus/*.json: what Claude
# Code and Codex really sent — first turns, tool-result turns — recorded by
# record_proxy.py) replayed against a gateway by replay.py, with no npm and no
# agent binary: each body as recorded (path, headers, stream) with its output
# budget cut to 8 tokens, then without streaming, then (Anthropic bodies) to
# /v1/messages/count_tokens; every answer 200 in the right shape. The gateway
# serves lib_agents.sh's 128k-context random-weight model under every model
# name the corpus uses. Takes ~1-2 min on 2 loaded cores (prefill of 30-65k
# tokens per body; the repeats hit the prefix cache).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_agents.sh"

[[ -x $BUILD/pagoda-gateway && -x $BUILD/pagoda-mkmodel ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
mapfile -t names < <(python3 -c '
import glob, json, sys
print("\n".join(sorted({json.load(open(f))["body"]["model"] for f in glob.glob(sys.argv[1] + "/*.json")})))' "$AGENTS_DIR/corpus")
[[ ${#names[@]} -gt 0 ]] || { fail "tests/agents/corpus/ holds recorded bodies"; finish; }
echo "# models: ${names[*]}"
agents_gateway "${names[@]}"
if ! URL=$GW_URL timeout 900 python3 "$AGENTS_DIR/replay.py"; then
  N_FAIL=$((N_FAIL + 1))
  grep -E 'WARN|ERROR' "$TMP/gw.log" | grep -v 'no --keys file' | tail -n 20 | sed 's/^/# gateway: /'
fi
finish
