#!/usr/bin/env bash
# TTFT of a ~1,800-token shared prefix on the 1.1B Q4_K_M model with the KV
# disk tier (issue #27): cold, warm, after kill -9 + restart (MODE=kill9), and
# after an on-demand idle stop + start (MODE=idle). Prints numbers only, then
# the gateway log lines about the disk tier, the pack cache and each worker's
# start-up phases ("start-up N ms: weights hash, load, pack, scheduler, ...").
#   PAGODA_BUILD=build bash tests/bench/kv_restart_bench.sh [kill9|idle] [MODEL] [KV_TYPE]
# MODEL defaults to $BUILD/models/w1b-q4_k_m.gguf (tests/large/w1b.sh makes it).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${PAGODA_BUILD:-build}
MODE=${1:-kill9}
MODEL=${2:-$BUILD/models/w1b-q4_k_m.gguf}
KVT=${3:-auto}
[[ -f $MODEL ]] || { echo "no $MODEL (make it as tests/large/w1b.sh does)"; exit 1; }
TMP=$(mktemp -d /tmp/pagoda-kvbench.XXXXXX)
trap 'kill $GW 2>/dev/null; wait $GW 2>/dev/null; rm -rf "$TMP"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HP=$(port); ZP=$(port)
EXTRA=()
[[ $MODE == idle ]] && EXTRA=(--on-demand m --idle-timeout 5)
# GW_ARGS: more gateway flags, e.g. GW_ARGS="--standby false" (an idle start without the standby)
read -r -a MORE <<<"${GW_ARGS:-}"
EXTRA+=("${MORE[@]}")
"$BUILD/pagoda-gateway" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP --model "m=$MODEL" \
  --max-seqs 4 --threads 2 --kv-type "$KVT" --worker-arg=--kv-cache-dir="$TMP/kv" "${EXTRA[@]}" >"$TMP/gw.log" 2>&1 &
GW=$!
if [[ $MODE != idle ]]; then
  for _ in $(seq 600); do
    curl -s "http://127.0.0.1:$HP/health" | grep -q '"pid"' && break; sleep 0.5
  done
fi
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; mode $MODE; $MODEL; kv $KVT"
GWLOG="$TMP/gw.log" python3 tests/bench/kv_restart_bench.py "http://127.0.0.1:$HP" "$MODE" "${TOKENS:-1800}"
grep -E "disk tier|scheduler:|start-up|wanted|registered|packed|loaded|pack cache" "$TMP/gw.log" | sed "s/^/# /" | tail -n 40
