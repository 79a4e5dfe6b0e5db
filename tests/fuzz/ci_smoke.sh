#!/usr/bin/env bash
# ci_smoke.sh — the fuzz smoke CI runs: build, check coverage of parsers, run.
#
#   bash tests/fuzz/ci_smoke.sh                 # FUZZ_SECONDS=30 per target
#   FUZZ_SECONDS=300 bash tests/fuzz/ci_smoke.sh
#
# 1. `make fuzz` builds every tests/fuzz/fuzz_*.c with clang (libFuzzer + ASan + UBSan).
# 2. Every parser has a target: each function declared in a header of common/, proto/,
#    worker/, gateway/ or tests/bench/ with a (const uint8_t *, size_t) parameter pair —
#    the house signature of a parser of untrusted bytes — and each parser of untrusted
#    *text* in TEXT_PARSERS must be called by some tests/fuzz/fuzz_*.c (EXEMPT lists
#    the exceptions, with the reason).
# 3. tests/fuzz/smoke.sh runs each target for FUZZ_SECONDS on a scratch copy of its seed
#    corpus tests/fuzz/corpus/<name>/ (every seed, e.g. a past crash, runs first) and
#    prints "ok - fuzz_<name>: N executions in Ss, cov: C, no crash".
# On a crash, leak or timeout the input is kept in build/fuzz/fuzz-artifacts/ and the
# headers the target includes are printed as the owners (the module whose unit test
# gets the regression case; the input itself goes into tests/fuzz/corpus/<name>/).
# Exit status: 0 when all held.
set -uo pipefail
cd "$(dirname "$0")/../.."
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
BUILD=build/fuzz
n_fail=0 n_ok=0
ok()   { echo "ok - $*"; n_ok=$((n_ok + 1)); }
fail() { echo "not ok - $*"; n_fail=$((n_fail + 1)); }

# parsers of untrusted text (const char *, size_t): GGUF metadata and request content
TEXT_PARSERS="common/text/chat_template.h:chat_template_new common/text/tokenizer.h:tokenizer_encode common/text/detok.h:detok_push common/text/tool_stream.h:tool_stream_feed"
# functions with a parser's signature that need no target of their own
declare -A EXEMPT=(
  [mpread_init]="a bounds-checked msgpack cursor; every use is inside proto_decode_body (fuzz_proto)"
  [prefix_key_bytes]="a hash, not a parser: it reads every byte the same way, whatever they hold (an adapter file's content key)"
  [sse_reader_feed]="pagoda-bench's SSE framing, reached only through bench_stream_feed (fuzz_bench_stream)"
  [qkpack_pack_panel]="a kernel, not a parser: repacks weight blocks whose tensor sizes the GGUF loader checked (fuzz_gguf)"
  [qkpack_panel_run]="a kernel, not a parser: reads panels qkpack_pack_panel wrote at load (prefetch hint next, n_next)"
  [qkpack_wide_run]="a kernel, not a parser: reads 8 panels qkpack_pack_panel wrote at load (pstride: their stride)"
)

# --- 1. build ------------------------------------------------------------------------------
if ! command -v clang >/dev/null; then
  fail "clang not found: cannot build the fuzz targets (deploy/install-deps.sh installs it)"
  exit 1
fi
log=$(mktemp "${TMPDIR:-/tmp}/pagoda-fuzz-build.XXXXXX")
trap 'rm -f "$log"' EXIT
t0=$SECONDS
if make -j"${FUZZ_JOBS:-2}" fuzz >"$log" 2>&1; then
  ok "make fuzz: $(ls "$BUILD"/fuzz_* 2>/dev/null | wc -l) targets built in $((SECONDS - t0)) s"
else
  fail "make fuzz failed"
  tail -n 30 "$log" | sed 's/^/#   /'
  exit 1
fi

# --- 2. every parser has a target ----------------------------------------------------------------
while IFS=: read -r hdr fn; do
  [[ -n $fn ]] || continue
  if [[ -n ${EXEMPT[$fn]:-} ]]; then
    ok "parser $fn ($hdr): exempt — ${EXEMPT[$fn]}"
    continue
  fi
  users=$(grep -lwE "$fn" tests/fuzz/fuzz_*.c 2>/dev/null | xargs -r -n1 basename | sed 's/\.c$//' | tr '\n' ' ')
  if [[ -n $users ]]; then
    ok "parser $fn ($hdr) is fuzzed by ${users% }"
  else
    fail "parser $fn ($hdr) has no fuzz target: add tests/fuzz/fuzz_<name>.c calling it"
  fi
done < <({ python3 - common/*.h proto/*.h worker/*.h worker/*/*.h gateway/*.h tests/bench/*.h <<'PY'
import re, sys
for h in sys.argv[1:]:
    src = re.sub(r"/\*.*?\*/|//[^\n]*", "", open(h, encoding="utf-8").read(), flags=re.S)
    for m in re.finditer(r"\b([a-z_][a-z0-9_]*)\s*\(([^;{}()]*)\)[^;{}]*;", src):
        if re.search(r"const\s+uint8_t\s*\*\s*\w*\s*,\s*size_t", m.group(2)):
            print("%s:%s" % (h, m.group(1)))
PY
          tr ' ' '\n' <<<"$TEXT_PARSERS"; } | sort -u)

# --- 3. run ------------------------------------------------------------------------------------------
out=$(mktemp "${TMPDIR:-/tmp}/pagoda-fuzz-run.XXXXXX")
trap 'rm -f "$log" "$out"' EXIT
bash tests/fuzz/smoke.sh "$BUILD" "$FUZZ_SECONDS" | tee "$out"
rc=${PIPESTATUS[0]}
while read -r _ _ _ target _; do
  target=${target%:}
  src=tests/fuzz/$target.c
  owners=$(grep -oE '^#include "[a-z_/]+\.h"' "$src" 2>/dev/null | grep -oE '[a-z_/]+\.h' | tr '\n' ' ')
  echo "# $target crashed: owner module(s) ${owners:-?}; the input is in $BUILD/fuzz-artifacts/"
  echo "#   → add it to tests/fuzz/corpus/${target#fuzz_}/ and as a case in that module's unit test"
done < <(grep '^not ok - fuzz_' "$out")
[[ $rc -ne 0 ]] && n_fail=$((n_fail + 1))
total=$(grep -oE '^ok - fuzz_[a-z_]+: [0-9]+ executions' "$out" | awk '{s += $4} END {print s + 0}')
echo "# $(grep -c '^ok - fuzz_' "$out") targets, $total executions in all (${FUZZ_SECONDS} s each)"
n_ok=$((n_ok + $(grep -c '^ok - fuzz_' "$out")))
n_fail=$((n_fail + $(grep -c '^not ok - fuzz_' "$out")))
echo "fuzz: $n_ok passed, $n_fail failed"
exit $((n_fail > 0))
