#!/usr/bin/env bash
# Claude Code (@anthropic-ai/claude-code, pinned in tests/agents/package.json)
# against pagoda's Anthropic Messages API, in print mode (`claude -p`), through
# tests/agents/record_proxy.py, on the 128k-context random-weight model of
# lib_agents.sh served as "local" and as "claude-sonnet-4-5":
#   - "say hi" with --output-format json, then stream-json --verbose: claude
#     exits 0 with a result that is not an API error, every POST got 200;
#   - a Read round trip: the proxy forces tool_choice Read on the first turn
#     and pins Read's schema to one file_path (a random model's path would be
#     noise); claude reads the file and its next request carries a
#     tool_result for that tool_use id with the file's text;
#   - a Bash round trip the same way, the command pinned to an echo that
#     --allowedTools permits;
#   - --model claude-sonnet-4-5 with CLAUDE_CODE_MAX_OUTPUT_TOKENS=300: a
#     Claude model name served by the gateway, max_tokens 300 sent.
# Claude Code never leaves 127.0.0.1: telemetry, error reporting, the
# autoupdater and other non-essential traffic are off, HOME is a scratch dir.
# AGENTS_RECORD=DIR keeps every recorded body under DIR/claude-<case>/ (for
# refreshing tests/agents/corpus/). Takes ~1-2 min on 2 loaded cores.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_agents.sh"

