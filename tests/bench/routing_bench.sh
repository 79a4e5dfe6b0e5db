#!/usr/bin/env bash
# Least-loaded vs cache-aware routing, side by side (docs/BATCHING.md
# "Routing by cache"). Not part of `make test`: it takes minutes.
#
#   tests/bench/routing_bench.sh MODEL.gguf REPLICAS [ROUNDS] [-- pagoda-bench args...]
#
# For each round it starts `pagoda-gateway --replicas REPLICAS --routing MODE`
# for MODE = least-loaded then cache-aware (alternating which goes first, so
# drifting machine load hits both alike), runs pagoda-bench with the workload
# arguments, scrapes /metrics (routing decisions, the gateway's per-request key
# cost) and stops the gateway. With REPLICAS = 1 only one mode runs (the
# single-replica reference). Prints one line per run, then the medians.
# Environment: BUILD (default build), WORKER_ARGS (extra gateway flags for the
# workers, default: 1 thread, 256-token steps, 256 MiB KV, 5 s heartbeats
# so a slow step on a loaded machine is not taken for a hang), OUT (directory for logs and JSON).
set -euo pipefail
MODEL=$1; REPLICAS=$2; ROUNDS=${3:-1}
shift 3 || shift $#
[[ ${1:-} == -- ]] && shift
BENCH_ARGS=("$@")
BUILD=${BUILD:-build}
OUT=${OUT:-$(mktemp -d /tmp/routing_bench.XXXXXX)}
WORKER_ARGS=${WORKER_ARGS:---threads 1 --max-batch-tokens 256 --kv-budget-mb 256 --heartbeat-ms 5000 --worker-arg=--heartbeat-ms=5000}
mkdir -p "$OUT"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

GPID=
trap '[[ -n $GPID ]] && kill -TERM $GPID 2>/dev/null; wait' EXIT
run_one() { # mode round
    local mode=$1 r=$2 hp zp url tag=$1-r$2-x$REPLICAS
    hp=$(port); zp=$(port); url=http://127.0.0.1:$hp
    # shellcheck disable=SC2086
    "$BUILD/pagoda-gateway" --listen 127.0.0.1:$hp --worker-endpoint tcp://127.0.0.1:$zp \
        --model "m=$MODEL" --replicas "$REPLICAS" --routing "$mode" $WORKER_ARGS \
        >"$OUT/gw-$tag.log" 2>&1 &
    GPID=$!
    for _ in $(seq 600); do
        n=$(curl -s "$url/health" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))' 2>/dev/null || echo 0)
        [[ $n == "$REPLICAS" ]] && break
        sleep 0.2
    done
    "$BUILD/pagoda-bench" --url "$url" --model m --json --no-progress "${BENCH_ARGS[@]}" >"$OUT/bench-$tag.json"
    curl -s "$url/metrics" >"$OUT/metrics-$tag.txt"
    kill -TERM $GPID; wait $GPID || true
    GPID=
    python3 - "$OUT/bench-$tag.json" "$OUT/metrics-$tag.txt" "$mode" "$REPLICAS" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, re, sys
b = json.load(open(sys.argv[1])); m = open(sys.argv[2]).read()
def met(name, **lab):
    t = 0.0
    for line in m.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in lab.items()):
            t += float(line.rsplit(" ", 1)[1])
    return t
hit = b["cached_prompt_tokens"] / b["prompt_tokens"] if b["prompt_tokens"] else 0
keys_n = met("pagoda_route_keys_requests_total")
keys_us = met("pagoda_route_keys_seconds_total") / keys_n * 1e6 if keys_n else 0
print(json.dumps({"mode": sys.argv[3], "replicas": int(sys.argv[4]), "hit": round(hit, 4),
      "ttft_p50": round(b["ttft_ms"]["p50"], 1), "ttft_p99": round(b["ttft_ms"]["p99"], 1),
      "out_tok_s": round(b["output_tok_per_s"], 1), "req_s": round(b["req_per_s"], 3),
      "ok": b["requests_ok"], "err": b["requests_err"], "prompt_mean": round(b["prompt_tokens_mean"], 1),
      "by_cache": met("pagoda_routed_total", by="cache"), "by_load": met("pagoda_routed_total", by="load"),
      "by_overload": met("pagoda_routed_total", by="overload"), "keys_us": round(keys_us, 1),
      "load": sys.argv[5]}))
PY
}

modes=(least-loaded cache-aware)
[[ $REPLICAS == 1 ]] && modes=(cache-aware)
for r in $(seq "$ROUNDS"); do
    if (( r % 2 == 0 )); then order=("${modes[@]}"); else order=(); for ((i=${#modes[@]}-1; i>=0; i--)); do order+=("${modes[i]}"); done; fi
    for mode in "${order[@]}"; do run_one "$mode" "$r" | tee -a "$OUT/results.jsonl"; done
done
python3 - "$OUT/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for mode in ("least-loaded", "cache-aware"):
    rs = [r for r in rows if r["mode"] == mode]
    if not rs: continue
    med = lambda k: statistics.median(r[k] for r in rs)
    print(f"median {mode:13s} x{rs[0]['replicas']} ({len(rs)} runs): hit {med('hit'):.3f}  TTFT p50 {med('ttft_p50'):.0f} ms  "
          f"p99 {med('ttft_p99'):.0f} ms  out {med('out_tok_s'):.1f} tok/s  keys {med('keys_us'):.0f} us/req")
PY
echo "logs: $OUT"
