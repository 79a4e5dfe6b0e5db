#!/usr/bin/env bash
# step_curve.sh — builds tests/bench/step_curve/step_curve.c against a build's libraries
# and runs it: a forward step's cost by its rows (docs/BATCHING.md, "Can both
# halves of the interference bar hold at once?"). Not part of `make test`.
#
# usage: tests/bench/step_curve.sh [MODEL.gguf] [D:P,...] [REPS] [CTX] [POS]
#   decode rows at position CTX (300), prompt rows from POS (400);
#   default model $BUILD/models/w1b-q4_k_m.gguf, default rows
#   8:0,8:4,8:8,8:12,8:16,8:24,8:40,8:56,0:512; AB=1 times every step in one
#   region and with a region per phase, alternately. PAGODA_BUILD: the build
#   (default build/, which must be built).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PAGODA_BUILD:-$ROOT/build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
PKGS="libzmq msgpack openblas libmicrohttpd jansson libpcre2-8 yaml-0.1 libcyaml libcurl libsodium sqlite3
  libpng libjpeg libwebp libwebpdemux libgif"
BIN=$BUILD/step_curve
cd "$ROOT"
gcc -std=c11 -D_GNU_SOURCE -O2 -fopenmp -pthread -I. $(pkg-config --cflags $PKGS) tests/bench/step_curve/step_curve.c \
  -o "$BIN" "$BUILD/libpagoda_worker.a" "$BUILD/libpagoda_proto.a" "$BUILD/libpagoda_text.a" \
  "$BUILD/libpagoda_common.a" $(pkg-config --libs $PKGS) -lm
# the worker's bounded OpenMP spin (worker/wait_policy.h)
GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000} "$BIN" "${1:-$BUILD/models/w1b-q4_k_m.gguf}" \
  "${2:-8:0,8:4,8:8,8:12,8:16,8:24,8:40,8:56,0:512}" "${3:-15}" "${4:-300}" "${5:-400}"
