#!/usr/bin/env bash
# LoRA logits at real model size against the NumPy reference (issue #39):
# rank-8 (F32, alpha 8) and rank-64 (F16, alpha 16) adapters from
# `pagoda-mkmodel --lora-for` (llama.cpp's converter layout) on the 110M
# Q8_0 base ($BUILD/models/m110-q8_0.gguf, made here when absent with
# tests/bench/lora_bench.sh's shape) and the 1.1B Q4_K_M base
# ($BUILD/models/w1b-q4_k_m.gguf, tests/large/w1b.sh makes it) only with
# LORA_REF_1B=1: its float64 reference holds 1.1B weights in 8.8 GB and takes
# ~10-20 minutes on 2 cores, too long for CI's test-large (skipped when
# absent or when less than LORA_REF_MIN_GB (16) GiB of memory is available). Each base: five cases
# (none, a8 at 1 and 0.5, a64 at 1 and 0.5), `pagoda-run --tokens --logits
# --exact-matmul` against tests/ref/llama_ref.py --lora; tolerance and
# checks in tests/large/lora_ref.py (max |pagoda - ref| <= 1e-4 x max(1,
# max |ref|), and each adapter moves the reference by >= 100x that).
# Run by `make test-large` (TESTS=lora_ref).
source "$(dirname "$0")/../lib.sh"

RUN=$BUILD/pagoda-run
MK=$BUILD/pagoda-mkmodel
[[ -x $RUN && -x $MK ]] || { fail "pagoda-run / pagoda-mkmodel not built in $BUILD"; finish; }
TOK=$SHARED/models/stories260K.gguf
[[ -f $TOK ]] || TOK=builtin
M110=$BUILD/models/m110-q8_0.gguf
if [[ ! -f $M110 ]]; then
  mkdir -p "$BUILD/models"
  "$MK" -o "$M110.tmp" --type Q8_0 --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000 \
    --ctx 2048 --seed 1 --tokenizer-from "$TOK" >"$TMP/mk.log" 2>&1 && mv "$M110.tmp" "$M110" ||
    { rm -f "$M110.tmp"; fail "pagoda-mkmodel made the 110M Q8_0 base"; tail -3 "$TMP/mk.log"; finish; }
fi
bases=("$M110")
W1B=$BUILD/models/w1b-q4_k_m.gguf
avail=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
if [[ ${LORA_REF_1B:-0} != 1 ]]; then
  skip "1.1B: not run (LORA_REF_1B=1 runs it: ~10-20 min of float64 NumPy on 2 cores)"
elif [[ ! -f $W1B ]]; then
  skip "1.1B: no $W1B (tests/large/w1b.sh makes it)"
elif ((avail < ${LORA_REF_MIN_GB:-16})); then
  skip "1.1B: $avail GiB available, the float64 reference needs ${LORA_REF_MIN_GB:-16}"
else
  bases+=("$W1B")
fi
for base in "${bases[@]}"; do
  "$MK" --lora-for "$base" -o "$TMP/a8.gguf" --lora-rank 8 --seed 3 >/dev/null 2>&1 &&
    "$MK" --lora-for "$base" -o "$TMP/a64.gguf" --lora-rank 64 --lora-alpha 16 --type F16 --seed 4 >/dev/null 2>&1 ||
    { fail "$(basename "$base"): pagoda-mkmodel --lora-for"; continue; }
  /usr/bin/python3 "$ROOT/tests/large/lora_ref.py" --run "$RUN" --base "$base" --a8 "$TMP/a8.gguf" --a64 "$TMP/a64.gguf" \
    --tmp "$TMP" --threads "${THREADS:-2}" || N_FAIL=$((N_FAIL + 1))
done
finish
