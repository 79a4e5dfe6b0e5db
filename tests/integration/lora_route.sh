#!/usr/bin/env bash
# Adapters across replicas (REGISTER `lora`, gateway/lora_table.h), against
# real processes: a gateway serving `base` (one local worker with adapters
# tuned-a and tuned-b) and `twin` (replicas: 0, adapter twin-x), whose
# workers are started by hand like workers on other hosts. Checks:
#   - a twin-x request while the only replica lacks twin-x → 404 at once
#     (logged at its registration), never sent to that replica;
#   - once a replica with twin-x registers (after the one without, so the
#     one without comes first in every tie), every twin-x request runs there
#     with pagoda-run's text; a replica holding twin-x from another file is
#     logged and not used for it;
#   - cache-aware routing keys adapter requests as the worker keys their
#     blocks: a repeated tuned-a prompt is routed "cache" (the gateway's
#     predicted keys equal the worker's reported ones), the same prompt
#     under tuned-b or the base model is routed "load" (keys differ between
#     adapters and from the base), and a repeated base prompt "cache" again.
# Sequential requests, waits on conditions only: nothing depends on speed.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
MK=$BUILD/pagoda-mkmodel
RUN=$BUILD/pagoda-run
[[ -x $GW && -x $WK && -x $MK && -x $RUN ]] || { fail "pagoda-gateway / -worker / -mkmodel / -run not built in $BUILD"; finish; }
BASE=$(small_model) || finish
"$MK" --lora-for "$BASE" -o "$TMP/a8.gguf" --lora-rank 8 --seed 3 >/dev/null 2>&1 || { fail "mkmodel --lora-for (a8)"; finish; }
"$MK" --lora-for "$BASE" -o "$TMP/a16.gguf" --lora-rank 16 --seed 4 >/dev/null 2>&1 || { fail "mkmodel --lora-for (a16)"; finish; }
"$MK" --lora-for "$BASE" -o "$TMP/x.gguf" --lora-rank 4 --seed 5 >/dev/null 2>&1 || { fail "mkmodel --lora-for (x)"; finish; }

cat >"$TMP/gw.yaml" <<YAML
models:
  - name: base
    path: $BASE
    loras:
      - {name: tuned-a, file: $TMP/a8.gguf}
      - {name: tuned-b, file: $TMP/a16.gguf}
  - name: twin
    path: $BASE
    replicas: 0
    loras:
      - {name: twin-x, file: $TMP/x.gguf}
YAML
hp=$(free_port); zp=$(free_port)
WFLAGS=(--threads 1 --max-seqs 4 --kv-blocks 256 --exact-matmul --kv-type f32)
spawn "$TMP/gw.log" "$GW" --config "$TMP/gw.yaml" --listen 127.0.0.1:$hp --worker-endpoint tcp://127.0.0.1:$zp \
  --routing cache-aware --kv-blocks 256 --max-seqs 4 --threads 1 --worker-arg=--exact-matmul --worker-arg=--kv-type=f32
URL=http://127.0.0.1:$hp
py() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
replicas() { curl -sf "$URL/health" | py "j['models'].get('$1',{}).get('replicas',0)==$2"; }
check "gateway up, base's local worker registered" wait_for 90 replicas base 1

N=16
comp() { # MODEL PROMPT [MAX_TOKENS] → text on stdout; status in $TMP/code
  python3 -c 'import json,sys; print(json.dumps({"model":sys.argv[1],"prompt":sys.argv[2],"max_tokens":int(sys.argv[3]),"temperature":0}))' \
    "$1" "$2" "${3:-$N}" >"$TMP/req"
  curl -s -o "$TMP/body" -w '%{http_code}' -X POST "$URL/v1/completions" -H 'Content-Type: application/json' -d @"$TMP/req" >"$TMP/code"
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'], end='')" "$TMP/body" 2>/dev/null
}
ref() { "$RUN" -m "$BASE" -p "$1" -n $N --temp 0 --exact-matmul --kv-type f32 --threads 1 "${@:2}" 2>/dev/null; }

