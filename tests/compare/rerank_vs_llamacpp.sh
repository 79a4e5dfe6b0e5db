#!/usr/bin/env bash
# rerank_vs_llamacpp.sh — pagoda's /v1/rerank against llama.cpp's llama-server
# (--reranking, i.e. --embedding --pooling rank) on the same rank models made
# by pagoda-mkmodel --rank 1. Not part of `make test` (CI has no llama.cpp):
# skips with a message when llama-server is absent.
#
# usage: tests/compare/rerank_vs_llamacpp.sh [LLAMA_BIN_DIR]
#        (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# Models (each served by one pagoda gateway + worker with its default kernels
# and by one llama-server, 2 threads each):
#   q3-f32, q3-q8: qwen3 in the Qwen3-Reranker layout (cls.output = the "yes"
#     and "no" rows, last token, softmax → P(yes)) with the rerank template
#     llama.cpp's converter writes for Qwen3-Reranker (conversion/qwen.py),
#     weights F32 and Q8_0;
#   cls-f32: llama with a classification head (cls → tanh → cls.output, first
#     token, raw logit) and no template — llama.cpp builds classification
#     heads only for its BERT-like architectures (llm_build_* load cls.* for
#     bert, modern-bert, jina-bert, nomic-bert, neo-bert; qwen3 cls.output), so
#     llama-server refuses this file: a SKIP line says so.
# Per model and query (QUERIES × the same 6 documents):
#   Cohere shape  {"query", "documents": [strings], "top_n": 4,
#                  "return_documents": true} to both;
#   Jina shape    {"query", "documents": [{"text": …}], "top_n": 4} to pagoda,
#                  compared with llama-server's answer to string documents
#                  (llama-server reads only strings: its answer to objects is
#                  printed as a NOTE, not compared);
# and checks: the same indices in the same order (a swap of two results whose
# llama-server scores are within TOL of each other counts as a TIE, not a
# failure), |relevance_score difference| ≤ TOL for every result, the same
# result fields apart from "document" (pagoda: {"text"} exactly the
# document, under return_documents only; llama-server never returns it),
# and usage.prompt_tokens equal (the same pair tokens).
# TOL (default 1e-4 for F32, 5e-3 for Q8_0, on P(yes) ∈ (0,1) and on the
# classification logit; docs/API.md says why). PAGODA_FLAGS (default none:
# pagoda's default kernels) are passed to pagoda's worker, e.g.
# PAGODA_FLAGS=--exact-matmul to see the size of the 8-bit rounding.
# Output: one line per check, then per model "PASS n/m" or "FAIL n/m".
source "$(dirname "$0")/../lib.sh"
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
if [[ ! -x $LLAMA_BIN/llama-server ]]; then
  echo "SKIP: no $LLAMA_BIN/llama-server (build llama.cpp with its server to compare)"
  exit 0
fi
[[ -x $GW && -x $MK && -x $BUILD/pagoda-worker ]] || { echo "FAIL: pagoda not built in $BUILD"; exit 1; }

# the template conversion/qwen.py writes for Qwen3-Reranker (tokenizer.chat_template.rerank)
printf '%s' '<|im_start|>system
Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>
<|im_start|>user
<Instruct>: Given a web search query, retrieve relevant passages that answer the query
<Query>: {query}
<Document>: {document}<|im_end|>
<|im_start|>assistant
<think>

</think>

' >"$TMP/q3.tmpl"
common=(--tokenizer-from builtin --dim 64 --layers 2 --heads 4 --ffn 128 --ctx 512 --rank 1)
"$MK" -o "$TMP/q3-f32.gguf" --arch qwen3 --kv-heads 2 "${common[@]}" --type F32 --rerank-template "$TMP/q3.tmpl" \
  --seed 11 >/dev/null 2>&1 || { echo "FAIL: pagoda-mkmodel --rank 1 (qwen3 F32)"; exit 1; }
"$MK" -o "$TMP/q3-q8.gguf" --arch qwen3 --kv-heads 2 "${common[@]}" --type Q8_0 --rerank-template "$TMP/q3.tmpl" \
  --seed 13 >/dev/null 2>&1 || { echo "FAIL: pagoda-mkmodel --rank 1 (qwen3 Q8_0)"; exit 1; }
