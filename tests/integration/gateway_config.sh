#!/usr/bin/env bash
# pagoda-gateway's configuration and CURVE, as an operator meets them:
#   --config / --print-config: the shipped configs load and the printed YAML
#   reads back to itself; precedence defaults < file < flags (whatever the
#   flag order); errors name FILE:LINE:COLUMN and exit 2; the plain-TCP rule;
#   --gen-curve-keypair files; then real processes on loopback: a gateway
#   from a config file with CURVE whose model has replicas: 2 and per-model
#   settings (both local workers register with those settings, using the
#   gateway-made key pair), a remote worker with its own authorized key
#   registers and serves a request, workers with an unknown key or without
#   CURVE stay out (and the refusal is logged), SIGHUP re-reads the
#   authorized keys and lets the unknown one in.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
cd "$ROOT" || exit 1

# ---- --print-config ------------------------------------------------------------------
for f in deploy/pagoda.example.yaml deploy/k8s/pagoda.yaml deploy/docker/pagoda.yaml; do
  if "$GW" --config "$f" --print-config >"$TMP/p1.yaml" 2>"$TMP/err" &&
     "$GW" --config "$TMP/p1.yaml" --print-config >"$TMP/p2.yaml" 2>>"$TMP/err" &&
     cmp -s "$TMP/p1.yaml" "$TMP/p2.yaml"; then
    ok "$f: accepted; --print-config output reads back to itself"
  else
    fail "$f: $(head -3 "$TMP/err")"
  fi
done

cat >"$TMP/base.yaml" <<'EOF'
listen: 127.0.0.1:1111
queue:
  max_per_model: 7
models:
  - name: a
    path: /models/a.gguf
    max_seqs: 8
EOF
val() { # key-regex file: the value printed for the first matching line
  grep -E "^ *$1:" "$2" | head -1 | sed -E 's/^[^:]*: *//; s/^"(.*)"$/\1/'
}
"$GW" --config "$TMP/base.yaml" --print-config >"$TMP/o1" 2>&1
"$GW" --listen 127.0.0.1:2222 --config "$TMP/base.yaml" --max-queue 9 --print-config >"$TMP/o2" 2>&1
"$GW" --config "$TMP/base.yaml" --listen 127.0.0.1:2222 --max-seqs 3 --model b=/b.gguf --print-config >"$TMP/o3" 2>&1
check "file over defaults (listen, queue.max_per_model, models[0].max_seqs)" \
  test "$(val listen "$TMP/o1") $(val max_per_model "$TMP/o1") $(val max_seqs "$TMP/o1")" = "127.0.0.1:1111 7 8"
check "flags over the file, before or after --config" \
  test "$(val listen "$TMP/o2") $(val max_per_model "$TMP/o2") $(val listen "$TMP/o3")" = "127.0.0.1:2222 9 127.0.0.1:2222"
check "--max-seqs applies to every model, --model adds one" \
  test "$(grep -cE '^ +max_seqs: 3$' "$TMP/o3") $(grep -c 'name: "b"' "$TMP/o3")" = "2 1"

printf 'listen: 127.0.0.1:1\nmodels:\n  - name: a\n    path: /a\n    replicas: -1\n' >"$TMP/bad.yaml"
"$GW" --config "$TMP/bad.yaml" >"$TMP/bad.out" 2>&1
rc=$?
check "bad file: exit 2, FILE:LINE:COLUMN: key: reason (rc $rc)" \
  bash -c "[[ $rc == 2 ]] && grep -q '$TMP/bad.yaml:5:15: models\[0\].replicas: expected an integer in 0..64' '$TMP/bad.out'"
"$GW" --config "$TMP/nonexistent.yaml" >/dev/null 2>&1
check "missing file: exit 2" test $? = 2
"$GW" --max-queue lots >"$TMP/flag.out" 2>&1
rc=$?
check "bad flag value: exit 2, names the flag (rc $rc)" \
  bash -c "[[ $rc == 2 ]] && grep -q -- '--max-queue lots: expected an integer' '$TMP/flag.out'"
"$GW" --worker-endpoint tcp://0.0.0.0:5557 --print-config >/dev/null 2>"$TMP/plain.out"
rc=$?
check "non-loopback tcp:// without CURVE refused (rc $rc)" \
  bash -c "[[ $rc == 2 ]] && grep -q 'non-loopback tcp endpoint without CURVE' '$TMP/plain.out'"
check "... allowed with --allow-plain-tcp" \
  bash -c "'$GW' --worker-endpoint tcp://0.0.0.0:5557 --allow-plain-tcp --print-config >/dev/null"
ok_ep=1
for ep in tcp://127.0.0.9:5557 tcp://localhost:5557 'tcp://[::1]:5557' ipc:///tmp/pagoda-x.sock; do
  "$GW" --worker-endpoint "$ep" --print-config >/dev/null 2>&1 || { ok_ep=0; fail "endpoint $ep refused"; }
done
[[ $ok_ep = 1 ]] && ok "loopback (127.0.0.0/8, localhost, [::1]) and ipc:// endpoints need no CURVE"

# ---- key pairs ----------------------------------------------------------------------
mkdir -p "$TMP/keys"
"$GW" --gen-curve-keypair "$TMP/keys/server" >"$TMP/gen.out" 2>&1
check "--gen-curve-keypair: PREFIX.key mode 0600, PREFIX.pub 0644" \
  bash -c "[[ \$(stat -c %a '$TMP/keys/server.key') == 600 && \$(stat -c %a '$TMP/keys/server.pub') == 644 ]]"
