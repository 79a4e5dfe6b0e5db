#!/usr/bin/env bash
# The web console (GET /ui/, gateway/ui.c) against real processes.
#   curl: security headers, the fixed file table (traversal spellings 404),
#         Origin rules (the console's own origin may POST, a foreign one or a
#         DNS-named "same" origin may not), --no-ui restores the old behaviour.
#   browser (console_browser.mjs): Debian's chromium driven headless by
#         playwright-core — streaming token by token, stop → the worker
#         cancels, model text with <script>/<img onerror> shown as text, the
#         conversation kept over a reload, the operations view through kill -9
#         of a replica (restarting, then ready), admin buttons with and without
#         keys, drain / restart / on-demand start and stop, tools (calls, results)
#         and JSON schema from the page, phone width; images (gateway D, a
#         generated gemma3 text + mmproj pair): attached with the file picker
#         and pasted (a ClipboardEvent with a File), thumbnails in the pending
#         message and the conversation, the answer equal to the API's answer
#         for the same image part, remove, an oversized file refused before
#         anything is sent, a text model's 400 shown.
# Screenshots go to $PAGODA_BUILD/test-logs/console/. About 60-90 s.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
MODEL_FILE=$(small_model) || finish

# ---- gateway A: no keys, two replicas; every step sleeps 30 ms and every
# worker load 1.5 s (test hooks), so streams and restarts are slow enough to
# watch whatever the machine's speed
PA=$(free_port); ZA=$(free_port)
PAGODA_TEST_STEP_SLEEP_MS=30 PAGODA_TEST_LOAD_SLEEP_MS=1500 \
  spawn "$TMP/gwA.log" "$GW" --listen 127.0.0.1:$PA --worker-endpoint tcp://127.0.0.1:$ZA \
  --model "stories=$MODEL_FILE" --replicas 2 --max-seqs 4 --log-level debug
A=http://127.0.0.1:$PA
ready2() { curl -sf "$1/health" | grep -q '"replicas":2'; }
check "gateway A: two local workers registered" wait_for 30 ready2 $A

code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
hdr() { curl -s -D - -o /dev/null "$@" | tr -d '\r'; }
H=$(hdr $A/ui/)
check "GET /ui/ is 200 text/html" grep -q '^Content-Type: text/html; charset=utf-8' <<<"$H"
check "CSP: scripts and styles only from the gateway, no inline, no eval, no frames" \
  grep -q "^Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self';.*frame-ancestors 'none'" <<<"$H"
check "CSP allows nothing unsafe" bash -c "! grep -qi 'unsafe' <<<\"\$1\"" _ "$H"
check "X-Content-Type-Options: nosniff, X-Frame-Options: DENY" \
  bash -c "grep -q '^X-Content-Type-Options: nosniff' <<<\"\$1\" && grep -q '^X-Frame-Options: DENY' <<<\"\$1\"" _ "$H"
check "GET /ui redirects to /ui/" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' $A/ui) == '308 $A/ui/' ]]"
check "app.js is text/javascript" grep -q '^Content-Type: text/javascript' <<<"$(hdr $A/ui/app.js)"
ET=$(grep '^ETag:' <<<"$H" | cut -d' ' -f2)
check "If-None-Match with the ETag: 304" test "$(code -H "If-None-Match: $ET" $A/ui/)" = 304
check "HEAD /ui/app.js: 200" test "$(code -I $A/ui/app.js)" = 200
bad=""
for p in '/ui/../health' '/ui/..%2fhealth' '/ui/%2e%2e/%2e%2e/etc/passwd' '/ui/..' '/ui//etc/passwd' \
         '/ui/index.html/..' '/ui/ui.c' '/ui/../ui.c' '/ui/.%2e/gateway.c' '/ui/x/../app.js' \
         '/ui/INDEX.HTML' '/ui/%61pp.js/' '/ui/.' '/ui/./app.js'; do
  c=$(code --path-as-is "$A$p")
  [[ $c == 404 ]] || bad+=" $p=$c"
done
check "paths outside the console's table are 404 (traversal spellings included)${bad:+:$bad}" test -z "$bad"
# an encoded control byte in the path is refused before routing (a decoded NUL
# would otherwise end the name: docs/SECURITY.md "The HTTP edge")
check "/ui/app.js%00.html is refused: 400 with the API's JSON error" \
  bash -c "[[ \$(curl -s -o $TMP/nul.json -w '%{http_code}' '$A/ui/app.js%00.html') == 400 ]] && grep -q '\"error\"' $TMP/nul.json"
check "a 404 under /ui/ is the API's JSON error" \
  bash -c "curl -s $A/ui/nope.js | grep -q '\"code\":\"not_found\"'"