"$MK" -o "$TMP/cls-f32.gguf" --arch llama "${common[@]}" --type F32 --seed 12 >/dev/null 2>&1 \
  || { echo "FAIL: pagoda-mkmodel --rank 1 (llama)"; exit 1; }

QUERIES=${QUERIES:-"Once upon a time, there was a little girl|What did the dog do in the park?|The end."}
DOCS='["the girl went to the park","a dog ran after a ball in the park","once upon a time there was a girl named Lily","The end.","She was very happy and said thank you to her mom.","The sun was hot, so they sat under a big tree."]'
total_fail=0
summary=
wargs=() # PAGODA_FLAGS (e.g. --exact-matmul) go to pagoda's worker
for f in ${PAGODA_FLAGS:-}; do wargs+=("--worker-arg=$f"); done

for M in q3-f32 q3-q8 cls-f32; do
  TOL=${TOL:-}
  tol=${TOL:-1e-4}; [[ -z $TOL && $M == *q8 ]] && tol=5e-3
  port=$(free_port)
  spawn "$TMP/srv-$M.log" "$LLAMA_BIN/llama-server" -m "$TMP/$M.gguf" --reranking -t 2 -c 2048 -np 2 \
    --host 127.0.0.1 --port "$port" --no-warmup
  srv=$SPAWNED
  LS=http://127.0.0.1:$port
  started=0
  for _ in $(seq 600); do
    curl -sf "$LS/health" >/dev/null && { started=1; break; }
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.5
  done
  if ((!started)); then
    why=$(grep -m1 -iE 'error|failed' "$TMP/srv-$M.log")
    echo "SKIP $M: llama-server did not load it: ${why:-see its log}"
    summary+="$M: SKIP (llama-server refuses the file)"$'\n'
    kill "$srv" 2>/dev/null
    continue
  fi
  hp=$(free_port) zp=$(free_port)
  spawn "$TMP/gw-$M.log" "$GW" --listen 127.0.0.1:$hp --worker-endpoint tcp://127.0.0.1:$zp \
    --model "$M=$TMP/$M.gguf" --threads 2 "${wargs[@]}"
  gw=$SPAWNED
  PG=http://127.0.0.1:$hp
  wait_for 120 bash -c "curl -sf $PG/health | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)[\"models\"][\"$M\"][\"replicas\"]==1 else 1)'" \
    || { echo "FAIL $M: pagoda gateway/worker did not start"; tail -5 "$TMP/gw-$M.log"; exit 1; }
  python3 - "$M" "$PG" "$LS" "$tol" "$DOCS" "$QUERIES" >"$TMP/out-$M.txt" <<'EOF'
import json, sys, urllib.request, urllib.error
model, pg, ls, tol, docs, queries = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6].split("|")
n_ok = n_all = n_tie = 0
worst = 0.0
def post(url, body):
    rq = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=300) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
def check(what, cond):
    global n_ok, n_all
    n_all += 1; n_ok += bool(cond)
    print(("ok - " if cond else "not ok - ") + f"{model}: {what}")
def compare(label, p, l, top_n, want_docs):
    global worst, n_tie
    pr, lr = p["results"], l["results"]
    check(f"{label}: {len(pr)} results, llama-server {len(lr)}", len(pr) == len(lr) == min(top_n, len(docs)))
    # llama-server's scores of every document (its full answer, below) decide ties
    order_ok, ties = True, 0
    for a, b in zip(pr, lr):
        if a["index"] != b["index"]:
            sa = full_ls.get(a["index"]); sb = full_ls.get(b["index"])
            if sa is not None and sb is not None and abs(sa - sb) <= tol: ties += 1
            else: order_ok = False
    n_tie += ties
    check(f"{label}: the same order {[r['index'] for r in pr]} vs {[r['index'] for r in lr]}"
          + (f" ({ties} tie swaps)" if ties else ""), order_ok)
    d = max(abs(a["relevance_score"] - full_ls[a["index"]]) for a in pr)
    worst = max(worst, d)
    check(f"{label}: max |score diff| {d:.2e} <= {tol:g}", d <= tol)
    pf = {k for r in pr for k in r} - {"document"}; lf = {k for r in lr for k in r}
    check(f"{label}: result fields {sorted(pf)} (+document) = llama-server's {sorted(lf)}", pf == lf == {"index", "relevance_score"})
    if want_docs:
        check(f"{label}: each document = {{\"text\": the document}}", all(r.get("document") == {"text": docs[r["index"]]} for r in pr))
    else:
        check(f"{label}: no document without return_documents", all("document" not in r for r in pr))
    check(f"{label}: model {p['model']!r}, object list", p["model"] == model and p["object"] == "list")