[[ -x $BUILD/pagoda-gateway && -x $BUILD/pagoda-mkmodel ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
need_agents "Claude Code"
CLAUDE=$AGENTS_NM/@anthropic-ai/claude-code-linux-x64/claude
if [[ ! -x $CLAUDE ]]; then
  skip "Claude Code's native binary $CLAUDE not installed (not linux-x64?): skipping Claude Code"; exit 0
fi
echo "# $("$CLAUDE" --version 2>/dev/null | head -1)"

agents_gateway local claude-sonnet-4-5
WORK=$TMP/work
mkdir -p "$WORK" "$TMP/home"
echo "pagoda-read-marker: the quick brown fox" >"$WORK/hello.txt"

# claude_run CASE TIMEOUT [proxy flags...] -- [claude args...] : runs claude -p
# through a fresh proxy recording into $TMP/CASE; stdout in $TMP/CASE.out,
# exit status in $RC.
claude_run() {
  local name=$1 secs=$2; shift 2
  local pflags=()
  while [[ $# -gt 0 && $1 != -- ]]; do pflags+=("$1"); shift; done
  shift
  start_proxy "$TMP/$name" "${pflags[@]}"
  (cd "$WORK" && HOME=$TMP/home ANTHROPIC_BASE_URL=$PROXY_URL ANTHROPIC_API_KEY=sk-test \
    DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    DISABLE_AUTOUPDATER=1 DISABLE_BUG_COMMAND=1 CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1 \
    timeout "$secs" "$CLAUDE" -p "$@" </dev/null >"$TMP/$name.out" 2>"$TMP/$name.err")
  RC=$?
  stop_proxy
  if [[ -n ${AGENTS_RECORD:-} ]]; then mkdir -p "$AGENTS_RECORD/claude-$name" && cp "$TMP/$name"/* "$AGENTS_RECORD/claude-$name/"; fi
}

# why CASE: what went wrong, as # lines (claude's result, its stderr, the statuses)
why() {
  python3 - "$TMP/$1.out" <<'EOF' | sed 's/^/# /'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    try:
        j = json.loads(line)
    except ValueError:
        print("stdout:", line.rstrip()[:300]); continue
    if j.get("type") == "result":
        print("result:", json.dumps({k: j.get(k) for k in ("is_error", "subtype", "api_error_status", "result", "terminal_reason")})[:600])
EOF
  tail -n 5 "$TMP/$1.err" | sed 's/^/# stderr: /'
  statuses "$TMP/$1" | sort | uniq -c | head
}

# result_ok CASE: claude exited 0, its (last) result is not an error, every POST 200
result_ok() {
  [[ $RC -eq 0 ]] || return 1
  python3 - "$TMP/$1.out" <<'EOF' || return 1
import json, sys
res = [j for j in (json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")) if j.get("type") == "result"]
sys.exit(not res or res[-1].get("is_error") is not False)
EOF
  grep -q '^POST ' "$TMP/$1/statuses.log" && ! grep '^POST ' "$TMP/$1/statuses.log" | grep -qv ' 200$'
}

claude_case() { # CASE what
  if result_ok "$1"; then ok "claude $2"; else fail "claude $2 (exit $RC)"; why "$1"; fi
}

# ---- say hi --------------------------------------------------------------------
claude_run hi 240 -- "say hi" --model local --output-format json
claude_case hi "-p 'say hi' --output-format json: exit 0, a result, every POST 200"
if [[ -f $TMP/hi/001-messages.json ]]; then
  check "claude's first request: stream, the billing-header system block, adaptive thinking, 12+ tools" \
    python3 "$AGENTS_DIR/agent_checks.py" get "$TMP/hi" messages 0 \
      'exit(not (b["stream"] is True and b["system"][0]["text"].startswith("x-anthropic-billing-header") and b.get("thinking",{}).get("type") == "adaptive" and len(b["tools"]) >= 12))'
fi

claude_run stream 240 -- "say hi" --model local --output-format stream-json --verbose
claude_case stream "-p --output-format stream-json --verbose: exit 0, a final result, every POST 200"

# ---- tool round trips ------------------------------------------------------------
printf '{"type":"object","properties":{"file_path":{"type":"string","enum":["%s"]}},"required":["file_path"],"additionalProperties":false}\n' \
  "$WORK/hello.txt" >"$TMP/read.schema.json"
claude_run read 300 --force Read --schema "Read=$TMP/read.schema.json" -- \
  "read hello.txt" --model local --output-format json --allowedTools Read
claude_case read "forced Read: exit 0, every POST 200"
if python3 "$AGENTS_DIR/agent_checks.py" roundtrip "$TMP/read" messages Read pagoda-read-marker >"$TMP/rt"; then
  ok "claude ran the forced Read: its next request has the tool_result with the file's text"
else
  fail "claude ran the forced Read: its next request has the tool_result with the file's text"; cat "$TMP/rt"; why read
fi

echo '{"type":"object","properties":{"command":{"type":"string","enum":["echo pagoda-bash-ok"]}},"required":["command"],"additionalProperties":false}' \
  >"$TMP/bash.schema.json"
claude_run bash 300 --force Bash --schema "Bash=$TMP/bash.schema.json" -- \
  "run the echo" --model local --output-format json --allowedTools "Bash(echo pagoda-bash-ok)"
claude_case bash "forced Bash: exit 0, every POST 200"
if python3 "$AGENTS_DIR/agent_checks.py" roundtrip "$TMP/bash" messages Bash pagoda-bash-ok >"$TMP/rt"; then
  ok "claude ran the forced Bash: its next request has the tool_result with the command's output"
else
  fail "claude ran the forced Bash: its next request has the tool_result with the command's output"; cat "$TMP/rt"; why bash
fi

# ---- a Claude model name, a small output budget -----------------------------------
# A random model may not stop within 300 tokens: then the gateway's answer ends
# with stop_reason max_tokens and claude reports "exceeded the 300 output token
# maximum" (exit 1) — the right outcome too.
CLAUDE_CODE_MAX_OUTPUT_TOKENS=300 claude_run sonnet 240 -- "say hi" --model claude-sonnet-4-5 --output-format json
if result_ok sonnet || { grep -q 'exceeded the 300 output token maximum' "$TMP/sonnet.out" &&
     ! grep '^POST ' "$TMP/sonnet/statuses.log" | grep -qv ' 200$'; }; then
  ok "claude --model claude-sonnet-4-5, CLAUDE_CODE_MAX_OUTPUT_TOKENS=300: a result (or the 300-token stop), every POST 200"
else
  fail "claude --model claude-sonnet-4-5, CLAUDE_CODE_MAX_OUTPUT_TOKENS=300: a result (or the 300-token stop), every POST 200 (exit $RC)"
  why sonnet
fi
if [[ -f $TMP/sonnet/001-messages.json ]]; then
  check "claude-sonnet-4-5 run: requests name the model and send max_tokens 300" \
    python3 "$AGENTS_DIR/agent_checks.py" get "$TMP/sonnet" messages -1 \
      'exit(not (b["model"] == "claude-sonnet-4-5" and b["max_tokens"] == 300))'
fi
n_count=$(ls "$TMP"/*/*-count_tokens.json 2>/dev/null | wc -l)
echo "# claude sent $n_count /v1/messages/count_tokens requests"

gateway_gone
finish
