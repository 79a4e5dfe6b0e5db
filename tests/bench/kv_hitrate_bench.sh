#!/usr/bin/env bash
# Prefix-cache hit rate of a multi-turn workload (pagoda-bench --groups/--turns)
# with a RAM pool holding a quarter of the workload's prefix blocks, with and
# without the KV disk tier, against an unlimited RAM pool (issue #27).
# Prints numbers only.
#   PAGODA_BUILD=build bash tests/bench/kv_hitrate_bench.sh [MODEL]
# MODEL defaults to stories260K (the hit rate depends on the cache, not on the
# model's size; its 512-token context sets the workload's lengths).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${PAGODA_BUILD:-build}
MODEL=${1:-../shared/models/stories260K.gguf}
G=${G:-8} T=${T:-4} N=${N:-96} C=${C:-2}
WL=(--groups "$G" --turns "$T" --prompt-tokens 40 --turn-words 8 -c "$C" -n "$N" --max-tokens 8
    --extra-json '{"temperature":0}')
TMP=$(mktemp -d /tmp/pagoda-kvhit.XXXXXX)
GW=; trap 'kill $GW 2>/dev/null; wait $GW 2>/dev/null; rm -rf "$TMP"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
run() { # name kv_blocks [worker args...]: prints "hit_rate index_entries"
  local name=$1 kvb=$2; shift 2
  HP=$(port); ZP=$(port)
  "$BUILD/pagoda-gateway" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP --model "m=$MODEL" \
    --max-seqs "$C" --threads 1 --kv-blocks "$kvb" "$@" >"$TMP/$name.log" 2>&1 &
  GW=$!
  for _ in $(seq 200); do curl -s "http://127.0.0.1:$HP/health" | grep -q '"pid"' && break; sleep 0.2; done
  "$BUILD/pagoda-bench" --url "http://127.0.0.1:$HP" --model m "${WL[@]}" --json >"$TMP/$name.json" 2>/dev/null
  sleep 1 # one more heartbeat for the index
  local ent
  ent=$(curl -s "http://127.0.0.1:$HP/metrics" | awk '/^pagoda_prefix_index_entries /{print $2}')
  kill $GW; wait $GW 2>/dev/null
  python3 -c "import json,sys; r=json.load(open('$TMP/$name.json')); assert r['requests_err'] == 0, r.get('errors'); print('%.4f %s %s %s' % (r['cached_prompt_tokens']/r['prompt_tokens'], '${ent:-0}', r['cached_prompt_tokens'], r['prompt_tokens']))"
}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); $MODEL; workload: ${WL[*]}"
read -r h_unl ent cu pu < <(run unlimited 4096)
Q=$(( (${ent%.*} + 3) / 4 ))
MIN=$(( C * 16 + 2 )) # room for the running sequences (512-token context: 16 blocks each)
(( Q < MIN )) && Q=$MIN
read -r h_ram _ cr pr < <(run quarter "$Q")
read -r h_disk _ cd pd < <(run quarter_disk "$Q" --worker-arg=--kv-cache-dir="$TMP/kv")
printf "workload prefix blocks (unlimited pool's index): %s; quarter pool: %d blocks\n" "${ent%.*}" "$Q"
printf "%-28s hit rate %.3f  (%s of %s prompt tokens)\n" "unlimited RAM" "$h_unl" "$cu" "$pu"
printf "%-28s hit rate %.3f  (%s of %s)\n" "quarter RAM, no disk tier" "$h_ram" "$cr" "$pr"
printf "%-28s hit rate %.3f  (%s of %s)\n" "quarter RAM + disk tier" "$h_disk" "$cd" "$pd"
python3 -c "print('disk tier / unlimited: %.3f   quarter RAM / unlimited: %.3f' % ($h_disk / $h_unl, $h_ram / $h_unl))"
