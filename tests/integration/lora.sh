#!/usr/bin/env bash
# LoRA adapters through the gateway (gateway/lora_table.h), against real
# processes: a gateway whose local worker loads stories260K (or its stand-in)
# with two adapters from `pagoda-mkmodel --lora-for` (--lora on the command
# line for one, models[].loras in a YAML file for the other). Checks:
# /v1/models lists both after their base; greedy text through model
# "<adapter>" equals `pagoda-run --lora` with that adapter, and so does the
# llama.cpp `lora` field on the base name (ids of GET /lora-adapters, with its
# own scale); the base alone equals pagoda-run without adapters; unknown ids,
# another model's adapter and bad `lora` values → 400 with param "lora";
# GET /lora-adapters in llama-server's shape; pagoda_lora_requests_total per
# adapter; configuration errors; the Anthropic surface runs an
# adapter by model name too; and the OpenAI npm SDK selects an adapter by
# model name (lora_sdk.mjs, skipped without node or tests/js's packages).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
RUN=$BUILD/pagoda-run
[[ -x $GW && -x $MK && -x $RUN ]] || { fail "pagoda-gateway / pagoda-mkmodel / pagoda-run not built in $BUILD"; finish; }
BASE=$(small_model) || finish
"$MK" --lora-for "$BASE" -o "$TMP/a8.gguf" --lora-rank 8 --seed 3 >/dev/null 2>&1 || { fail "mkmodel --lora-for (rank 8)"; finish; }
"$MK" --lora-for "$BASE" -o "$TMP/a16.gguf" --lora-rank 16 --lora-alpha 8 --type F16 --seed 4 >/dev/null 2>&1 ||
  { fail "mkmodel --lora-for (rank 16)"; finish; }
"$MK" --lora-for "$BASE" -o "$TMP/other.gguf" --lora-rank 4 --seed 5 >/dev/null 2>&1 || { fail "mkmodel --lora-for (other)"; finish; }

cat >"$TMP/gw.yaml" <<YAML
models:
  - name: base
    path: $BASE
    loras:
      - {name: tuned-a, file: $TMP/a8.gguf, scale: 1.5}
  - name: twin
    path: $BASE
    loras:
      - {name: twin-x, file: $TMP/other.gguf}
YAML
hp=$(free_port); zp=$(free_port)
# --lora after --model base adds to base (the preceding --model)
spawn "$TMP/gw.log" "$GW" --config "$TMP/gw.yaml" --listen 127.0.0.1:$hp --worker-endpoint tcp://127.0.0.1:$zp \
  --model "base=$BASE" --lora "tuned-b=$TMP/a16.gguf:0.75" --max-seqs 4 --threads 1 \
  --worker-arg=--exact-matmul --worker-arg=--kv-type=f32
