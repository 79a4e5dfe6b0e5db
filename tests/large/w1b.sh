#!/usr/bin/env bash
# Load and chaos at real model size (issue #15): a 1.1B-parameter model of
# TinyLlama's shape (llama, dim 2048, 22 layers, 32 heads, 4 KV heads, FFN
# 5632, vocab 32000), Q4_K_M, made by pagoda-mkmodel with seeded random
# weights and cached as $BUILD/models/w1b-q4_k_m.gguf (made only when absent;
# ~0.67 GB, ~30 s of CPU). The gateway runs with DEFAULT flags (only ports
# and the model): no heartbeat or timeout tuning. tests/large/w1b_driver.py
# runs STREAMS (32) concurrent streams twice: plain load, then kill -9 of the
# worker mid-run. Run by `make test-large` (and .ci/run).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW && -x $BUILD/pagoda-mkmodel ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
TOK=$SHARED/models/stories260K.gguf
[[ -f $TOK ]] || TOK=builtin
MODEL=$BUILD/models/w1b-q4_k_m.gguf
if [[ ! -f $MODEL ]]; then
  mkdir -p "$BUILD/models"
  t0=$SECONDS
  if "$BUILD/pagoda-mkmodel" -o "$MODEL.tmp" --type Q4_K_M --dim 2048 --layers 22 --heads 32 \
       --kv-heads 4 --ffn 5632 --vocab 32000 --ctx 2048 --seed 1 --tokenizer-from "$TOK" >"$TMP/mk.log" 2>&1 &&
     mv "$MODEL.tmp" "$MODEL"; then
    echo "# made $MODEL in $((SECONDS - t0)) s: $(tail -n 1 "$TMP/mk.log" | sed 's/.*wrote //')"
  else
    rm -f "$MODEL.tmp"
    fail "pagoda-mkmodel made the 1.1B Q4_K_M model"; sed 's/^/# /' "$TMP/mk.log" | tail -5; finish
  fi
fi
echo "# model: $MODEL ($(du -m "$MODEL" | cut -f1) MiB)"

HP=$(free_port)
ZP=$(free_port)
spawn "$TMP/gw.log" "$GW" --listen "127.0.0.1:$HP" --worker-endpoint "tcp://127.0.0.1:$ZP" \
  --model "m=$MODEL"
GPID=$SPAWNED
# A registered worker is an entry of /health's "workers" (a supervised process that is
# still loading is listed under "local_workers" with the same model name).
registered() {
  curl -s "http://127.0.0.1:$HP/health" |
    python3 -c 'import json, sys; sys.exit(not any(w["model"] == "m" for w in json.load(sys.stdin)["workers"]))'
}
if ! wait_for 300 registered; then
  fail "the 1.1B worker registered within 300 s"; tail -n 20 "$TMP/gw.log" | sed 's/^/# /'; finish
fi
ok "the 1.1B worker registered ($(grep -m1 -o 'scheduler: .*' "$TMP/gw.log"))"
t0=$SECONDS
HP=$HP STREAMS=${STREAMS:-32} MAX_TOKENS=${MAX_TOKENS:-8} python3 "$(dirname "$0")/w1b_driver.py"
rc=$?
echo "# w1b_driver took $((SECONDS - t0)) s"
if ((rc != 0)); then
  grep -E "WARN|ERROR|removed|restart" "$TMP/gw.log" | tail -n 30 | sed 's/^/# /'
fi
grep -E "removed|SIGKILL|made no progress|started worker|registered:" "$TMP/gw.log" | sed 's/^/# gateway: /' | head -n 10
stop_and_check pagoda-gateway "$GPID" "$TMP/gw.log" 60
finish
