#!/usr/bin/env bash
# run-demo.sh — what `make run` starts (after building): a pagoda-gateway on
# 127.0.0.1:8080 (PAGODA_LISTEN overrides) with one supervised local worker on
# a demo model, in the foreground until Ctrl-C.
#
# The model is ../shared/models/stories260K.gguf (a tiny real model trained on
# children's stories) when present; otherwise models/demo.gguf, generated once
# with random weights by pagoda-mkmodel (its text is gibberish, but every part
# of the server runs). PAGODA_MODEL=FILE.gguf picks another model.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${PAGODA_BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
LISTEN=${PAGODA_LISTEN:-127.0.0.1:8080}

model=${PAGODA_MODEL:-}
name=demo   # one stable name, whichever model it is, so the README examples work as pasted
if [[ -z $model && -f $ROOT/../shared/models/stories260K.gguf ]]; then
  model=$(cd "$ROOT/../shared/models" && pwd)/stories260K.gguf
fi
if [[ -z $model ]]; then
  model=$ROOT/models/demo.gguf
  if [[ ! -f $model ]]; then
    mkdir -p "$ROOT/models"
    echo "run-demo: generating $model (random weights) with pagoda-mkmodel"
    "$BUILD/pagoda-mkmodel" -o "$model" --tokenizer-from builtin --dim 128 --layers 2 --heads 4 \
      --kv-heads 2 --ffn 384 --ctx 1024 --seed 1
  fi
fi

cat <<MSG
pagoda: serving model "$name" ($model) on http://$LISTEN — Ctrl-C stops.
Web console (chat playground, operations view): http://$LISTEN/ui/
Try:
  curl http://$LISTEN/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"$name","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":60}'
  curl -N http://$LISTEN/v1/completions -H 'Content-Type: application/json' \\
    -d '{"model":"$name","prompt":"Once upon a time","max_tokens":60,"stream":true}'
  curl http://$LISTEN/health ; curl http://$LISTEN/metrics
MSG
exec "$BUILD/pagoda-gateway" --listen "$LISTEN" --model "$name=$model" "$@"
