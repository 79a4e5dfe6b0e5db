#!/usr/bin/env bash
# Routing by cache with 2 real local replicas (pagoda-gateway --replicas 2):
# a request with a cached prefix goes to the replica that holds it unless
# that one is overloaded, worker evictions remove index entries, a killed
# worker's entries vanish, and /metrics prefix-cache counters equal the
# tokens served from cache. Checks in routing_driver.py.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent
M=$SMALL
KV_BLOCKS=40

HP=$(free_port); ZP=$(free_port)
URL=http://127.0.0.1:$HP
# --replica-grace keeps the model served while a killed replica restarts
# TEST ONLY: steps of >= 1 ms (worker.h), so the 300-token requests that load a replica
# past the gap are still running when the next request is routed, on any machine
PAGODA_TEST_STEP_SLEEP_MS=1 \
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP --heartbeat-ms 200 \
  --worker-arg=--heartbeat-ms=200 --threads 1 --max-seqs 4 --kv-blocks $KV_BLOCKS \
  --model "m=$M" --replicas 2 --routing cache-aware --routing-max-load-gap 1 --log-level debug
check "gateway up with 2 replicas" wait_for 30 bash -c \
  "curl -s $URL/health | python3 -c \"import json,sys; sys.exit(0 if len(json.load(sys.stdin)['workers'])==2 else 1)\""
python3 "$(dirname "$0")/routing_driver.py" "$URL" "$KV_BLOCKS" || N_FAIL=$((N_FAIL + 1))
grep -q "KV from" "$TMP/gw.log" || true
finish