for q in queries:
    # every document, both sides: scores by index, and the pair tokens
    sp, p_all = post(pg + "/v1/rerank", {"model": model, "query": q, "documents": docs})
    sl, l_all = post(ls + "/v1/rerank", {"model": model, "query": q, "documents": docs})
    if sp != 200 or sl != 200:
        check(f"q={q!r}: both answer 200 (pagoda {sp}, llama-server {sl}: {str(l_all)[:200]})", False); continue
    full_ls = {r["index"]: r["relevance_score"] for r in l_all["results"]}
    print(f"# {model} q={q[:24]!r}: llama-server {[(r['index'], round(r['relevance_score'], 5)) for r in l_all['results']]}")
    print(f"# {model} q={q[:24]!r}: pagoda       {[(r['index'], round(r['relevance_score'], 5)) for r in p_all['results']]}")
    compare(f"q={q[:24]!r} all documents", p_all, l_all, len(docs), False)
    check(f"q={q[:24]!r}: usage.prompt_tokens {p_all['usage']['prompt_tokens']} = llama-server's {l_all['usage']['prompt_tokens']}",
          p_all["usage"]["prompt_tokens"] == l_all["usage"]["prompt_tokens"])
    # Cohere shape: top_n + return_documents (llama-server ignores return_documents)
    body = {"model": model, "query": q, "documents": docs, "top_n": 4, "return_documents": True}
    sp, p = post(pg + "/v1/rerank", body); sl, l = post(ls + "/v1/rerank", body)
    if sp == 200 and sl == 200:
        compare(f"q={q[:24]!r} Cohere top_n 4 return_documents", p, l, 4, True)
    else:
        check(f"Cohere shape: 200s (pagoda {sp}, llama-server {sl})", False)
    # Cohere v2's path on pagoda (llama-server serves /v1/rerank only)
    sp, p = post(pg + "/v2/rerank", {"model": model, "query": q, "documents": docs, "top_n": 4})
    if sp == 200:
        compare(f"q={q[:24]!r} pagoda /v2/rerank top_n 4", p, l, 4, False)
    else:
        check(f"/v2/rerank: 200 (got {sp})", False)
    # Jina shape: documents as {"text"} objects; llama-server reads strings only
    jdocs = [{"text": d} for d in docs]
    sp, p = post(pg + "/v1/rerank", {"model": model, "query": q, "documents": jdocs, "top_n": 4})
    sl, l = post(ls + "/v1/rerank", {"model": model, "query": q, "documents": docs, "top_n": 4})
    if sp == 200 and sl == 200:
        compare(f"q={q[:24]!r} Jina {{text}} documents top_n 4 (llama-server: strings)", p, l, 4, False)
    else:
        check(f"Jina shape: 200s (pagoda {sp}, llama-server {sl})", False)
sl, l = post(ls + "/v1/rerank", {"model": model, "query": queries[0], "documents": [{"text": d} for d in docs]})
print(f"# NOTE {model}: llama-server's answer to {{\"text\"}} object documents: HTTP {sl} {json.dumps(l)[:160]}")
print(f"# {model}: max |score diff| {worst:.3e} (tolerance {tol:g}), {n_tie} tie swaps")
print(f"{'PASS' if n_ok == n_all else 'FAIL'} {model}: {n_ok}/{n_all}")
sys.exit(0 if n_ok == n_all else 1)
EOF
  rc=$?
  cat "$TMP/out-$M.txt"
  ((rc)) && total_fail=1
  summary+="$(tail -n 1 "$TMP/out-$M.txt") ($(grep -m1 '^# .*max |score diff|' "$TMP/out-$M.txt" | sed 's/^# [^:]*: //'))"$'\n'
  kill "$srv" "$gw" 2>/dev/null
  wait "$srv" "$gw" 2>/dev/null
done
echo "# ---- summary"
printf '%s' "$summary"
exit $total_fail
