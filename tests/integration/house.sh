#!/usr/bin/env bash
# house.sh — the bars of the house that no compiler checks (a static check
# run with the integration scripts, a few seconds of CPU; docs/ARCHITECTURE.md
# "Layers" and the style guide's one-job rules):
#
# 1. No circle of files, by include: in gateway/, worker/, common/ and
#    proto/ a module (x.c with its x.h) that includes another's header
#    depends on it, and no chain of such dependencies comes back to where
#    it started. Headers without a .c are modules of their own (a header of
#    shared types); gateway/gateway_core.h is the core's private header, of
#    the gateway module, and a module's private header x_int.h (the state
#    that x.c shares with the files it was split into, as worker/sched_int.h)
#    is of module x.
# 2. No circle of files, by call: the same over the built objects (a file
#    that uses a symbol another file defines depends on it), which also sees
#    a function declared in a third file's header. Skipped (with the reason)
#    when the objects are not built.
# 3. No .c file over 1,500 lines and no function over 150 lines (a function
#    runs from a `{` in column 0 to the next `}` in column 0). Programs'
#    mains (*_main.c) and the numerical kernels (worker/kernels/) are exempt.
#
# Usage: house.sh [SOURCE_DIR]   (default: this repository, after a check
# that runs it on a made tree with a circle, a long file and a long function)
source "$(dirname "$0")/../lib.sh"
SRC=${1:-$ROOT}
cd "$SRC" || exit 1

MAX_FILE_LINES=${HOUSE_MAX_FILE_LINES:-1500}
MAX_FN_LINES=${HOUSE_MAX_FN_LINES:-150}
DIRS=(gateway worker common proto)

sources() { # the tracked (else present) files of the four trees matching $1 (a glob)
  local pats=() d
  for d in "${DIRS[@]}"; do pats+=("$d/$1"); done
  if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
     [[ $(git -C "$SRC" rev-parse --show-toplevel) == "$(pwd -P)" ]]; then
    git ls-files "${pats[@]}"
  else
    find "${DIRS[@]}" -type f -name "$1" 2>/dev/null | sort
  fi
}

# a loop tsort reports, as "a b c" (the files on it)
loops_of() {
  tsort 2>&1 >/dev/null | grep -v 'input contains a loop' | sed 's/^tsort: //' | tr '\n' ' '
}

# ---- 0. the checks see what they should ------------------------------------
# On a made tree (not this one): a circle through three files, a file one
# line too long and a function one line too long must each fail, and the
# same tree without them must pass.
if [[ $SRC == "$ROOT" && -z ${HOUSE_SELF:-} ]]; then
  t=$TMP/made
  mkdir -p "$t/gateway" "$t/common" "$t/worker/kernels"
  printf '#include "gateway/b.h"\n' >"$t/gateway/a.c"; : >"$t/gateway/a.h"
  printf '#include "c.h"\n' >"$t/gateway/b.c"; : >"$t/gateway/b.h"
  printf '#include "gateway/a.h"\n' >"$t/gateway/c.h"
  { echo 'int f(void)'; echo '{'; for ((i = 0; i < MAX_FN_LINES - 2; i++)); do echo '    ;'; done; echo '}'; } >"$t/common/fn.c"
  for ((i = 0; i < MAX_FILE_LINES + 1; i++)); do echo ';'; done >"$t/common/big.c"
  cp "$t/common/fn.c" "$t/common/big.c" "$t/worker/kernels/" # kernels are exempt
  out=$(HOUSE_SELF=1 bash "$0" "$t" 2>&1)
  grep -q '^not ok - include circle of files: .*gateway/a.*gateway/b' <<<"$out" &&
    grep -q '^not ok - common/big.c has' <<<"$out" && ! grep -q 'kernels' <<<"$out" &&
    ! grep -q 'fn.c:2: f() is' <<<"$out" && have_circle=1 || have_circle=0
  echo '    ;' >>"$t/common/fn.c"; sed -i '2a\    ;' "$t/common/fn.c"
  out2=$(HOUSE_SELF=1 bash "$0" "$t" 2>&1)
  rm "$t/gateway/c.h" "$t/common/big.c"; : >"$t/gateway/c.h"
  sed -i '3d' "$t/common/fn.c"
  out3=$(HOUSE_SELF=1 bash "$0" "$t" 2>&1)
  if ((have_circle)) && grep -q "^not ok - common/fn.c:2: f() is $((MAX_FN_LINES + 1)) lines" <<<"$out2" &&
     ! grep -q '^not ok' <<<"$out3"; then
    ok "the checks catch a made include circle, a file and a function one line over, and pass without them"
  else
    fail "the checks on a made tree: $(printf '%s | ' "$out" "$out2" "$out3")"
  fi