# Origins. The console's own origin (an IP literal host) may POST; another
# port, another host, or a DNS name resolving here (rebinding) may not.
post() { curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' "$@" \
  -d '{"model":"stories","prompt":"Once","max_tokens":2}' $A/v1/completions; }
check "POST with the console's own Origin: 200" test "$(post -H "Origin: $A")" = 200
check "POST from a foreign origin: 403" test "$(post -H 'Origin: http://evil.example')" = 403
check "POST from another port of the same host: 403" test "$(post -H "Origin: http://127.0.0.1:$((PA + 1))")" = 403
check "POST with Host and Origin both a DNS name (rebinding): refused (421: the Host is not allowed)" \
  test "$(post -H "Host: rebind.example:$PA" -H "Origin: http://rebind.example:$PA")" = 421
check "admin routes stay closed without --keys / --admin-open (403), console origin or not" \
  bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Origin: $A' $A/admin/workers/1/drain) == 403 ]]"

# ---- gateway B: API keys (user, admin), a model, an on-demand model, and a
# tiny random model with a tool-calling chat template (tools, JSON schema)
"$BUILD/pagoda-mkmodel" -o "$TMP/tools.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 \
  --ctx 4096 --type F32 --seed 11 --chat-template "$ROOT/tests/common/text/chat_templates/qwen2.5.jinja" \
  >/dev/null 2>&1 || fail "pagoda-mkmodel: the tool-calling model"
for k in user:normal admin:normal:admin; do
  "$GW" --hash-key "$k" --secret "secret-${k%%:*}" | grep -v '^#' >>"$TMP/keys.txt"
done
PB=$(free_port); ZB=$(free_port)
spawn "$TMP/gwB.log" "$GW" --listen 127.0.0.1:$PB --worker-endpoint tcp://127.0.0.1:$ZB --keys "$TMP/keys.txt" \
  --model "stories=$MODEL_FILE" --model "lazy=$MODEL_FILE" --on-demand lazy --model "tools=$TMP/tools.gguf" \
  --max-seqs 2 --heartbeat-ms 200 \
  --log-level debug
B=http://127.0.0.1:$PB
ready1() { curl -sf "$1/health" | grep -q '"stories":{"state":"ready"' && curl -sf "$1/health" | grep -q '"tools":{"state":"ready"'; }
check "gateway B: its worker registered (the on-demand model idle)" wait_for 30 ready1 $B

adm() { curl -s -o /dev/null -w '%{http_code}' -X POST "$@"; }
check "on-demand start/stop: 401 without a key, 403 with a user key" \
  bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' -X POST $B/admin/models/lazy/start)\$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer secret-user' $B/admin/models/lazy/stop) == 401403 ]]"
check "start of a model that is not on-demand: 409 not_on_demand" \
  bash -c "curl -s -X POST -H 'Authorization: Bearer secret-admin' $B/admin/models/stories/start | grep -q '\"not_on_demand\"'"
check "stop of an unknown model: 404" test "$(adm -H 'Authorization: Bearer secret-admin' $B/admin/models/nope/stop)" = 404

# ---- gateway C: --no-ui
PC=$(free_port); ZC=$(free_port)
spawn "$TMP/gwC.log" "$GW" --listen 127.0.0.1:$PC --worker-endpoint tcp://127.0.0.1:$ZC --no-ui
C=http://127.0.0.1:$PC
check "gateway C (--no-ui) answers" wait_for 10 curl -s -o /dev/null $C/health
check "--no-ui: /ui/ and /ui/app.js are 404" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' $C/ui/)\$(curl -s -o /dev/null -w '%{http_code}' $C/ui/app.js) == 404404 ]]"
check "--no-ui: the console's origin is a foreign one again (403)" \
  bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: $C' $C/v1/models) == 403 ]]"
check "--print-config shows no_ui: true for --no-ui" \
  bash -c "'$GW' --no-ui --print-config | grep -qx 'no_ui: true'"
printf 'no_ui: true\n' >"$TMP/noui.yaml"
check "no_ui: true in the YAML file turns the console off" \
  bash -c "'$GW' --config '$TMP/noui.yaml' --print-config | grep -qx 'no_ui: true'"

# ---- gateway D: a vision model (random-weight gemma3 text + mmproj pair, as
# images.sh makes it) beside a text model; PNG/WebP/GIF files written by the
# libraries' encoders (test_image --write-hostile)
"$BUILD/pagoda-mkmodel" -o "$TMP/vt.gguf" --arch gemma3 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 \
  --ctx 512 --vocab 512 --type f32 --seed 40 --untied --mute-special --logit-scale 8 \
  --chat-template "$ROOT/tests/compare/gemma_turns.jinja" --mmproj "$TMP/vp.gguf" --vis-size 112 --vis-patch 7 \
  --vis-dim 64 --vis-layers 2 --vis-heads 4 --vis-ffn 128 >/dev/null 2>&1 || fail "pagoda-mkmodel: the gemma3 pair"
mkdir -p "$TMP/img"
"$BUILD/tests/common/image/test_image" --write-hostile "$TMP/img" || fail "test_image --write-hostile"
PD=$(free_port); ZD=$(free_port)
spawn "$TMP/gwD.log" "$GW" --listen 127.0.0.1:$PD --worker-endpoint tcp://127.0.0.1:$ZD \
  --model "vis=$TMP/vt.gguf" --mmproj "vis=$TMP/vp.gguf" --model "stories=$MODEL_FILE" --max-seqs 2 --log-level debug
D=http://127.0.0.1:$PD
readyD() { curl -sf "$1/health" | grep -q '"vis":{"state":"ready"' && curl -sf "$1/health" | grep -q '"stories":{"state":"ready"'; }
check "gateway D: the vision model's and the text model's workers registered" wait_for 60 readyD $D

# ---- the browser
if [[ ! -x /usr/bin/chromium ]]; then
  skip "/usr/bin/chromium not installed (deploy/install-deps.sh installs it): skipping the browser scenarios"
  finish
fi
need_node_packages "the browser scenarios"
SHOTS=$BUILD/test-logs/console
mkdir -p "$SHOTS"
URL_A=$A URL_B=$B URL_D=$D IMG_DIR=$TMP/img KEY_USER=secret-user KEY_ADMIN=secret-admin SHOTS=$SHOTS MODEL=stories \
  run_node_tap 300 "$ROOT/tests/integration/console_browser.mjs"
check "gateway A logged the stopped stream as a client gone" grep -q 'client gone' "$TMP/gwA.log"
if [[ $N_FAIL -gt 0 ]]; then for f in "$TMP"/gw*.log; do echo "# --- $f"; tail -n 30 "$f" | sed 's/^/# /'; done; fi
finish
