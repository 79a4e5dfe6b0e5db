#!/usr/bin/env bash
# runtime-packages.sh BINARY... — prints, one per line, the Debian packages
# that own the shared libraries the binaries load (what a runtime image must
# install). Fails when a library belongs to no package (e.g. a locally built
# one), so the image cannot silently miss it.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: runtime-packages.sh BINARY..." >&2; exit 2; }

libs=$(ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
missing=0
owners=()
for lib in $libs; do
  real=$(readlink -f "$lib")
  # With merged /usr, dpkg may know the file under /lib or /usr/lib only.
  owner=$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || \
          dpkg -S "$lib" 2>/dev/null || true)
  if [[ -z $owner ]]; then
    echo "runtime-packages: no package owns $lib" >&2
    missing=1
    continue
  fi
  owners+=("${owner%%:*}")
done
[[ ${#owners[@]} -eq 0 ]] || printf '%s\n' "${owners[@]}" | sort -u
exit "$missing"
