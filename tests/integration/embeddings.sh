#!/usr/bin/env bash
# POST /v1/embeddings against real processes (gateway + supervised worker):
#   * vectors checked against the independent NumPy forward pass
#     (tests/ref/llama_ref.py --embed: final-norm hidden states, mean-pooled,
#     L2-normalised) on stories260K.gguf and the zoo F32 model — tolerance:
#     cosine ≥ 0.9999 and max |diff| ≤ 2e-3 per component (the worker runs
#     --exact-matmul --kv-type f32, so only float32 rounding separates them);
#   * text input = its /tokenize ids as token input; base64 = the float array's
#     little-endian float32 bytes; usage.prompt_tokens = Σ input tokens;
#   * an input alone and inside a batch of other inputs, and while
#     generation requests share the steps, gives the same vector (≤ 1e-5);
#   * hostile rows → 400 OpenAI-shaped errors, and the server keeps serving;
#   * last pooling on a pagoda-mkmodel model written with pooling_type 3.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent
PYN=/usr/bin/python3 # with numpy (deploy/install-deps.sh: python3-numpy)
$PYN -c "import numpy" 2>/dev/null || { skip "python3-numpy missing: no reference check"; finish; }
STORIES=$SMALL
ZOO=$(test_model zoo/zoo-F32.gguf) # the shared zoo, or its stand-in

py() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
req() { # PATH BODY → status in $CODE, body in $TMP/body
  CODE=$(curl -s -o "$TMP/body" -w '%{http_code}' -X POST "$URL$1" -H 'Content-Type: application/json' -d "$2")
}
is_error() { # status [param]
  [[ $CODE == "$1" ]] && py "set(j['error'])=={'message','type','param','code'} and j['error']['type']=='invalid_request_error' ${2:+and j['error']['param']=='$2'}" <"$TMP/body"
}

start() { # name model-file → URL
  local hp zp
  hp=$(free_port); zp=$(free_port)
  spawn "$TMP/gw_$1.log" "$GW" --listen 127.0.0.1:$hp --worker-endpoint tcp://127.0.0.1:$zp \
    --model "$1=$2" --max-seqs 4 --max-batch-tokens 64 --log-level debug \
    --worker-arg=--exact-matmul --worker-arg=--kv-type=f32
  URL=http://127.0.0.1:$hp
  ready() { curl -sf "$URL/health" | py "j['models']['$1']['replicas']==1"; }
  check "$1: gateway up, local worker registered" wait_for 30 ready "$1"
}

# compare RESPONSE.json MODEL-FILE SEQ... : the response's embeddings vs the reference
cmp_ref() {
  local resp=$1 model=$2; shift 2
  local args=()
  for s in "$@"; do args+=(--seq "$s"); done
  $PYN "$ROOT/tests/ref/llama_ref.py" "$model" "${args[@]}" --embed "$TMP/ref.bin" || return 1
  $PYN - "$resp" "$TMP/ref.bin" <<'EOF'
import json, sys, numpy as np
j = json.load(open(sys.argv[1]))
got = np.array([d["embedding"] for d in sorted(j["data"], key=lambda d: d["index"])], dtype=np.float64)
ref = np.fromfile(sys.argv[2], dtype="<f4").astype(np.float64).reshape(got.shape[0], -1)
assert got.shape == ref.shape, (got.shape, ref.shape)
cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
diff = np.abs(got - ref).max()
norms = np.linalg.norm(got, axis=1)
print("# cosine min %.7f, max |diff| %.2e, norms %s" % (cos.min(), diff, np.round(norms, 6)))
sys.exit(0 if cos.min() >= 0.9999 and diff <= 2e-3 and np.all(np.abs(norms - 1) < 1e-5) else 1)
EOF
}

# ---- stories260K ---------------------------------------------------------------
start stories "$STORIES"
S1=1,403,407,261,378,100,43; S2=1,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80
req /v1/embeddings "{\"model\":\"stories\",\"input\":[[${S1}],[${S2}],[5]]}"
cp "$TMP/body" "$TMP/batch3.json"
check "token-id arrays: 200, OpenAI shape (object list, data[i].object embedding, index, model, usage)" \
  bash -c "[[ $CODE == 200 ]] && python3 -c \"
import json,sys; j=json.load(open('$TMP/batch3.json'))
ok = j['object']=='list' and j['model']=='stories' and [d['index'] for d in j['data']]==[0,1,2] \
  and all(d['object']=='embedding' and len(d['embedding'])==64 for d in j['data'])
