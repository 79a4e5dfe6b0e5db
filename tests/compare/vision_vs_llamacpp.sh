#!/usr/bin/env bash
# vision_vs_llamacpp.sh — the same greedy text from pagoda and llama.cpp for
# each supported projector's text model + mmproj pair and three images. Not part of `make
# test` (CI has no llama.cpp): skips with a message when llama-mtmd-cli is
# absent.
#
# usage: tests/compare/vision_vs_llamacpp.sh [LLAMA_BIN_DIR]
#        (default /work/ext/llama.cpp/build/bin; PAGODA_BUILD default build)
#
# pagoda-mkmodel writes, for each PROJS and TYPES entry, a random-weight
# text model (dim 64, 2 layers, the builtin tokenizer with the projector's
# image tokens) and its projector (--mmproj, 7 px patches):
#   gemma3   --arch gemma3, the Gemma turn template tests/compare/gemma_turns.jinja,
#            112 px images, 4x4 pooling: 16 rows per image;
#   idefics3 --arch llama (SmolLM2's), a ChatML template (pagoda renders no
#            SmolVLM "User:" family) tests/compare/chatml_turns.jinja, 56 px tiles, pixel shuffle 2x2
#            (16 rows per tile), preproc_image_size 112: the 112 px images
#            are 2 x 2 tiles + the global image (5 x 16 rows), the 100 px
#            ones the same after the bicubic scaling up to 112;
# tests/compare/vision_images.py writes the three PPM images. For each
# pair and image, `pagoda-run --mmproj --image -p PROMPT -n N --temp 0` and
# `llama-mtmd-cli -m --mmproj --image -p PROMPT -n N --temp 0` must print
# the same text on stdout (surrounding whitespace trimmed). pagoda-run runs
# with --exact-matmul (float kernels, no int8 activation rounding).
#
# The tie rule: a random-weight model's greedy text can hinge on a near-tie
# between two logits, and llama-mtmd-cli prints no probabilities, so the
# rule is about its own repeatability. llama-mtmd-cli runs REPEAT times
# (default 3) on each case:
#   UNSTABLE  its texts differ among themselves: the case has no single
#             answer to hold pagoda to; reported with each distinct text,
#             counted neither as a pass nor as a failure;
#   PASS      its texts all agree and pagoda-run's equals them;
#   FAIL      its texts all agree and pagoda-run's differs (or a program
#             failed).
# An UNSTABLE case says which kind it is: "prefixes" when every text is the
# start of the longest one, which is what output lost at exit looks like
# (llama-mtmd-cli prints through common/log.cpp's asynchronous logger,
# whose singleton is never destroyed, so "logs may be lost if not flushed
# before the program exits", as its comment says; under load the text's
# tail is), or "diverging" (a real near-tie); and whether pagoda-run's text
# equals the longest, extends it (all runs lost their tail) or differs from
# it. Neither changes the count.
# The last line: "PASS p/n, UNSTABLE u, FAIL f", and one such line per
# projector and type before it; the exit status is 1 when f > 0.
set -u
LLAMA_BIN=${1:-/work/ext/llama.cpp/build/bin}
B=${PAGODA_BUILD:-build}
N=${N:-24}
REPEAT=${REPEAT:-3}
PROMPT=${PROMPT:-describe the picture}
TYPES=${TYPES:-F32 F16}
PROJS=${PROJS:-gemma3 idefics3}
if [ ! -x "$LLAMA_BIN/llama-mtmd-cli" ]; then
    echo "SKIP: no $LLAMA_BIN/llama-mtmd-cli (build llama.cpp with its tools to compare)"
    exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/pagoda-vision-cmp-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/112" "$tmp/100"
