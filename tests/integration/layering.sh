#!/usr/bin/env bash
# layering.sh — the source layering holds (not an integration test: a static
# check run with them, well under a second).
#
# 1. Includes: every quoted #include in a source file may name only the
#    folders its own folder may use (the table below, docs/ARCHITECTURE.md
#    "Layers"). Lower layers never include higher ones, so no include runs
#    upward or in a circle between folders. A folder not in the table (a new
#    subfolder) gets the rules of its nearest listed parent.
# 2. Kernels see only the ggml type header of the text layer
#    (common/text/ggml_type.h), not the GGUF reader or the tokenizer.
# 3. pagoda-gateway defines no symbol of the worker library (no model
#    loading, no kernels) and needs no OpenBLAS or OpenMP.
# (No circle of files inside a folder, and the size bars: house.sh.)
source "$(dirname "$0")/../lib.sh"
cd "$ROOT"

# folder -> the folders its files may include from (besides itself)
declare -A ALLOW=(
  [common]=""
  [common/grammar]="common"
  [common/image]="common"
  [common/text]="common common/grammar"
  [proto]="common common/text"
  [worker/kernels]="common common/text"
  [worker/model]="common common/text worker/kernels"
  [worker/grammar]="common common/grammar common/text"
  [worker]="common common/grammar common/text proto worker/kernels worker/model worker/grammar"
  [worker/tools]="common common/grammar common/image common/text proto worker worker/kernels worker/model worker/grammar"
  [gateway]="common common/grammar common/image common/text proto"
)

# rules_of FOLDER: the nearest listed folder at or above it
rules_of() {
  local d=$1
  while [[ -z ${ALLOW[$d]+x} && $d == */* ]]; do d=${d%/*}; done
  [[ -n ${ALLOW[$d]+x} ]] && echo "$d"
}

n_bad=0 n_inc=0
while IFS= read -r f; do
  dir=$(dirname "$f")
  rules=$(rules_of "$dir")
  if [[ -z $rules ]]; then
    fail "$f: folder $dir has no layering rule (add it to tests/integration/layering.sh)"
    n_bad=$((n_bad + 1)); continue
  fi
  while IFS= read -r inc; do
    n_inc=$((n_inc + 1))
    idir=$(dirname "$inc")
    [[ $idir == . ]] && continue            # same-folder include by bare name
    [[ $idir == "$dir" || $idir == "$rules" ]] && continue
    allowed=0
    for a in ${ALLOW[$rules]}; do [[ $idir == "$a" ]] && allowed=1; done
    if [[ $rules == worker/kernels && $idir == common/text && $inc != common/text/ggml_type.h ]]; then
      allowed=0
    fi
    if ((!allowed)); then
      fail "$f includes $inc: $dir may use only ${ALLOW[$rules]:-nothing else}$([[ $rules == worker/kernels ]] && echo " (of common/text: ggml_type.h)")"
      n_bad=$((n_bad + 1))
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(git ls-files 'common/*.[ch]' 'proto/*.[ch]' 'worker/*.[ch]' 'gateway/*.[ch]' 2>/dev/null ||
         find common proto worker gateway -name '*.[ch]')
((n_bad == 0)) && ok "includes follow the layering ($n_inc includes checked)"

gw=$BUILD/pagoda-gateway
# the worker library's objects (the .a itself is an intermediate make may
# delete); only those whose source still exists, not leftovers of moved files
wobj=()
while IFS= read -r o; do
  src=${o#"$BUILD"/obj/}; src=${src%.o}.c
  [[ -f $src && $src != *_main.c ]] && wobj+=("$o")
done < <(find "$BUILD/obj/worker" -name '*.o' 2>/dev/null | sort)
if [[ ! -x $gw || ${#wobj[@]} -eq 0 ]]; then
  fail "$gw or the worker objects under $BUILD/obj/worker missing: build first (make all)"
else
  mine=$(nm --defined-only -g "${wobj[@]}" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u)
  theirs=$(nm --defined-only "$gw" | awk 'NF == 3 {print $3}' | sort -u)
  both=$(comm -12 <(echo "$mine") <(echo "$theirs"))
  if [[ -z $both ]]; then
    ok "pagoda-gateway defines none of the worker library's $(echo "$mine" | wc -l) symbols (${#wobj[@]} objects)"
  else
    fail "pagoda-gateway links worker code: $(echo "$both" | head -5 | tr '\n' ' ')"
  fi
  heavy=$(nm -u "$gw" | grep -E ' (cblas_|GOMP_|omp_)' | head -3 | awk '{print $2}' | tr '\n' ' ')
  if [[ -z $heavy ]]; then ok "pagoda-gateway uses no OpenBLAS or OpenMP symbol"
  else fail "pagoda-gateway uses $heavy"; fi
fi
exit $((N_FAIL > 0))
