#!/usr/bin/env bash
# Codex CLI (@openai/codex, pinned in tests/agents/package.json) against
# pagoda's OpenAI Responses API (wire_api "responses"), `codex exec` in a
# scratch git repository, through tests/agents/record_proxy.py, on the
# 128k-context random-weight model of lib_agents.sh served as "local".
# Codex's config declares "local" in a model catalog (model_catalog_json,
# made by codex_catalog.py from the installed binary's own catalog) as a
# freeform-apply_patch model, so Codex sends its real tool list: function
# tools, the custom (Lark grammar) apply_patch, tool_search and web_search.
#   - "say hi" with --json: codex exits 0, the event stream ends the turn,
#     every POST got 200;
#   - an exec_command round trip: the proxy forces tool_choice exec_command
#     on the first turn and pins its schema to one `echo` (what a random model
#     would type is noise, and it would run); Codex runs it and its next request
#     carries a function_call_output for that call_id with the echo's text;
#   - an apply_patch round trip: forced, with the grammar narrowed to one
#     "*** Add File: scratch.txt" hunk (apply_patch_scratch.lark); Codex, in
#     the workspace-write sandbox, creates scratch.txt and its next request
#     carries a custom_tool_call_output for that call_id.
# Codex never leaves 127.0.0.1: analytics off, no update check, HOME and
# CODEX_HOME scratch dirs. The sandbox is Codex's bundled bubblewrap (a
# system `bwrap` is used when installed). AGENTS_RECORD=DIR keeps the
# recorded bodies under DIR/codex-<case>/. Takes ~1 min on 2 loaded cores.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_agents.sh"

[[ -x $BUILD/pagoda-gateway && -x $BUILD/pagoda-mkmodel ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
need_agents "Codex"
CODEX=$AGENTS_NM/.bin/codex
CODEX_BIN=$(ls "$AGENTS_NM"/@openai/codex-linux-x64/vendor/*/bin/codex 2>/dev/null | head -1)
if [[ ! -x $CODEX || -z $CODEX_BIN ]]; then
  skip "Codex's vendored binary not installed (not linux-x64?): skipping Codex"; exit 0
fi
echo "# $("$CODEX" --version 2>/dev/null | tail -1)"

agents_gateway local
CHOME=$TMP/codex-home
mkdir -p "$CHOME"
if src=$(python3 "$AGENTS_DIR/codex_catalog.py" "$CODEX_BIN" local 60000 "$CHOME/catalog.json" 2>"$TMP/catalog.err"); then
  ok "codex_catalog.py: model \"local\" declared from the binary's catalog entry of $src"
else
  fail "codex_catalog.py: model \"local\" declared from the binary's catalog"; sed 's/^/# /' "$TMP/catalog.err"
fi

# codex_run CASE TIMEOUT [proxy flags...] -- [codex exec args...] : a fresh
# proxy recording into $TMP/CASE, a fresh git repo $TMP/CASE.repo as the
# workdir; stdout in $TMP/CASE.out, exit status in $RC.
codex_run() {
  local name=$1 secs=$2; shift 2
  local pflags=()
  while [[ $# -gt 0 && $1 != -- ]]; do pflags+=("$1"); shift; done
  shift
  start_proxy "$TMP/$name" "${pflags[@]}"
  cat >"$CHOME/config.toml" <<EOF
model = "local"
model_provider = "pagoda"
model_catalog_json = "$CHOME/catalog.json"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.pagoda]
name = "pagoda"
base_url = "$PROXY_URL/v1"
wire_api = "responses"
env_key = "PAGODA_API_KEY"
EOF
  local repo=$TMP/$name.repo
  mkdir -p "$repo" && git -C "$repo" init -q
  (cd "$repo" && HOME=$CHOME CODEX_HOME=$CHOME PAGODA_API_KEY=sk-test RUST_LOG=error \
    timeout "$secs" "$CODEX" exec --skip-git-repo-check "$@" </dev/null >"$TMP/$name.out" 2>"$TMP/$name.err")
  RC=$?
  stop_proxy
  if [[ -n ${AGENTS_RECORD:-} ]]; then mkdir -p "$AGENTS_RECORD/codex-$name" && cp "$TMP/$name"/* "$AGENTS_RECORD/codex-$name/"; fi
}

why() { # CASE: codex's errors, the statuses
  grep -hE 'ERROR|error' "$TMP/$1.out" "$TMP/$1.err" | sort -u | head -n 6 | cut -c1-400 | sed 's/^/# codex: /'
  statuses "$TMP/$1" | sort | uniq -c | head
}

# run_ok CASE: codex exited 0 and every POST got 200
run_ok() {
  [[ $RC -eq 0 ]] && grep -q '^POST ' "$TMP/$1/statuses.log" && ! grep '^POST ' "$TMP/$1/statuses.log" | grep -qv ' 200$'
}
codex_case() { # CASE what
  if run_ok "$1"; then ok "codex $2"; else fail "codex $2 (exit $RC)"; why "$1"; fi
}

# ---- say hi ----------------------------------------------------------------------
codex_run hi 240 -- --json "say hi"
codex_case hi "exec --json 'say hi': exit 0, every POST 200"
check "codex exec --json: the turn completed (turn.completed event)" grep -q '"type":"turn.completed"' "$TMP/hi.out"
if [[ -f $TMP/hi/001-responses.json ]]; then
  check "codex's first request: stream, no instructions field, tools with the custom apply_patch (Lark) and exec_command" \
    python3 "$AGENTS_DIR/agent_checks.py" get "$TMP/hi" responses 0 \
      'exit(not (b["stream"] is True and any(t.get("type") == "custom" and t.get("name") == "apply_patch" and t["format"]["syntax"] == "lark" for t in b["tools"]) and any(t.get("name") == "exec_command" for t in b["tools"])))'
fi

# ---- exec_command round trip -------------------------------------------------------
echo '{"type":"object","properties":{"cmd":{"type":"string","enum":["echo pagoda-exec-ok"]}},"required":["cmd"],"additionalProperties":false}' \
  >"$TMP/exec.schema.json"
codex_run exec 300 --force exec_command --schema "exec_command=$TMP/exec.schema.json" -- "run the echo"
codex_case exec "forced exec_command: exit 0, every POST 200"
if python3 "$AGENTS_DIR/agent_checks.py" roundtrip "$TMP/exec" responses exec_command pagoda-exec-ok >"$TMP/rt"; then
  ok "codex ran the forced exec_command: its next request has the function_call_output with the echo's text"
else
  fail "codex ran the forced exec_command: its next request has the function_call_output with the echo's text"; cat "$TMP/rt"; why exec
fi

# ---- apply_patch (custom tool, Lark grammar) round trip --------------------------------
codex_run patch 300 --force apply_patch --grammar "apply_patch=$AGENTS_DIR/apply_patch_scratch.lark" -- \
  -s workspace-write "create scratch.txt"
codex_case patch "forced apply_patch: exit 0, every POST 200"
check "codex applied the forced patch: scratch.txt holds pagoda-patch-ok" grep -qsx pagoda-patch-ok "$TMP/patch.repo/scratch.txt"
if python3 "$AGENTS_DIR/agent_checks.py" roundtrip "$TMP/patch" responses apply_patch >"$TMP/rt"; then
  ok "codex's next request has the custom_tool_call_output for the apply_patch call"
else
  fail "codex's next request has the custom_tool_call_output for the apply_patch call"; cat "$TMP/rt"; why patch
fi

gateway_gone
finish