/usr/bin/python3 "$here/vision_images.py" "$tmp/112" 112 || exit 1
/usr/bin/python3 "$here/vision_images.py" "$tmp/100" 100 || exit 1
fail=0
n_ok=0
n_all=0
n_unst=0
n_fail=0
declare -A c_ok c_unst c_fail
# trim FILE: the text without surrounding whitespace and without the idefics3
# image tokens' text: a random model generates them (CONTROL tokens),
# llama-mtmd-cli prints them and pagoda-run, like llama-server, does not
trim() { /usr/bin/python3 -c 'import re, sys; t = open(sys.argv[1], "rb").read().replace(b"\0", b"").decode("utf-8", "replace"); sys.stdout.write(re.sub(r"<row_[0-9]+_col_[0-9]+>|<global-img>|<fake_token_around_image>|<image>", "", t).strip())' "$1"; }
for pj in $PROJS; do
for t in $TYPES; do
    case $pj in
        gemma3) pargs=(--arch gemma3 --chat-template "$here/gemma_turns.jinja" --vis-size 112 --vis-merge 4)
                sizes="112" ;;
        idefics3) pargs=(--arch llama --chat-template "$here/chatml_turns.jinja" --projector idefics3
                         --vis-size 56 --vis-merge 2 --vis-preproc 112)
                  sizes="112 100" ;;
        *) echo "unknown projector $pj"; exit 1 ;;
    esac
    "$B/pagoda-mkmodel" -o "$tmp/text-$t.gguf" "${pargs[@]}" --dim 64 --layers 2 --heads 4 --kv-heads 2 \
        --ffn 128 --ctx 512 --vocab 512 --type "$t" --seed 40 --untied --mute-special --logit-scale 8 \
        --mmproj "$tmp/mmproj-$t.gguf" --vis-patch 7 --vis-dim 64 --vis-layers 2 \
        --vis-heads 4 --vis-ffn 128 > "$tmp/mk.log" 2>&1 || { cat "$tmp/mk.log"; exit 1; }
    key="$pj $t"
    c_ok[$key]=0 c_unst[$key]=0 c_fail[$key]=0
    for sz in $sizes; do
    for img in gradient checker noise; do
        n_all=$((n_all + 1))
        name="$pj $t ${sz}px $img"
        verdict=FAIL
        if ! "$B/pagoda-run" -m "$tmp/text-$t.gguf" --mmproj "$tmp/mmproj-$t.gguf" --image "$tmp/$sz/$img.ppm" \
            -p "$PROMPT" -n "$N" --temp 0 --threads 2 --exact-matmul > "$tmp/pagoda.txt" 2> "$tmp/pagoda.err"; then
            echo "FAIL $name: pagoda-run failed"; cat "$tmp/pagoda.err"
        else
            a=$(trim "$tmp/pagoda.txt")
            # llama-mtmd-cli's stdout is the continuation (its logs go to
            # stderr, a newline comes first); REPEAT runs (the tie rule above)
            texts=()
            for r in $(seq 1 "$REPEAT"); do
                if ! "$LLAMA_BIN/llama-mtmd-cli" -m "$tmp/text-$t.gguf" --mmproj "$tmp/mmproj-$t.gguf" \
                    --image "$tmp/$sz/$img.ppm" -p "$PROMPT" -n "$N" --temp 0 -t 2 -c 512 --jinja --no-warmup \
                    > "$tmp/llama.txt" 2> "$tmp/llama.err"; then
                    echo "FAIL $name: llama-mtmd-cli failed (run $r)"; tail -5 "$tmp/llama.err"; texts=(); break
                fi
                texts+=("$(trim "$tmp/llama.txt")")
            done
            if [ ${#texts[@]} -eq "$REPEAT" ]; then
                distinct=$(printf '%s\0' "${texts[@]}" | sort -zu | tr -cd '\0' | wc -c)
                b=${texts[0]}
                if [ "$distinct" -gt 1 ]; then
                    verdict=UNSTABLE
                    long=""
                    for u in "${texts[@]}"; do [ ${#u} -gt ${#long} ] && long=$u; done
                    kind=prefixes
                    for u in "${texts[@]}"; do [ "${long#"$u"}" = "$long" ] && [ -n "$u" ] && kind=diverging; done
                    same="differs from"
                    [ "${a#"$long"}" != "$a" ] && same="extends" # the longest is the start of pagoda's
                    [ "$a" = "$long" ] && same="equals"
                    echo "UNSTABLE $name: llama-mtmd-cli gave $distinct texts in $REPEAT runs ($kind; pagoda $same the longest)"
                    echo "  pagoda: $(printf %s "$a" | head -c 200)"
                    printf '%s\0' "${texts[@]}" | sort -zu | while IFS= read -r -d '' u; do
                        echo "  llama:  $(printf %s "$u" | head -c 200)"
                    done
                elif [ "$a" = "$b" ]; then
                    verdict=PASS
                    echo "ok   $name: $(printf %s "$a" | head -c 80)"
                else
                    echo "FAIL $name (llama-mtmd-cli the same in $REPEAT runs)"
                    echo "  pagoda: $(printf %s "$a" | head -c 200)"
                    echo "  llama:  $(printf %s "$b" | head -c 200)"
                fi
            fi
        fi
        case $verdict in
            PASS) n_ok=$((n_ok + 1)); c_ok[$key]=$((c_ok[$key] + 1)) ;;
            UNSTABLE) n_unst=$((n_unst + 1)); c_unst[$key]=$((c_unst[$key] + 1)) ;;
            *) n_fail=$((n_fail + 1)); c_fail[$key]=$((c_fail[$key] + 1)); fail=1 ;;
        esac
    done
    done
    echo "$key: PASS ${c_ok[$key]}, UNSTABLE ${c_unst[$key]}, FAIL ${c_fail[$key]}"
done
done
echo "PASS $n_ok/$n_all, UNSTABLE $n_unst, FAIL $n_fail (pagoda == llama-mtmd-cli; REPEAT=$REPEAT)"
exit $fail
