#!/usr/bin/env bash
# Installs the Debian packages pagoda builds and tests with, when any is missing.
# Idempotent and quiet when everything is there. Needs root (or sudo) only when
# something must be installed.
set -euo pipefail

PKGS=(
  build-essential pkg-config clang
  libzmq3-dev libmsgpack-dev libopenblas-dev libmicrohttpd-dev libjansson-dev
  libpcre2-dev libcmocka-dev libyaml-dev libcyaml-dev libcurl4-openssl-dev libsodium-dev
  libsqlite3-dev libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev
  python3 python3-numpy curl iproute2 procps
)
# Extras needed only by tests and benchmarks (reference implementations, chart, validators).
if [[ "${PAGODA_DEPS:-}" != "build" ]]; then
  PKGS+=(gnuplot-nox prometheus python3-sentencepiece libclang-rt-14-dev sqlite3 chromium)
fi

missing=()
# Node.js may come from another repository that bundles npm; only ask Debian when absent.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