u = j['usage']; ok = ok and u['prompt_tokens']==7+73+1 and u['total_tokens']==u['prompt_tokens']
sys.exit(0 if ok else 1)\""
check "stories: 3 inputs (7, 73 tokens — over the 64-row step budget, so chunked — and 1) match the NumPy reference" \
  cmp_ref "$TMP/batch3.json" "$STORIES" "$S1" "$S2" 5

req /v1/embeddings "{\"model\":\"stories\",\"input\":[${S1}]}"
cp "$TMP/body" "$TMP/single.json"
check "one input alone = the same input inside a batch (max |diff| ≤ 1e-5)" python3 -c "
import json,sys
a=json.load(open('$TMP/single.json'))['data'][0]['embedding']; b=json.load(open('$TMP/batch3.json'))['data'][0]['embedding']
sys.exit(0 if len(a)==len(b) and max(abs(x-y) for x,y in zip(a,b))<=1e-5 else 1)"

TEXT="Once upon a time, there was a little girl named Lily."
req /tokenize "{\"model\":\"stories\",\"prompt\":\"$TEXT\"}"
IDS=$(python3 -c "import json; print(','.join(map(str, json.load(open('$TMP/body'))['tokens'])))")
req /v1/embeddings "{\"model\":\"stories\",\"input\":\"$TEXT\"}"
cp "$TMP/body" "$TMP/text.json"
check "string input: 200, usage.prompt_tokens = /tokenize count" \
  bash -c "[[ $CODE == 200 ]] && python3 -c \"import json,sys; sys.exit(0 if json.load(open('$TMP/text.json'))['usage']['prompt_tokens']==len('$IDS'.split(',')) else 1)\""
