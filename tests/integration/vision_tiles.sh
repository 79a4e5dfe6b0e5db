#!/usr/bin/env bash
# The idefics3 (SmolVLM) tiled pipeline against an independent NumPy
# reference: a w × h picture → the tile grid → the bicubic fit into
# nx·S × ny·S (aspect kept, centred on black) → the S × S tiles, plus the
# global image (align-corners bilinear stretch) → each encoded → the
# picture's (nx·ny + 1)·n rows.
#
# pagoda's side: `pagoda-run --mmproj --image PIC --dump-image OUT`
# (worker/tools/image_dump.h: the grid, every encoded image's pixels, the
# rows; --exact-matmul). The reference: tests/ref/image_ref.py (the
# preprocessing from llama.cpp's libmtmd, in NumPy float32 as llama.cpp
# computes it) and tests/ref/vision_ref.py (the float64 encoder). Per
# picture:
#   * the grid (nx, ny) equals the reference's;
#   * every tile and the global image equal the reference's pixels exactly
#     (the reference repeats llama.cpp's float32 operations in order, so
#     there is no rounding slack to allow; the log also shows how many
#     pixels a float64 evaluation of the same rule would move by one);
#   * the rows, the reference encoding its own pixels: max |pagoda − ref| ≤
#     1e-3 · max(1, max |ref|), test_vision.c's bound for the exact path.
# Pairs from pagoda-mkmodel --projector idefics3 --vis-merge 2 (56 px tiles
# of 7 px patches, 16 rows each), F32 with preproc_image_size 112 (at most
# 2 × 2 tiles) and 168 (3 × 3), F16 with 112, and one without the key (no
# tiles: the global image alone), and a gemma3 pair (the dump holds its one
# image as given). Pictures of several sizes and aspect
# ratios (below), a seeded mix of gradient, checkerboard and noise.
# Skipped without python3-numpy. Small sizes: seconds of CPU.
source "$(dirname "$0")/../lib.sh"

MK=$BUILD/pagoda-mkmodel
RUN=$BUILD/pagoda-run
PYN=/usr/bin/python3 # with numpy (deploy/install-deps.sh: python3-numpy)
[[ -x $MK && -x $RUN ]] || { fail "pagoda-mkmodel / pagoda-run not built in $BUILD"; finish; }
$PYN -c "import numpy" 2>/dev/null || { skip "python3-numpy missing: no reference check"; finish; }

# pair NAME TYPE PREPROC: text model $TMP/NAME-t.gguf, projector $TMP/NAME-p.gguf
pair() {
  "$MK" -o "$TMP/$1-t.gguf" --arch llama --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --ctx 512 \
    --vocab 512 --type "$2" --seed 40 --projector idefics3 --mmproj "$TMP/$1-p.gguf" --vis-size 56 \
    --vis-patch 7 --vis-dim 64 --vis-layers 2 --vis-heads 4 --vis-ffn 128 --vis-merge 2 --vis-preproc "$3" \
    >"$TMP/mk-$1.log" 2>&1
}
check "idefics3 pair f32, preproc 112 written" pair a f32 112
check "idefics3 pair f32, preproc 168 written" pair b f32 168
check "idefics3 pair f16, preproc 112 written" pair c f16 112
check "idefics3 pair f32, no preproc_image_size written" pair d f32 0