check "... prints the public key that PREFIX.pub holds" \
  grep -qF "public key: $(cut -d' ' -f1 "$TMP/keys/server.pub")" "$TMP/gen.out"
"$GW" --gen-curve-keypair "$TMP/keys/server" >/dev/null 2>&1
check "... refuses to overwrite (exit 1)" test $? = 1
"$WK" --gen-curve-keypair "$TMP/keys/wb" >/dev/null 2>&1 &&
  "$WK" --gen-curve-keypair "$TMP/keys/wx" >/dev/null 2>&1
check "pagoda-worker --gen-curve-keypair too" test -s "$TMP/keys/wx.pub"

# ---- real processes: CURVE on loopback ---------------------------------------------------
MODEL=$(small_model)
[[ -f $MODEL ]] || { fail "no model for the process tests"; finish; }
HP=$(free_port); ZP=$(free_port)
URL=http://127.0.0.1:$HP
cp "$TMP/keys/wb.pub" "$TMP/keys/authorized"
cat >"$TMP/gw.yaml" <<EOF
listen: 127.0.0.1:$HP
worker_endpoint: tcp://127.0.0.1:$ZP
heartbeat_ms: 200
log_level: debug
curve:
  server_secret_key_file: $TMP/keys/server.key
  authorized_worker_keys_file: $TMP/keys/authorized
models:
  - name: m
    path: $MODEL
    replicas: 2
    max_seqs: 3
    threads: 1
    kv_blocks: 40
EOF
spawn "$TMP/gw.log" "$GW" --config "$TMP/gw.yaml"
GPID=$SPAWNED
health() { curl -sf "$URL/health"; }
n_workers() { # python condition over the /health JSON j
  health | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"
}
check "replicas: 2 → two local workers register over CURVE" wait_for 30 n_workers "len(j['workers'])==2"
check "... each with the model's settings (max_seqs 3 → capacity 3, kv_blocks 40)" \
  n_workers "all(w['capacity']==3 and w['kv_blocks']==40 for w in j['workers'])"
check "the gateway logged its public key" grep -qF "public key is $(cut -d' ' -f1 "$TMP/keys/server.pub")" "$TMP/gw.log"
# the local workers got their secret key through the environment, not argv
# (which every user can read in /proc)
local_pids=$(health | python3 -c 'import json,sys; print(" ".join(str(w["pid"]) for w in json.load(sys.stdin)["workers"]))')
env_ok=1
for p in $local_pids; do
  tr '\0' '\n' <"/proc/$p/cmdline" | grep -qx -- --curve-server-key || env_ok=0
  tr '\0' '\n' <"/proc/$p/cmdline" | grep -q -- --curve-secret-key && env_ok=0
  tr '\0' '\n' <"/proc/$p/environ" | grep -qE '^PAGODA_CURVE_SECRET_KEY=.{40}$' || env_ok=0
done
check "local workers: --curve-server-key on the command line, the secret only in their environment" \
  test "$env_ok" = 1

spawn "$TMP/wb.log" "$WK" --gateway "tcp://127.0.0.1:$ZP" --model "m=$MODEL" --threads 1 --heartbeat-ms 200 \
  --max-seqs 5 --curve-server-key "$TMP/keys/server.pub" --curve-secret-key "$TMP/keys/wb.key"
check "a remote worker with an authorized key registers (3 workers)" wait_for 30 n_workers "len(j['workers'])==3"
body='{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
check "a chat completion over the CURVE link" \
  bash -c "curl -sf -m 60 '$URL/v1/chat/completions' -H 'content-type: application/json' -d '$body' | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)[\"choices\"][0][\"finish_reason\"] in (\"stop\",\"length\") else 1)'"

spawn "$TMP/wx.log" "$WK" --gateway "tcp://127.0.0.1:$ZP" --model "m=$MODEL" --threads 1 --heartbeat-ms 200 \
  --curve-server-key "$(cut -d' ' -f1 "$TMP/keys/server.pub")" --curve-secret-key "$TMP/keys/wx.key"
spawn "$TMP/wp.log" "$WK" --gateway "tcp://127.0.0.1:$ZP" --model "m=$MODEL" --threads 1 --heartbeat-ms 200
WP=$SPAWNED
wx_pub=$(cut -d' ' -f1 "$TMP/keys/wx.pub")
check "a worker with an unknown key is refused, and the refusal is logged with its key" \
  wait_for 20 bash -c "grep -F -- '$wx_pub' '$TMP/gw.log' | grep -q 'refused worker connection'"
sleep 1
check "... neither it nor a worker without CURVE reaches the core (still 3 workers)" \
  n_workers "len(j['workers'])==3"
kill -TERM "$WP" 2>/dev/null

cat "$TMP/keys/wx.pub" >>"$TMP/keys/authorized"
kill -HUP "$GPID"
check "SIGHUP re-reads the authorized keys: the refused worker gets in (4 workers)" \
  wait_for 40 n_workers "len(j['workers'])==4"
printf 'garbage line\n' >>"$TMP/keys/authorized"
kill -HUP "$GPID"
check "a broken authorized-keys file on SIGHUP is logged; the old list stays" \
  wait_for 10 grep -q "authorized:.*expected a 40-character Z85 public key" "$TMP/gw.log"
check "... and the gateway keeps serving its workers" n_workers "len(j['workers'])==4"
finish
