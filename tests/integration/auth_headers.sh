#!/usr/bin/env bash
# The HTTP edge attacked over real sockets (issue #37): pagoda-gateway with an API keys file
# and no worker (nothing here needs one: every answer is decided before a request is
# queued). Driver: tests/integration/auth_headers.py.
#   1. the headers decide: a keyless request announcing a 15 MiB body gets its 401 (404,
#      405, 413, 415, 403 for the other refusals) before it sends a body byte, and the
#      connection is closed; a bodyless refusal keeps the connection;
#   2. the attack: 300 keyless connections announcing 15 MiB each and pushing body bytes:
#      all answered 401, the gateway's RSS barely moves;
#   3. slow bodies (a gateway with --body-timeout 3 --body-min-rate 1000
#      --body-rate-window 1, so nothing depends on the machine's speed): a dripping body is
#      cut by the rate floor, a steady but too slow one by the deadline;
#   4. upload limits (--max-uploads 3 --max-uploads-per-ip 2): 429 per address, 503 for all,
#      before the body; a completed body frees its slot;
#   5. Host: DNS rebinding names get 421 on GET /health, /metrics, /v1/models, /ui/; IP
#      addresses and localhost are served; --allowed-host names and *.SUFFIX are served;
#   6. paths: %00..%1f, %7f (and raw control bytes) → 400 invalid_path; a 60 KB URL → JSON 414;
#   7. wrong JSON types → 400 on all three API surfaces, in each one's error shape;
#   8. every gateway exits 0 on SIGTERM with no sanitizer report.
source "$(dirname "$0")/../lib.sh"
source "$ROOT/tests/lib_proc.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
DRIVER=$ROOT/tests/integration/auth_headers.py
KEY=edge-normal-secret
"$GW" --hash-key edge:normal --secret "$KEY" | grep -v '^#' >"$TMP/keys.txt"
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null

# start NAME ARGS...: a keyed gateway without workers; sets URL_NAME, GPID_NAME
start() {
  local name=$1; shift
  local hp zp
  hp=$(free_port); zp=$(free_port)
  spawn "$TMP/gw-$name.log" "$GW" --listen "127.0.0.1:$hp" --worker-endpoint "tcp://127.0.0.1:$zp" \
    --keys "$TMP/keys.txt" --log-level debug "$@"
  eval "GPID_$name=$SPAWNED"
  eval "URL_$name=http://127.0.0.1:$hp"
  wait_for 10 curl -s -o /dev/null --noproxy '*' "http://127.0.0.1:$hp/metrics"
}
drive() { # NAME MODE [ARGS]
  local u=URL_$1 p=GPID_$1
  PAGODA_URL=${!u} PAGODA_KEY=$KEY PAGODA_PID=${!p} python3 "$DRIVER" "${@:2}" || N_FAIL=$((N_FAIL + 1))
}

if start A; then ok "gateway A (keys, defaults) up"; else fail "gateway A up"; tail -n 20 "$TMP"/*.log | sed 's/^/# /'; finish; fi
drive A early
drive A hold 300 | tee "$TMP/hold.out" | grep -v '^measure'
drive A host
drive A path
drive A types

if start S --body-timeout 3 --body-min-rate 1000 --body-rate-window 1; then
  drive S slow
else
  fail "gateway S (--body-timeout 3 --body-min-rate 1000 --body-rate-window 1) up"
fi
if start L --max-uploads 3 --max-uploads-per-ip 2 --body-min-rate 0 --body-timeout 60; then
  drive L limits
else
  fail "gateway L (--max-uploads 3 --max-uploads-per-ip 2) up"
fi
if start H --allowed-host pagoda.svc --allowed-host '*.cluster.local'; then
  drive H allowed
else
  fail "gateway H (--allowed-host) up"
fi

# an open gateway on 0.0.0.0 without --allowed-host says at start what a DNS name gets
hp=$(free_port); zp=$(free_port)
spawn "$TMP/gw-W.log" "$GW" --listen "0.0.0.0:$hp" --worker-endpoint "tcp://127.0.0.1:$zp"
GPID_W=$SPAWNED
wait_for 10 curl -s -o /dev/null --noproxy '*' "http://127.0.0.1:$hp/metrics"
check "listening on 0.0.0.0 without --allowed-host: a warning at start names --allowed-host" \
  grep -q 'WARN.*without --allowed-host.*421' "$TMP/gw-W.log"

for g in A S L H W; do
  p=GPID_$g
  [[ -n ${!p:-} ]] && stop_and_check "pagoda-gateway $g" "${!p}" "$TMP/gw-$g.log"
done
if [[ $N_FAIL -gt 0 ]]; then for f in "$TMP"/*.log; do echo "# --- $f"; tail -n 20 "$f" | sed 's/^/# /'; done; fi
finish