URL=http://127.0.0.1:$hp
py() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
ready() { curl -sf "$URL/health" | py "all(j['models'][m]['replicas']==1 for m in ('base','twin'))"; }
check "gateway up, workers with their adapters registered" wait_for 90 ready
"$GW" --config "$TMP/gw.yaml" --model "base=$BASE" --lora "tuned-b=$TMP/a16.gguf:0.75" --print-config >"$TMP/pc.yaml"
check "--print-config: base's adapters (file's, then the flag's), twin's" \
  test "$(grep -A1 -- '^      -$' "$TMP/pc.yaml" | grep -o 'name: "[^"]*"' | tr '\n' ' ')" == 'name: "tuned-a" name: "tuned-b" name: "twin-x" '

check "/v1/models: each adapter after its base" bash -c "curl -sf $URL/v1/models | python3 -c \"import json,sys; ids=[m['id'] for m in json.load(sys.stdin)['data']]; sys.exit(0 if ids==['base','tuned-a','tuned-b','twin','twin-x'] else 1)\""
check "GET /lora-adapters: llama-server's shape, ids in order, names not paths" bash -c "curl -sf $URL/lora-adapters | python3 -c \"import json,sys; a=json.load(sys.stdin); sys.exit(0 if [(x['id'],x['path'],x['scale']) for x in a]==[(0,'tuned-a',1.5),(1,'tuned-b',0.75),(2,'twin-x',1.0)] else 1)\""

# configuration errors: exit 2 with the key's path
printf 'models:\n  - name: m\n    path: %s\n    loras:\n      - {name: m, file: %s}\n' "$BASE" "$TMP/a8.gguf" >"$TMP/dup.yaml"
"$GW" --config "$TMP/dup.yaml" --print-config >/dev/null 2>"$TMP/err"; rc=$?
check "an adapter named like a model → exit 2 naming models[0].loras[0].name" bash -c "[[ $rc == 2 ]] && grep -q 'models\[0\].loras\[0\].name' '$TMP/err'"
printf 'models:\n  - name: m\n    path: %s\n    loras:\n      - {name: x}\n' "$BASE" >"$TMP/nofile.yaml"
"$GW" --config "$TMP/nofile.yaml" --print-config >/dev/null 2>"$TMP/err"; rc=$?
check "an adapter without file → exit 2, missing required key 'file'" bash -c "[[ $rc == 2 ]] && grep -q \"missing required key 'file'\" '$TMP/err'"
"$GW" --lora "x=$TMP/a8.gguf" --print-config >/dev/null 2>"$TMP/err"; rc=$?
check "--lora with no model → exit 2" bash -c "[[ $rc == 2 ]] && grep -q 'no --model before it' '$TMP/err'"

N=24
comp() { # BODY_JSON → the completion's text on stdout; status in $TMP/code
  curl -s -o "$TMP/body" -w '%{http_code}' -X POST "$URL/v1/completions" -H 'Content-Type: application/json' -d "$1" >"$TMP/code"
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'], end='')" "$TMP/body" 2>/dev/null
}
body() { # MODEL PROMPT [LORA_JSON]
  python3 -c 'import json,sys; b={"model":sys.argv[1],"prompt":sys.argv[2],"max_tokens":int(sys.argv[3]),"temperature":0}
if len(sys.argv)>4: b["lora"]=json.loads(sys.argv[4])
print(json.dumps(b))' "$1" "$2" "$N" "${@:3}"
}
ref() { "$RUN" -m "$BASE" -p "$1" -n $N --temp 0 --exact-matmul --kv-type f32 --threads 1 "${@:2}" 2>/dev/null; }

for p in "Once upon a time" "The little dog"; do
  r0=$(ref "$p"); ra=$(ref "$p" --lora "tuned-a=$TMP/a8.gguf:1.5"); rb=$(ref "$p" --lora "tuned-b=$TMP/a16.gguf:0.75")
  rh=$(ref "$p" --lora "tuned-a=$TMP/a8.gguf:0.5")
  [[ -n $r0 && $r0 != "$ra" ]] || fail "'$p': pagoda-run with adapter tuned-a differs from the base (else the test shows nothing)"
  t=$(comp "$(body base "$p")"); check "'$p': base alone = pagoda-run without adapters" test "$t" == "$r0"
  t=$(comp "$(body tuned-a "$p")"); check "'$p': model tuned-a = pagoda-run --lora a8:1.5" test "$t" == "$ra"
  t=$(comp "$(body tuned-b "$p")"); check "'$p': model tuned-b = pagoda-run --lora a16:0.75" test "$t" == "$rb"
  t=$(comp "$(body base "$p" '[{"id":0,"scale":0.5}]')"); check "'$p': base + lora [{id 0, scale 0.5}] = pagoda-run --lora a8:0.5" test "$t" == "$rh"
  t=$(comp "$(body base "$p" '[{"id":0,"scale":0},{"id":1,"scale":0.75}]')"); check "'$p': base + lora [{id 0, scale 0}, {id 1, 0.75}] = tuned-b" test "$t" == "$rb"
  t=$(comp "$(body base "$p" '[]')"); check "'$p': base + empty lora = base" test "$t" == "$r0"
done

bad() { # WHAT BODY
  comp "$2" >/dev/null
  check "$1 → 400 param lora" bash -c "[[ \$(cat $TMP/code) == 400 ]] && python3 -c \"import json,sys; e=json.load(open('$TMP/body'))['error']; sys.exit(0 if e['param']=='lora' and e['type']=='invalid_request_error' else 1)\""
}
bad "unknown adapter id 7" "$(body base "Hi" '[{"id":7}]')"
bad "another model's adapter (id 2 on base)" "$(body base "Hi" '[{"id":2}]')"
bad "lora not a list" "$(body base "Hi" '{"id":0}')"
bad "lora entry without id" "$(body base "Hi" '[{"scale":1}]')"
bad "the same adapter twice" "$(body tuned-a "Hi" '[{"id":0}]')"
comp "$(body no-such-adapter "Hi")" >/dev/null
check "an unknown model name is still 404 model_not_found" bash -c "[[ \$(cat $TMP/code) == 404 ]]"

check "/metrics: pagoda_lora_requests_total per adapter, labelled with the base model" bash -c \
  "curl -sf $URL/metrics | grep -q '^pagoda_lora_requests_total{model_name=\"base\",adapter=\"tuned-a\"} [1-9]'"
check "/metrics: no adapter series for a model without adapter requests" bash -c \
  "! curl -sf $URL/metrics | grep -q '^pagoda_lora_requests_total{model_name=\"twin\"'"

# the Anthropic surface: an adapter by model name (same worker path)
am=$(curl -s -X POST "$URL/v1/messages" -H 'Content-Type: application/json' -d '{"model":"tuned-a","max_tokens":8,"messages":[{"role":"user","content":"Hi"}]}')
check "Anthropic /v1/messages with model tuned-a answers, model echoed" bash -c "python3 -c \"import json,sys; j=json.loads(sys.argv[1]); sys.exit(0 if j.get('type')=='message' and j['model']=='tuned-a' else 1)\" '$am'"

if command -v node >/dev/null && bash "$ROOT/tests/js/ensure.sh" >/dev/null 2>&1; then
  p="Once upon a time"
  URL=$URL MODEL=tuned-a PROMPT="$p" N=$N WANT="$(ref "$p" --lora "tuned-a=$TMP/a8.gguf:1.5")" \
    run_node_tap 120 "$ROOT/tests/integration/lora_sdk.mjs"
else
  skip "node/npm or the npm packages unavailable: no OpenAI SDK check"
fi
finish
