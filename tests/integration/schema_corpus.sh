#!/usr/bin/env bash
# The JSON Schemas zod 4, the AI SDK, the openai SDK and LangChain JS really
# write for everyday zod types (tests/integration/schema_corpus.mjs makes them
# with the npm packages), each compiled by a real gateway and enforced by a
# real worker on a random-weight model (pagoda-mkmodel, the tokenizer of
# stories260K or of its stand-in): SEEDS seeds per schema at temperature 1, every output checked
# by ajv + ajv-formats (and zod). When python3 has pydantic 2, pydantic
# models' schemas too, their outputs checked by pydantic as well. Schemas pagoda refuses must be the ones
# docs/API.md lists, refused with their JSON pointer; the same schemas as
# non-strict tools with a forced call are compiled relaxed (logged). About 10 s (4 seeds × 115 schemas).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
TOK=$(small_model) || finish
need_node_packages "schema corpus"
RAND=$TMP/random.gguf
check "pagoda-mkmodel makes a random-weight model" "$BUILD/pagoda-mkmodel" -o "$RAND" --dim 64 --layers 2 \
  --heads 4 --kv-heads 2 --ffn 128 --ctx 1024 --type F32 --seed 7 --tokenizer-from "$TOK"

P=$(free_port); Z=$(free_port)
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$P --worker-endpoint tcp://127.0.0.1:$Z --model "rand=$RAND" \
  --max-seqs 24
ready() { curl -sf "http://127.0.0.1:$P/health" | grep -q '"replicas":1'; }
check "gateway: worker registered" wait_for 30 ready

# pydantic v2 models' schemas too, when pydantic is installed (not a dependency)
PYD=$ROOT/tests/integration/schema_corpus_pydantic.py
export PYDANTIC_SCHEMAS= PYDANTIC_SCRIPT=$PYD
if python3 "$PYD" schemas >"$TMP/pydantic.json" 2>/dev/null; then
  PYDANTIC_SCHEMAS=$TMP/pydantic.json
else
  skip "pydantic v2 models (python3 has no pydantic)"
fi
URL_RAND=http://127.0.0.1:$P SEEDS=${SCHEMA_SEEDS:-4} run_node_tap 600 "$ROOT/tests/integration/schema_corpus.mjs"
check "the worker logged the relaxed keyword of the non-strict tool with its pointer" \
  grep -q "schema keywords relaxed.*tool put: /properties/v/allOf" "$TMP/gw.log"
check "no worker restarted during the run" bash -c "! grep -q 'restarting in' '$TMP/gw.log'"
if [[ $N_FAIL -gt 0 ]]; then tail -n 30 "$TMP/gw.log" | sed 's/^/# /'; fi
finish
