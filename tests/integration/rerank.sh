#!/usr/bin/env bash
# POST /v1/rerank (and /rerank), /v1/score against real processes (gateway +
# supervised workers) on two random-weight rerankers written by pagoda-mkmodel:
#   * "q3": qwen3 with the Qwen3-Reranker layout (cls.output = 2 rows, "yes"
#     and "no"; last token; softmax) and a rerank template
#     (tokenizer.chat_template.rerank with {query} / {document});
#   * "cls": llama with a classification head (cls.weight + bias, tanh,
#     cls.output 1 row + bias; last token, docs/API.md), no template: [BOS] query document.
# Scores are checked against the independent NumPy forward pass
# (tests/ref/llama_ref.py --rank) on the pair's token ids — built here from
# /tokenize of the prompt the rule above gives — with tolerance |diff| ≤ 1e-4
# for q3's probabilities and ≤ 1e-3·max(1, |ref|) for cls's raw logits (the
# worker runs --exact-matmul --kv-type f32: float32 rounding only). Also:
# results sorted by score (ties by index), top_n, return_documents, usage;
# /v1/score in text_2's order with the same scores; a document alone = the same
# document in a batch and beside generation requests; hostile rows → 400 in
# the OpenAI error shape; a model without a rank head → 400; keys like other
# routes; two clients nobody here wrote, pointed at the gateway: the cohere-ai
# SDK (rerank_sdk.mjs) and LangChain JS's CohereRerank (rerank_langchain.mjs).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
[[ -x $GW && -x $MK ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
PYN=/usr/bin/python3 # with numpy (deploy/install-deps.sh: python3-numpy)
$PYN -c "import numpy" 2>/dev/null || { skip "python3-numpy missing: no reference check"; finish; }
SMALL=$(small_model)

TEMPLATE='<|im_start|>system
Judge whether the Document meets the requirements based on the Query. Answer "yes" or "no".<|im_end|>
<|im_start|>user
<Query>: {query}
<Document>: {document}<|im_end|>
<|im_start|>assistant
'
printf '%s' "$TEMPLATE" >"$TMP/rerank.tmpl"
"$MK" -o "$TMP/q3.gguf" --arch qwen3 --tokenizer-from builtin --dim 64 --layers 2 --heads 4 --kv-heads 2 \
  --ffn 128 --ctx 512 --type F32 --rank 1 --rerank-template "$TMP/rerank.tmpl" --seed 11 >/dev/null 2>&1 \
  || { fail "pagoda-mkmodel --rank (qwen3)"; finish; }
"$MK" -o "$TMP/cls.gguf" --arch llama --tokenizer-from builtin --dim 64 --layers 2 --heads 4 \
  --ffn 128 --ctx 512 --type F32 --rank 1 --seed 12 >/dev/null 2>&1 \
  || { fail "pagoda-mkmodel --rank (llama)"; finish; }

py() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
req() { # PATH BODY [KEY] → status in $CODE, body in $TMP/body
  CODE=$(curl -s -o "$TMP/body" -w '%{http_code}' -X POST "$URL$1" -H 'Content-Type: application/json' \
    -H "Authorization: Bearer ${3:-secret-rr}" -d "$2")
}
is_error() { # status [param]
  [[ $CODE == "$1" ]] && py "set(j['error'])=={'message','type','param','code'} and j['error']['type']=='invalid_request_error' ${2:+and j['error']['param']=='$2'}" <"$TMP/body"
}

hp=$(free_port); zp=$(free_port)
"$GW" --hash-key rr:normal --secret secret-rr | grep -v '^#' >"$TMP/keys.txt"
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$hp --worker-endpoint tcp://127.0.0.1:$zp --keys "$TMP/keys.txt" \
  --model "q3=$TMP/q3.gguf" --model "cls=$TMP/cls.gguf" --model "plain=$SMALL" \
  --max-seqs 4 --max-batch-tokens 64 --log-level debug \
  --worker-arg=--exact-matmul --worker-arg=--kv-type=f32
URL=http://127.0.0.1:$hp
ready() { curl -sf "$URL/health" | py "all(j['models'][m]['replicas']==1 for m in ('q3','cls','plain'))"; }
check "gateway up, three local workers registered" wait_for 60 ready

QUERY="Once upon a time, there was a little girl"
DOCS=("the girl went to the park" "a dog ran after a ball" "once upon a time there was a girl" "The end.")
DOCS_JSON=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${DOCS[@]}")

tok() { # MODEL TEXT ADD_SPECIAL → comma-separated ids on stdout
  local body
  body=$(python3 -c 'import json,sys; print(json.dumps({"model":sys.argv[1],"prompt":sys.argv[2],"add_special":sys.argv[3]=="1"}))' "$1" "$2" "$3")
  curl -s -X POST "$URL/tokenize" -H 'Content-Type: application/json' -H 'Authorization: Bearer secret-rr' -d "$body" |
    python3 -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['tokens'])))"
}
# the pair's ids as the rule says: q3 fills the template, tokenized whole without
# BOS; cls has no template: [BOS] query then document (the builtin tokenizer adds
# no EOS or SEP)
pair_ids() { # MODEL DOC
  if [[ $1 == q3 ]]; then
    local t=${TEMPLATE//\{query\}/$QUERY}
    tok q3 "${t//\{document\}/$2}" 0
  else
    echo "$(tok cls "$QUERY" 1),$(tok cls "$2" 0)"
  fi
}

# ref MODEL RESPONSE TOL KIND: the response's scores vs the reference's output 0
ref() {
  local model=$1 resp=$2 tol=$3 kind=$4 args=() d # d: not check()'s description
  if [[ ! -f $TMP/ref_$model.bin ]]; then # the pairs' ids and the reference, once per model
    for d in "${DOCS[@]}"; do
      local ids; ids=$(pair_ids "$model" "$d")
      args+=(--seq "$ids")
    done
    printf '%s\n' "${args[@]}" >"$TMP/ref_$model.args"
    $PYN "$ROOT/tests/ref/llama_ref.py" "$TMP/$model.gguf" "${args[@]}" --rank "$TMP/ref_$model.bin" || return 1
  fi
  mapfile -t args <"$TMP/ref_$model.args"
  $PYN - "$resp" "$TMP/ref_$model.bin" "$tol" "$kind" "${#DOCS[@]}" "${args[@]}" <<'EOF'
import json, sys, numpy as np
j = json.load(open(sys.argv[1])); tol = float(sys.argv[3]); kind = sys.argv[4]; n = int(sys.argv[5])
seqs = [s for s in sys.argv[6:] if s != "--seq"]
ref = np.fromfile(sys.argv[2], dtype="<f4").astype(np.float64).reshape(n, -1)[:, 0]
if kind == "rerank":
    got = np.zeros(n); seen = set()
    for r in j["results"]:
        got[r["index"]] = r["relevance_score"]; seen.add(r["index"])
    assert seen == set(range(n)), seen
else:
    got = np.array([d["score"] for d in j["data"]])
diff = np.abs(got - ref); lim = tol * np.maximum(1.0, np.abs(ref))
ntok = sum(len(s.split(",")) for s in seqs)
print("# scores %s ref %s max |diff| %.2e; prompt_tokens %d (reference pairs %d)"
      % (np.round(got, 5), np.round(ref, 5), diff.max(), j["usage"]["prompt_tokens"], ntok))
sys.exit(0 if np.all(diff <= lim) and j["usage"]["prompt_tokens"] == ntok else 1)
EOF
}

for M in q3 cls; do
  TOL=1e-3; [[ $M == q3 ]] && TOL=1e-4
  req /v1/rerank "{\"model\":\"$M\",\"query\":\"$QUERY\",\"documents\":$DOCS_JSON}"
  cp "$TMP/body" "$TMP/$M.json"
  check "$M: /v1/rerank 200, llama-server's shape (model, object list, usage, results[index, relevance_score])" \
    bash -c "[[ $CODE == 200 ]] && python3 -c \"
import json,sys; j=json.load(open('$TMP/$M.json'))
ok = j['model']=='$M' and j['object']=='list' and len(j['results'])==4 and set(j['usage'])>={'prompt_tokens','total_tokens'}
ok = ok and all(set(r)=={'index','relevance_score'} for r in j['results'])
sys.exit(0 if ok else 1)\""
  check "$M: scores match the NumPy reference (tolerance $TOL), usage = Σ pair tokens" ref "$M" "$TMP/$M.json" "$TOL" rerank
  check "$M: results sorted by relevance_score, highest first, ties by index" python3 -c "
import json,sys; r=json.load(open('$TMP/$M.json'))['results']
sys.exit(0 if all((a['relevance_score'],-a['index'])>=(b['relevance_score'],-b['index']) for a,b in zip(r,r[1:])) else 1)"
done
check "q3: the documents' scores differ (the last token sees the document)" python3 -c "
import json,sys; r=json.load(open('$TMP/q3.json'))['results']
sys.exit(0 if len({x['relevance_score'] for x in r})==4 and all(0<x['relevance_score']<1 for x in r) else 1)"
check "cls: the documents' scores differ (the head reads the last token, which sees the document)" python3 -c "
import json,sys; r=json.load(open('$TMP/cls.json'))['results']
sys.exit(0 if len({x['relevance_score'] for x in r})==4 else 1)"

# top_n, return_documents, object documents, the /rerank alias
DOCS_OBJ=$(python3 -c 'import json,sys; print(json.dumps([{"text":d} for d in sys.argv[1:]]))' "${DOCS[@]}")
req /rerank "{\"model\":\"q3\",\"query\":\"$QUERY\",\"documents\":$DOCS_OBJ,\"top_n\":2,\"return_documents\":true}"
cp "$TMP/body" "$TMP/top2.json"
check "/rerank, {text} documents, top_n 2, return_documents: the 2 best, each with its text" python3 -c "
import json,sys
a=json.load(open('$TMP/top2.json'))['results']; full=json.load(open('$TMP/q3.json'))['results']; docs=$DOCS_JSON
ok = [r['index'] for r in a]==[r['index'] for r in full[:2]] and all(r['document']=={'text':docs[r['index']]} for r in a)
ok = ok and all(abs(x['relevance_score']-y['relevance_score'])<=1e-6 for x,y in zip(a,full))
sys.exit(0 if ok else 1)"
req /v1/rerank "{\"model\":\"q3\",\"query\":\"$QUERY\",\"documents\":$DOCS_JSON,\"top_n\":99}"
check "top_n above the number of documents returns them all" py "len(j['results'])==4" <"$TMP/body"

# /v1/score: vLLM's shape, in text_2's order, the same scores
req /v1/score "{\"model\":\"q3\",\"text_1\":\"$QUERY\",\"text_2\":$DOCS_JSON}"
cp "$TMP/body" "$TMP/score.json"
check "/v1/score: 200, data[index, object score, score] in text_2 order, the same scores as /v1/rerank" python3 -c "
import json,sys
s=json.load(open('$TMP/score.json')); r={x['index']:x['relevance_score'] for x in json.load(open('$TMP/q3.json'))['results']}
ok = s['object']=='list' and s['model']=='q3' and [d['index'] for d in s['data']]==[0,1,2,3]
ok = ok and all(d['object']=='score' and abs(d['score']-r[d['index']])<=1e-6 for d in s['data'])
sys.exit(0 if ok else 1)"
check "/v1/score: matches the NumPy reference" ref q3 "$TMP/score.json" 1e-4 score
req /score "{\"model\":\"q3\",\"text_1\":[\"$QUERY\"],\"text_2\":\"${DOCS[2]}\"}"
check "/score: text_1 a list of one, text_2 a string → one score, = document 2's" python3 -c "
import json,sys
s=json.load(open('$TMP/body'))['data']; r={x['index']:x['relevance_score'] for x in json.load(open('$TMP/q3.json'))['results']}
sys.exit(0 if len(s)==1 and abs(s[0]['score']-r[2])<=1e-6 else 1)"

# one document alone, and beside generation in the same steps
req /v1/rerank "{\"model\":\"q3\",\"query\":\"$QUERY\",\"documents\":[\"${DOCS[1]}\"]}"
check "a document alone = the same document in a batch (≤ 1e-6)" python3 -c "
import json,sys
a=json.load(open('$TMP/body'))['results'][0]['relevance_score']; r={x['index']:x['relevance_score'] for x in json.load(open('$TMP/q3.json'))['results']}
sys.exit(0 if abs(a-r[1])<=1e-6 else 1)"
(for i in 1 2 3; do
  curl -s -o /dev/null -X POST "$URL/v1/completions" -H 'Content-Type: application/json' -H 'Authorization: Bearer secret-rr' \
    -d '{"model":"q3","prompt":"Once upon a time","max_tokens":48,"ignore_eos":true}' &
done; wait) &
GEN=$!
req /v1/rerank "{\"model\":\"q3\",\"query\":\"$QUERY\",\"documents\":$DOCS_JSON}"
cp "$TMP/body" "$TMP/mixed.json"
wait $GEN
check "beside generation requests: the same scores (≤ 1e-6)" python3 -c "
import json,sys
a={x['index']:x['relevance_score'] for x in json.load(open('$TMP/mixed.json'))['results']}
b={x['index']:x['relevance_score'] for x in json.load(open('$TMP/q3.json'))['results']}
sys.exit(0 if a.keys()==b.keys() and all(abs(a[k]-b[k])<=1e-6 for k in a) else 1)"

# ---- hostile rows -----------------------------------------------------------------
while IFS='|' read -r path name body param; do
  [[ -z $path || $path == \#* ]] && continue
  req "$path" "$body"
  check "hostile $path: $name → 400" is_error 400 "$param"
done <<'EOF'
/v1/rerank|no query|{"model":"q3","documents":["a"]}|query
/v1/rerank|query a number|{"model":"q3","query":5,"documents":["a"]}|query
/v1/rerank|no documents|{"model":"q3","query":"a"}|documents
/v1/rerank|empty documents|{"model":"q3","query":"a","documents":[]}|documents
/v1/rerank|documents a string|{"model":"q3","query":"a","documents":"a"}|documents
/v1/rerank|a number document|{"model":"q3","query":"a","documents":["a",5]}|documents[1]
/v1/rerank|an object without text|{"model":"q3","query":"a","documents":[{"title":"a"}]}|documents[0]
/v1/rerank|text not a string|{"model":"q3","query":"a","documents":[{"text":1}]}|documents[0].text
/v1/rerank|top_n 0|{"model":"q3","query":"a","documents":["a"],"top_n":0}|top_n
/v1/rerank|top_n a string|{"model":"q3","query":"a","documents":["a"],"top_n":"2"}|top_n
/v1/rerank|return_documents a string|{"model":"q3","query":"a","documents":["a"],"return_documents":"yes"}|return_documents
/v1/rerank|model missing|{"query":"a","documents":["a"]}|model
/v1/rerank|not an object|["a"]|
/v1/score|no text_1|{"model":"q3","text_2":["a"]}|text_1
/v1/score|text_1 of two (N-to-N)|{"model":"q3","text_1":["a","b"],"text_2":["a","b"]}|text_1
/v1/score|no text_2|{"model":"q3","text_1":"a"}|text_2
/v1/score|empty text_2|{"model":"q3","text_1":"a","text_2":[]}|text_2
/v1/score|a number in text_2|{"model":"q3","text_1":"a","text_2":["a",1]}|text_2[1]
EOF
MANY=$(python3 -c "print(','.join(['\"x\"']*129))")
req /v1/rerank "{\"model\":\"q3\",\"query\":\"a\",\"documents\":[$MANY]}"
check "hostile: 129 documents (limit 128) → 400" is_error 400 documents
req /v1/rerank "{\"model\":\"plain\",\"query\":\"a\",\"documents\":[\"b\"]}"
check "a model without a rank head → 400 saying it cannot rank" \
  bash -c "[[ $CODE == 400 ]] && grep -q 'cannot rank' '$TMP/body'"
LONG=$(python3 -c "print(' '.join(['once upon a time']*300))")
req /v1/rerank "{\"model\":\"q3\",\"query\":\"a\",\"documents\":[\"b\",\"$LONG\"]}"
check "a pair longer than the context → 400 context_length_exceeded" \
  bash -c "[[ $CODE == 400 ]] && python3 -c \"import json,sys; sys.exit(0 if json.load(open('$TMP/body'))['error']['code']=='context_length_exceeded' else 1)\""
req /v1/rerank '{"model":"nope","query":"a","documents":["b"]}'
check "unknown model → 404" test "$CODE" = 404
req /v1/rerank '{"model":"q3","query":"a","documents":["b"]}' wrong-key
check "a wrong API key → 401, OpenAI-shaped" bash -c "[[ $CODE == 401 ]] && grep -q invalid_api_key '$TMP/body'"
req /v2/rerank '{"model":"q3","query":"a","documents":["b"]}'
check "/v2/rerank (Cohere v2's path) serves the same shape" py "len(j['results'])==1" <"$TMP/body"

# ---- the cohere-ai SDK's rerank pointed at pagoda -------------------------------------
if command -v node >/dev/null && bash "$ROOT/tests/js/ensure.sh"; then
  URL=$URL KEY=secret-rr MODEL=q3 QUERY="$QUERY" DOCS="$DOCS_JSON" SCORES="$TMP/q3.json" \
    run_node_tap 120 "$ROOT/tests/integration/rerank_sdk.mjs"
  URL=$URL KEY=secret-rr MODEL=q3 QUERY="$QUERY" DOCS="$DOCS_JSON" SCORES="$TMP/q3.json" \
    run_node_tap 120 "$ROOT/tests/integration/rerank_langchain.mjs"
else
  skip "node/npm or the npm packages unavailable: no cohere-ai SDK or LangChain CohereRerank test"
fi
req /v1/rerank "{\"model\":\"q3\",\"query\":\"$QUERY\",\"documents\":[\"${DOCS[1]}\"]}"
check "after the hostile rows the server still serves (same score)" python3 -c "
import json,sys
a=json.load(open('$TMP/body'))['results'][0]['relevance_score']; r={x['index']:x['relevance_score'] for x in json.load(open('$TMP/q3.json'))['results']}
sys.exit(0 if abs(a-r[1])<=1e-6 else 1)"
check "no worker restarted" bash -c "! grep -q 'restarting in' '$TMP/gw.log'"
if [[ $N_FAIL -gt 0 ]]; then echo "# --- gw.log"; tail -n 40 "$TMP/gw.log" | sed 's/^/# /'; fi
finish
