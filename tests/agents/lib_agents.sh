# tests/agents/lib_agents.sh — what the coding-agent tests share (source it
# after tests/lib.sh): the long-context test model, a gateway serving it, the
# recording proxy, and the agents' npm install.
#
# The agents' first request is 30-60k tokens here (Claude Code: a 6-30 KB
# system prompt and 12 tools, 50-90 KB of JSON; Codex 40 KB), so stories260K's
# 512-token context cannot hold it. agents_model makes a random-weight llama
# with a 128k context and tiny dims (1 layer, dim 32, 1 head, F32: prefill
# is the attention's n^2 x dim) and the builtin near-character tokenizer
# (~1.4 bytes a token: Claude Code's first turn is 36k tokens, 62k with a
# Claude model name; prefilled in ~3-12 s and ~10-40 s on 2 cores, idle to
# loaded) and the real Qwen2.5 template (Hermes tool calls), cached as
# $BUILD/models/agents-d32-ctx128k.gguf (0.3 MB, made in under 1 s).

AGENTS_DIR=$ROOT/tests/agents
AGENTS_NM=$AGENTS_DIR/node_modules

agents_model() { # prints the model's path (made once, then cached)
  local m=$BUILD/models/agents-d32-ctx128k.gguf
  if [[ ! -f $m ]]; then
    mkdir -p "$BUILD/models"
    "$BUILD/pagoda-mkmodel" -o "$m.tmp.$$" --dim 32 --layers 1 --heads 1 --kv-heads 1 --ffn 32 \
      --ctx 131072 --type F32 --seed 3 --chat-template "$ROOT/tests/common/text/chat_templates/qwen2.5.jinja" \
      >"$TMP/mkmodel.log" 2>&1 && mv "$m.tmp.$$" "$m" || { rm -f "$m.tmp.$$"; sed 's/^/# /' "$TMP/mkmodel.log" >&2; return 1; }
  fi
  echo "$m"
}

# agents_gateway NAME... : a gateway on 127.0.0.1 serving the agents' model
# under each NAME; sets GW_URL, GW_PID. 8192 KV blocks of 32 = 262k
# positions (2 sequences of 128k), 128 bytes each.
agents_gateway() {
  local m
  m=$(agents_model) || { fail "pagoda-mkmodel made the 128k-context agents model"; finish; }
  local hp zp args=() n
  hp=$(free_port); zp=$(free_port)
  for n in "$@"; do args+=(--model "$n=$m"); done
  spawn "$TMP/gw.log" "$BUILD/pagoda-gateway" --listen "127.0.0.1:$hp" --worker-endpoint "tcp://127.0.0.1:$zp" \
    "${args[@]}" --max-seqs 2 --kv-blocks 8192 --state-dir "$TMP/state" --request-timeout 300
  GW_PID=$SPAWNED
  GW_URL=http://127.0.0.1:$hp
  local want=$#
  if ! wait_for 60 bash -c "curl -sf $GW_URL/health | grep -o '\"replicas\":1' | wc -l | grep -qx $want"; then
    fail "gateway: the agents' model registered"; tail -n 20 "$TMP/gw.log" | sed 's/^/# /'; finish
  fi
}

# start_proxy DIR [record_proxy.py flags...] : the recording proxy in front of
# the gateway, recording into DIR; sets PROXY_URL and PROXY_PID.
start_proxy() {
  local dir=$1; shift
  local pp
  pp=$(free_port)
  mkdir -p "$dir"
  spawn "$dir.proxy.log" python3 -u "$AGENTS_DIR/record_proxy.py" --listen "$pp" --upstream "$GW_URL" --dir "$dir" "$@"
  PROXY_PID=$SPAWNED
  PROXY_URL=http://127.0.0.1:$pp
  wait_for 20 grep -q '^listening' "$dir.proxy.log" || { fail "record_proxy.py started"; cat "$dir.proxy.log" | sed 's/^/# /'; finish; }
}

stop_proxy() { kill -TERM "$PROXY_PID" 2>/dev/null; wait "$PROXY_PID" 2>/dev/null; }

# need_agents WHAT : the pinned agents installed (tests/agents/ensure.sh), else
# skip the whole script with the reason.
need_agents() {
  if ! command -v node >/dev/null; then skip "node not found: skipping $1"; exit 0; fi
  if ! bash "$AGENTS_DIR/ensure.sh" 2>"$TMP/ensure.err"; then
    skip "npm could not install tests/agents/package.json ($(tail -n 1 "$TMP/ensure.err")): skipping $1"
    exit 0
  fi
}

# The recorded bodies in DIR as one JSON list per line, for the checks:
#   bodies DIR ROUTE  → prints the files NNN-ROUTE.json in order
bodies() { ls "$1"/*-"$2".json 2>/dev/null | sort; }

# statuses DIR → "METHOD PATH STATUS" lines the proxy saw, for messages
statuses() { sed 's/^/# proxy: /' "$1/statuses.log" 2>/dev/null; }

# gateway_gone: after the checks — when the gateway died during the run (a
# crash shows as the proxy's 502s), say so; on failures show its log's warnings.
gateway_gone() {
  if ! kill -0 "$GW_PID" 2>/dev/null; then
    wait "$GW_PID"; local rc=$?
    fail "the gateway stayed up through the agents' requests (it exited with status $rc)"
    tail -n 30 "$TMP/gw.log" | sed 's/^/# gateway: /'
  elif [[ $N_FAIL -gt 0 ]]; then
    grep -E 'WARN|ERROR' "$TMP/gw.log" | grep -v 'no --keys file' | tail -n 20 | sed 's/^/# gateway: /'
  fi
  [[ -n ${AGENTS_RECORD:-} ]] && cp "$TMP/gw.log" "$AGENTS_RECORD/gw-$(basename "$0" .sh).log"
  return 0
}