fi

# ---- 1. includes ----------------------------------------------------------
# "FILE:#include "X"" lines, all files at once, into "module module" edges
mapfile -t files < <(sources '*.[ch]'; sources '*.inc')
edges=$(
  grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "${files[@]}" /dev/null |
  awk -F: '
    function module(p) { sub(/\.[^.\/]*$/, "", p); if (p == "gateway/gateway_core") return "gateway/gateway"; sub(/_int$/, "", p); return p }
    {
      f = $1; inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
      if (inc !~ /\//) { d = f; sub(/\/[^\/]*$/, "", d); inc = d "/" inc }
      if (inc !~ /^(gateway|worker|common|proto)\//) next
      m = module(f); t = module(inc)
      if (m != t) print m, t
    }' | sort -u
)
loops=$(loops_of <<<"$edges")
if [[ -z $loops ]]; then
  ok "no include circle of files in ${DIRS[*]} ($(grep -c . <<<"$edges") module dependencies)"
else
  fail "include circle of files: $loops"
fi

# ---- 2. calls --------------------------------------------------------------
obj_dir=$BUILD/obj
objs=()
if [[ $SRC == "$ROOT" ]]; then
  while IFS= read -r o; do
    src=${o#"$obj_dir"/}; src=${src%.o}
    # only objects whose source still exists (not leftovers of moved files)
    [[ -f $src.c ]] && objs+=("$o")
  done < <(for d in "${DIRS[@]}"; do find "$obj_dir/$d" -name '*.o' 2>/dev/null; done | sort)
fi
if ((${#objs[@]} == 0)); then
  skip "call circles: no objects under $obj_dir for $SRC (build first: make all)"
else
  # nm -A: "OBJ:[ADDR] TYPE SYMBOL"; defined globals and undefined uses
  cedges=$(
    nm -A -g "${objs[@]}" 2>/dev/null |
    awk -v pre="$obj_dir/" '
      { f = $1; sub(/:.*/, "", f); sub(pre, "", f); sub(/\.o$/, "", f)
        if ($2 == "U") { n++; uf[n] = f; us[n] = $3 } else def[$3] = f }
      END { for (i = 1; i <= n; i++) if ((us[i] in def) && def[us[i]] != uf[i]) print uf[i], def[us[i]] }' |
    sort -u
  )
  loops=$(loops_of <<<"$cedges")
  if [[ -z $loops ]]; then
    ok "no call circle of files in ${DIRS[*]} ($(grep -c . <<<"$cedges") file dependencies over ${#objs[@]} objects)"
  else
    fail "call circle of files: $loops"
  fi
fi

# ---- 3. sizes --------------------------------------------------------------
exempt() { [[ $1 == *_main.c || $1 == worker/kernels/* ]]; }
n_big=0 n_files=0
while IFS= read -r f; do
  exempt "$f" && continue
  n_files=$((n_files + 1))
  n=$(wc -l <"$f")
  if ((n > MAX_FILE_LINES)); then
    fail "$f has $n lines (at most $MAX_FILE_LINES: split it along its sections)"
    n_big=$((n_big + 1))
  fi
done < <(sources '*.c')
((n_big == 0)) && ok "no source file over $MAX_FILE_LINES lines ($n_files files)"

n_long=0 n_fns=0
while IFS= read -r f; do
  exempt "$f" && continue
  while IFS=$'\t' read -r start len name; do
    n_fns=$((n_fns + 1))
    if ((len > MAX_FN_LINES)); then
      fail "$f:$start: $name is $len lines (at most $MAX_FN_LINES: one job per function)"
      n_long=$((n_long + 1))
    fi
  done < <(awk '
    /^\{/ { start = NR; name = prev; next }
    /^\}/ && start { print start "\t" NR - start + 1 "\t" name; start = 0; next }
    !start && /\(/ { p = $0; sub(/\(.*/, "", p); n = split(p, w, /[ *]+/); prev = w[n] "()" }
  ' "$f")
done < <(sources '*.c')
((n_long == 0)) && ok "no function over $MAX_FN_LINES lines ($n_fns functions)"
finish