check "string input matches the reference on its /tokenize ids (BOS included)" cmp_ref "$TMP/text.json" "$STORIES" "$IDS"
req /v1/embeddings "{\"model\":\"stories\",\"input\":[\"$TEXT\",\"The end.\"],\"encoding_format\":\"base64\"}"
cp "$TMP/body" "$TMP/b64.json"
check "base64: little-endian float32 bytes of the same vector as the float answer" python3 -c "
import json,sys,base64,struct
j=json.load(open('$TMP/b64.json')); f=json.load(open('$TMP/text.json'))['data'][0]['embedding']
b=base64.b64decode(j['data'][0]['embedding']); v=struct.unpack('<%df' % (len(b)//4), b)
sys.exit(0 if len(v)==len(f) and max(abs(x-y) for x,y in zip(v,f))<=1e-5 and isinstance(j['data'][1]['embedding'], str) else 1)"
req /v1/embeddings "{\"model\":\"stories\",\"input\":\"$TEXT\",\"dimensions\":64,\"user\":\"u1\"}"
check "dimensions = the model's size (64) is accepted, user ignored" test "$CODE" = 200

# embeddings while generation requests share the steps
(for i in 1 2 3; do
  curl -s -o /dev/null -X POST "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model":"stories","prompt":"Once upon a time","max_tokens":48,"ignore_eos":true}' &
done; wait) &
GEN=$!
sleep 0.2
req /v1/embeddings "{\"model\":\"stories\",\"input\":[${S1}]}"
cp "$TMP/body" "$TMP/mixed.json"
wait $GEN
check "with generation in the same steps: the same vector (max |diff| ≤ 1e-5)" python3 -c "
import json,sys
a=json.load(open('$TMP/mixed.json'))['data'][0]['embedding']; b=json.load(open('$TMP/single.json'))['data'][0]['embedding']
sys.exit(0 if max(abs(x-y) for x,y in zip(a,b))<=1e-5 else 1)"

# ---- hostile rows -----------------------------------------------------------------
while IFS='|' read -r name body param; do
  [[ -z $name || $name == \#* ]] && continue
  req /v1/embeddings "$body"
  check "hostile: $name → 400" is_error 400 "$param"
done <<'EOF'
no input|{"model":"stories"}|input
empty string|{"model":"stories","input":""}|input
empty array|{"model":"stories","input":[]}|input
empty string in an array|{"model":"stories","input":["a",""]}|input[1]
empty token array|{"model":"stories","input":[[1],[]]}|input[1]
negative token id|{"model":"stories","input":[1,-3]}|input[1]
number input|{"model":"stories","input":5}|input
object input|{"model":"stories","input":{"a":1}}|input
mixed array|{"model":"stories","input":["a",[1]]}|input[1]
float token|{"model":"stories","input":[1,2.5]}|input[1]
bad encoding_format|{"model":"stories","input":"a","encoding_format":"int8"}|encoding_format
dimensions 0|{"model":"stories","input":"a","dimensions":0}|dimensions
dimensions as string|{"model":"stories","input":"a","dimensions":"64"}|dimensions
model missing|{"input":"a"}|model
not an object|["a"]|
EOF
req /v1/embeddings '{"model":"stories","input":"a","dimensions":32}'
check "hostile: dimensions ≠ the model's 64 → 400 naming the size" \
  bash -c "[[ $CODE == 400 ]] && grep -q 'have 64' '$TMP/body'"
req /v1/embeddings '{"model":"stories","input":[[1,2],[1,99999]]}'
check "hostile: token id outside the vocabulary → 400" is_error 400
MANY=$(python3 -c "print(','.join(['\"x\"']*129))")
req /v1/embeddings "{\"model\":\"stories\",\"input\":[$MANY]}"
check "hostile: 129 inputs (limit 128) → 400" is_error 400 input
LONG=$(python3 -c "print(','.join(['5']*600))")
req /v1/embeddings "{\"model\":\"stories\",\"input\":[$LONG]}"
check "hostile: an input longer than the context → 400 or 413, OpenAI-shaped" \
  bash -c "[[ $CODE == 400 || $CODE == 413 ]] && python3 -c \"import json; json.load(open('$TMP/body'))['error']['message']\""
req /v1/embeddings '{"model":"nope","input":"a"}'
check "unknown model → 404" test "$CODE" = 404
req /v1/embeddings "{\"model\":\"stories\",\"input\":[${S1}]}"
check "after the hostile rows the server still serves (same vector)" python3 -c "
import json,sys
a=json.load(open('$TMP/body'))['data'][0]['embedding']; b=json.load(open('$TMP/single.json'))['data'][0]['embedding']
sys.exit(0 if max(abs(x-y) for x,y in zip(a,b))<=1e-5 else 1)"

# ---- zoo F32 ---------------------------------------------------------------------
if [[ -n $ZOO && -f $ZOO ]]; then
  start zoo "$ZOO"
  req /v1/embeddings '{"model":"zoo","input":[[1,2,3,4,5,6,7,8,9,10],[100,50,25]]}'
  cp "$TMP/body" "$TMP/zoo.json"
  check "zoo F32: 200" test "$CODE" = 200
  check "zoo F32: 2 inputs match the NumPy reference" cmp_ref "$TMP/zoo.json" "$ZOO" 1,2,3,4,5,6,7,8,9,10 100,50,25
else
  fail "zoo-F32.gguf missing (make test-models)"
fi
# ---- last pooling: a model whose GGUF says pooling_type 3 ----------------------------
MK=$BUILD/pagoda-mkmodel
if [[ -x $MK ]] && "$MK" -o "$TMP/last.gguf" --tokenizer-from builtin --dim 64 --layers 2 --heads 4 \
     --ffn 128 --ctx 256 --type F32 --pooling 3 --seed 7 >/dev/null 2>&1; then
  start last "$TMP/last.gguf"
  req /v1/embeddings '{"model":"last","input":[[1,2,3,4,5,6,7,8],[9,10,11]]}'
  cp "$TMP/body" "$TMP/last.json"
  check "pooling_type 3: 200" test "$CODE" = 200
  check "pooling_type 3: the last token's state matches the reference's last pooling" \
    cmp_ref "$TMP/last.json" "$TMP/last.gguf" 1,2,3,4,5,6,7,8 9,10,11
  # the same vectors are not what mean pooling gives (the check above can tell them apart)
  $PYN "$ROOT/tests/ref/llama_ref.py" "$TMP/last.gguf" --seq 1,2,3,4,5,6,7,8 --pooling mean --embed "$TMP/mean.bin"
  check "pooling_type 3: differs from mean pooling (cosine < 0.99)" $PYN -c "
import json,sys,numpy as np
g=np.array(json.load(open('$TMP/last.json'))['data'][0]['embedding']); m=np.fromfile('$TMP/mean.bin','<f4')
sys.exit(0 if float(g@m) < 0.99 else 1)"
else
  skip "pagoda-mkmodel missing or failed: no last-pooling model"
fi
check "no worker restarted" bash -c "! grep -q 'restarting in' '$TMP'/gw_*.log"
if [[ $N_FAIL -gt 0 ]]; then for f in "$TMP"/gw_*.log; do echo "# --- $f"; tail -n 30 "$f" | sed 's/^/# /'; done; fi
finish