# --- a replica without the adapter -----------------------------------------
spawn "$TMP/w1.log" "$WK" --gateway tcp://127.0.0.1:$zp --model "twin=$BASE" "${WFLAGS[@]}"
check "twin: a remote replica without adapters registered" wait_for 90 replicas twin 1
check "gateway logs that replica lacks twin-x" wait_for 10 grep -q "has no adapter 'twin-x'" "$TMP/gw.log"
comp twin-x "Hi" >/dev/null
check "twin-x with no replica holding it → 404 model_not_found" bash -c \
  "[[ \$(cat $TMP/code) == 404 ]] && python3 -c \"import json; e=json.load(open('$TMP/body'))['error']; exit(0 if e['code']=='model_not_found' and 'twin-x' in e['message'] else 1)\""
check "…and never sent to the replica without it" bash -c "! grep -q \"adapter 'twin-x' is not loaded\" '$TMP/w1.log'"
t=$(comp twin "Hi"); check "the base model twin still runs there" test "$(cat "$TMP/code")" == 200

# --- a replica with it, registered second ----------------------------------
spawn "$TMP/w2.log" "$WK" --gateway tcp://127.0.0.1:$zp --model "twin=$BASE" --lora "twin-x=$TMP/x.gguf" "${WFLAGS[@]}"
check "twin: a second remote replica, with twin-x" wait_for 90 replicas twin 2
p="Once upon a time"
want=$(ref "$p" --lora "twin-x=$TMP/x.gguf")
[[ -n $want && $want != "$(ref "$p")" ]] || fail "pagoda-run with twin-x equals the base (the test would show nothing)"
good=0
for i in 1 2 3 4; do
  t=$(comp twin-x "$p"); [[ $(cat "$TMP/code") == 200 && $t == "$want" ]] && good=$((good + 1))
done
check "4 twin-x requests: all run, with pagoda-run --lora's text ($good of 4)" test $good == 4
check "…none reached the replica without twin-x" bash -c "! grep -q \"adapter 'twin-x' is not loaded\" '$TMP/w1.log'"
spawn "$TMP/w3.log" "$WK" --gateway tcp://127.0.0.1:$zp --model "twin=$BASE" --lora "twin-x=$TMP/a8.gguf" "${WFLAGS[@]}"
check "a replica with twin-x from another file is logged" wait_for 90 grep -q "has adapter 'twin-x' from another file" "$TMP/gw.log"

# --- cache-aware routing sees the adapter ----------------------------------
metric() { # NAME LABEL_SUBSTRING → the sum of matching series
  curl -sf "$URL/metrics" | python3 -c "
import sys
tot = 0.0
for l in sys.stdin:
    if l.startswith(sys.argv[1] + '{') and sys.argv[2] in l:
        tot += float(l.rsplit(' ', 1)[1])
print(int(tot))" "$1" "$2"
}
routed() { metric pagoda_routed_total "by=\"$1\""; }
entries() { metric pagoda_prefix_index_replica_entries 'model_name="base"'; }
entries_at_least() { (($(entries) >= $1)); }
long=$(python3 -c "
w = 'the cat sat on a mat and a dog ran to the park with a red ball while the sun was warm and bright over the hill'.split()
print(' '.join(w[(i * 3) % len(w)] + ('' if i % 5 else str(i)) for i in range(110)))")
# routed "cache" or "load" for one request: the by-label whose count rose
route_of() { # MODEL
  local c0 l0; c0=$(routed cache); l0=$(routed load)
  comp "$1" "$long" 1 >/dev/null
  [[ $(cat "$TMP/code") == 200 ]] || { echo "http $(cat "$TMP/code")"; return; }
  if (($(routed cache) > c0)); then echo cache; elif (($(routed load) > l0)); then echo load; else echo none; fi
}
r=$(route_of tuned-a); check "tuned-a, a new long prompt: routed by load ($r)" test "$r" == load
check "its blocks reach the gateway's index (the worker's KV messages)" wait_for 30 entries_at_least 3
r=$(route_of tuned-a); check "tuned-a, the same prompt again: routed by cache — the gateway's keys = the worker's ($r)" test "$r" == cache
r=$(route_of tuned-b); check "tuned-b, the same prompt: routed by load — another adapter's keys differ ($r)" test "$r" == load
e1=$(entries)
r=$(route_of base); check "base, the same prompt: routed by load — the base's keys differ from the adapters' ($r)" test "$r" == load
check "the base's blocks reach the index" wait_for 30 entries_at_least $((e1 + 3))
r=$(route_of base); check "base, the same prompt again: routed by cache ($r)" test "$r" == cache
finish
