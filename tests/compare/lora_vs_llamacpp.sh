#!/usr/bin/env bash
# lora_vs_llamacpp.sh — the same greedy text from pagoda and llama.cpp's
# llama-server for a base model with LoRA adapters made by pagoda-mkmodel
# (--lora-for, llama.cpp's converter layout). Not part of `make test` (CI
# has no llama.cpp): skips with a message when llama-server is absent.
#
# usage: tests/compare/lora_vs_llamacpp.sh [LLAMA_BIN_DIR]
#        (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build;
#         BASE default ../shared/models/stories260K.gguf, else the generated
#         stand-in build/test-models/tiny-llama.gguf)
#
# Adapters: rank 8 F32 (alpha = rank) and rank 64 F16 (alpha 16, so the
# scale rule alpha / rank = 0.25 matters), each at scale 1 and 0.5, and
# none; three prompts each; N tokens at temperature 0. pagoda-run runs with
# --exact-matmul (float kernels, no int8 activation rounding); llama-server
# gets the adapters with --lora and picks them per request with its "lora"
# field ([{"id", "scale"}]; "none" sends both at scale 0: an empty list
# means the adapters at their load-time scale).
set -u
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
B=${PAGODA_BUILD:-build}
N=${N:-32}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BASE=${BASE:-$root/../shared/models/stories260K.gguf}
[ -f "$BASE" ] || BASE=$root/build/test-models/tiny-llama.gguf
if [ ! -x "$LLAMA_BIN/llama-server" ]; then
    echo "SKIP: no $LLAMA_BIN/llama-server (build llama.cpp with its server to compare)"
    exit 0
fi
[ -f "$BASE" ] || { echo "SKIP: no base model ($BASE; make test-models writes the stand-in)"; exit 0; }
tmp=$(mktemp -d /tmp/pagoda-lora-cmp-XXXXXX)
port=$((20000 + RANDOM % 20000))
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
"$B/pagoda-mkmodel" --lora-for "$BASE" -o "$tmp/a8.gguf" --lora-rank 8 --seed 3 >/dev/null 2>&1 || exit 1
"$B/pagoda-mkmodel" --lora-for "$BASE" -o "$tmp/a64.gguf" --lora-rank 64 --lora-alpha 16 --type F16 --seed 4 \
    >/dev/null 2>&1 || exit 1
"$LLAMA_BIN/llama-server" -m "$BASE" --lora "$tmp/a8.gguf" --lora "$tmp/a64.gguf" -t 2 -c 1024 --port "$port" \
    --no-warmup >"$tmp/srv.log" 2>&1 &
srv=$!
for _ in $(seq 60); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
curl -sf "127.0.0.1:$port/health" >/dev/null || { echo "FAIL: llama-server did not start"; tail "$tmp/srv.log"; exit 1; }
fail=0
# name, llama-server lora list, pagoda-run flags
cases=("none|[{\"id\":0,\"scale\":0},{\"id\":1,\"scale\":0}]|" "a8@1|[{\"id\":0,\"scale\":1},{\"id\":1,\"scale\":0}]|--lora x=$tmp/a8.gguf"
       "a8@0.5|[{\"id\":0,\"scale\":0.5},{\"id\":1,\"scale\":0}]|--lora x=$tmp/a8.gguf:0.5"
       "a64@1|[{\"id\":0,\"scale\":0},{\"id\":1,\"scale\":1}]|--lora x=$tmp/a64.gguf"
       "a64@0.5|[{\"id\":0,\"scale\":0},{\"id\":1,\"scale\":0.5}]|--lora x=$tmp/a64.gguf:0.5")
for c in "${cases[@]}"; do
    IFS='|' read -r name list flags <<<"$c"
    for p in "Once upon a time" "The little dog" "Lily wanted"; do
        # shellcheck disable=SC2086
        a=$("$B/pagoda-run" -m "$BASE" $flags -p "$p" -n "$N" --temp 0 --exact-matmul 2>"$tmp/run.err") ||
            { echo "FAIL $name '$p': pagoda-run failed"; cat "$tmp/run.err"; fail=1; continue; }
        b=$(curl -s "127.0.0.1:$port/completion" -d "{\"prompt\":\"$p\",\"n_predict\":$N,\"temperature\":0,\"top_k\":1,\"lora\":$list}" |
            /usr/bin/python3 -c 'import json,sys; sys.stdout.write(json.load(sys.stdin)["content"])')
        if [ "$a" = "$b" ]; then
            echo "ok   $name '$p': $(printf %s "$a" | head -c 70)"
        else
            echo "FAIL $name '$p'"; echo "  pagoda: $a"; echo "  llama:  $b"; fail=1
        fi
    done
done
[ $fail = 0 ] && echo "PASS: pagoda == llama-server on every adapter, scale and prompt ($(basename "$BASE"))"
exit $fail
