#!/usr/bin/env bash
# One-stream decode through HTTP with the packed weights in an anonymous
# huge-page arena ("copied": the pack file read with PAGODA_PACK_MAP=never)
# against the same file used through its mapping ("mapped"; docs/KV_CACHE.md,
# "Mapped, not copied"). Both start from the same file. Alternating rounds,
# fresh gateway each time; prints tok/s (1000 / median time per output token
# of pagoda-bench, 6 requests of 128 tokens) per round. Asserts nothing.
#   PAGODA_BUILD=build ROUNDS=3 bash tests/bench/pack_map_ab.sh [MODEL]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
B=${PAGODA_BUILD:-build}
M=${1:-$B/models/w1b-q4_k_m.gguf}
ROUNDS=${ROUNDS:-3}
[[ -f $M ]] || { echo "no $M (make it as tests/large/w1b.sh does)"; exit 1; }
D=$(mktemp -d /tmp/pagoda-mapab.XXXXXX)
trap 'rm -rf "$D"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
run() { # copied|mapped: prints tok/s, then the worker's pack-cache line on stderr
  local hp zp gw map=always
  hp=$(port); zp=$(port)
  [[ $1 == copied ]] && map=never
  PAGODA_PACK_MAP=$map "$B/pagoda-gateway" --listen 127.0.0.1:"$hp" --worker-endpoint tcp://127.0.0.1:"$zp" --model "m=$M" --threads 2 \
    --worker-arg=--kv-cache-dir="$D/kv" >"$D/gw-$1.log" 2>&1 &
  gw=$!
  for _ in $(seq 600); do curl -s "http://127.0.0.1:$hp/health" | grep -q '"pid"' && break; sleep 0.2; done
  sleep 3 # the first start's pack-file write and the KV pool's idle prefault
  "$B/pagoda-bench" --url "http://127.0.0.1:$hp" --model m -c 1 -n 6 --warmup 1 --max-tokens 128 --prompt-tokens 9 \
    --ignore-eos --no-progress --json 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('%.2f' % (1000 / d['tpot_ms']['p50']))"
  kill "$gw"; wait "$gw" 2>/dev/null
  grep -oE "pack cache: (mapped|read|packed)" "$D/gw-$1.log" | head -n 1 >&2
}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); $M"
run mapped >/dev/null 2>&1 # writes the pack file
for r in $(seq "$ROUNDS"); do
  c=$(run copied); m=$(run mapped)
  echo "round $r: pack file copied $c tok/s, mapped $m tok/s"
done