# The pictures (w h): 112x112 already 2 x 2 tiles (copied); 112x56 already
# 2 x 1; 100x60 scaled up into 112x68 of 112x112; 300x90 scaled down into
# 112x34 of 112x56; 40x200 into 23x112 of 56x112; 30x20 scaled up ~3.7x;
# 90x40, whose float32 width 90 · (112/90) rounds to just over 112: 3 x 1;
# 150x100 and 56x170 for the 168 grid (3 x 2, 1 x 3).
mkdir -p "$TMP/pic"
$PYN - "$TMP/pic" <<'PY'
import sys
import numpy as np
out = sys.argv[1]
sizes = [(112, 112), (112, 56), (100, 60), (300, 90), (40, 200), (30, 20), (90, 40), (150, 100), (56, 170), (56, 56)]
rng = np.random.default_rng(40)
for i, (w, h) in enumerate(sizes):
    y, x = np.mgrid[0:h, 0:w]
    grad = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 255 // max(w + h - 2, 1)], -1)
    chk = np.where((((x // 9) + (y // 9)) % 2)[..., None] == 1, [230, 40, 90], [20, 200, 160])
    noise = rng.integers(0, 256, (h, w, 3))
    # thirds: gradient on the left, checkerboard in the middle, noise on the right
    px = np.where((x < w // 3)[..., None], grad, np.where((x < 2 * w // 3)[..., None], chk, noise))
    with open("%s/%dx%d.ppm" % (out, w, h), "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h) + px.astype(np.uint8).tobytes())
PY
check "test pictures written" test -f "$TMP/pic/56x170.ppm"

# compare NAME L PIC: pagoda's dump against the reference's (L the pair's preproc_image_size)
compare() {
  local name=$1 L=$2 pic=$3 what="$1 $(basename "$3" .ppm)"
  if ! "$RUN" -m "$TMP/$name-t.gguf" --mmproj "$TMP/$name-p.gguf" --image "$pic" --dump-image "$TMP/pg.dump" \
      --exact-matmul --threads 1 >"$TMP/run.log" 2>&1; then
    fail "$what: pagoda-run --dump-image failed"; sed 's/^/# /' "$TMP/run.log"; return
  fi
  if ! $PYN "$ROOT/tests/ref/image_ref.py" "$TMP/$name-p.gguf" "$pic" --out "$TMP/ref.dump" >"$TMP/ref.log" 2>&1 ||
     ! $PYN "$ROOT/tests/ref/image_ref.py" "$TMP/$name-p.gguf" "$pic" --out "$TMP/ref64.dump" --pixels-only \
      --float64 >>"$TMP/ref.log" 2>&1; then
    fail "$what: image_ref.py failed"; sed 's/^/# /' "$TMP/ref.log"; return
  fi
  PYTHONPATH="$ROOT/tests/ref" $PYN - "$TMP/pg.dump" "$TMP/ref.dump" "$TMP/ref64.dump" "$what" "$L" "$pic" <<'PY'
import sys
import numpy as np
from image_ref import grid, read_dump
from vision_ref import read_ppm
pg, ref, r64, what = read_dump(sys.argv[1]), read_dump(sys.argv[2]), read_dump(sys.argv[3]), sys.argv[4]
h, w, _ = read_ppm(sys.argv[6]).shape
g64 = grid(w, h, ref["imgs"].shape[1], int(sys.argv[5]), np.float64)[:2]
n_fail = 0
def ok(cond, msg):
    global n_fail
    print(("ok - " if cond else "not ok - ") + what + ": " + msg)
    n_fail += not cond
n = ref["nx"] * ref["ny"] + 1
ok((pg["nx"], pg["ny"]) == (ref["nx"], ref["ny"]) and len(pg["imgs"]) == n,
   "grid %dx%d (%d images), reference %dx%d%s" % (pg["nx"], pg["ny"], len(pg["imgs"]), ref["nx"], ref["ny"],
   "" if g64 == (ref["nx"], ref["ny"]) else " (in float64 arithmetic it would be %dx%d)" % g64))
if pg["imgs"].shape == ref["imgs"].shape:
    d = np.abs(pg["imgs"].astype(int) - ref["imgs"].astype(int))
    d64 = int((r64["imgs"] != ref["imgs"]).sum())
    ok(d.max() == 0, "%d images of %dx%d px equal the reference's (max |diff| %d, %d values differ; "
       "float64 resampling would move %d values by one)" % (n, ref["imgs"].shape[1], ref["imgs"].shape[2],
                                                            d.max(), int((d > 0).sum()), d64))
else:
    ok(False, "images %s, reference %s" % (pg["imgs"].shape, ref["imgs"].shape))
if pg["rows"].shape == ref["rows"].shape:
    want = ref["rows"].astype(np.float64)
    scale = max(1.0, float(np.abs(want).max()))
    diff = float(np.abs(pg["rows"] - want).max())
    ok(np.isfinite(pg["rows"]).all() and diff <= 1e-3 * scale,
       "%d rows: max |pagoda - ref| %.3g <= 1e-3 * %.3g (relative %.2g)" % (n * ref["rows"].shape[1], diff, scale,
                                                                          diff / scale))
else:
    ok(False, "rows %s, reference %s" % (pg["rows"].shape, ref["rows"].shape))
sys.exit(1 if n_fail else 0)
PY
  [[ $? -eq 0 ]] || N_FAIL=$((N_FAIL + 1))
}

for p in 112x112 112x56 100x60 300x90 40x200 30x20 90x40; do compare a 112 "$TMP/pic/$p.ppm"; done
for p in 150x100 56x170 100x60; do compare b 168 "$TMP/pic/$p.ppm"; done
for p in 100x60 40x200; do compare c 112 "$TMP/pic/$p.ppm"; done
for p in 100x60 56x56; do compare d 0 "$TMP/pic/$p.ppm"; done

# a gemma3 pair: the dump holds the one image as given (no grid) and its rows
check "gemma3 pair written" "$MK" -o "$TMP/g-t.gguf" --arch gemma3 --dim 64 --layers 2 --heads 4 --kv-heads 2 \
  --ffn 128 --ctx 512 --vocab 512 --type f32 --seed 40 --mmproj "$TMP/g-p.gguf" --vis-size 112 --vis-patch 7 \
  --vis-dim 64 --vis-layers 2 --vis-heads 4 --vis-ffn 128 --vis-merge 4
compare g 0 "$TMP/pic/112x112.ppm"

# the dump's refusals: --dump-image without --image is a usage error
check "--dump-image without --image: usage error (exit 2)" \
  bash -c '"$1" -m "$2" --dump-image "$3" 2>/dev/null; [[ $? -eq 2 ]]' _ "$RUN" "$TMP/a-t.gguf" "$TMP/x.dump"
"$RUN" -m "$TMP/a-t.gguf" --mmproj "$TMP/a-p.gguf" --image "$TMP/pic/56x56.ppm" --dump-image "$TMP/no/such/dir/x" \
  >/dev/null 2>"$TMP/err.log"
rc=$?
check "--dump-image into a missing folder: exit $rc, the file named" \
  bash -c '[[ $1 -ne 0 ]] && grep -q "cannot create $2" "$3"' _ $rc "$TMP/no/such/dir/x" "$TMP/err.log"
finish
