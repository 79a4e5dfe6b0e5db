#!/usr/bin/env python3
"""NumPy reference of the idefics3 (SmolVLM) image preprocessing and of a
whole picture's rows, written from llama.cpp's libmtmd (tools/mtmd:
mtmd_image_preprocessor_idefics3, img_tool's calc_size_preserved_ratio,
resize with PAD_CEIL, resize_bicubic, resize_bilinear, crop), which follows
Hugging Face's Idefics3ImageProcessor for the grid; independently of
pagoda's common/image and common/text/image_run.c. Each image is then
encoded by vision_ref.py's float64 encoder.

    image_ref.py MMPROJ.gguf IMAGE.ppm --out DUMP [--pixels-only]

DUMP gets pagoda-run --dump-image's format (worker/tools/image_dump.h): the
grid, every image the encoder takes (tiles row-major, then the global
image) and their rows (float32). --pixels-only writes zero rows (no
encoding).

The rule, for S = clip.vision.image_size and L =
clip.vision.preproc_image_size (no key or 0: no tiles, the global image
alone):

1. Grid. s = min(L/w, L/h); each side w·s, h·s rounded up to a multiple of
   S: the refined size (rw, rh) = (nx·S, ny·S). Float32 arithmetic, as
   llama.cpp (a side that lands on a multiple of S in float64 but not in
   float32 would tile differently).
2. Refined image. The picture scaled into rw × rh keeping its aspect ratio:
   scale t = min(rw/w, rh/h), the scaled size (min(ceil(w·t), rw),
   min(ceil(h·t), rh)), placed at ((rw − nw) // 2, (rh − nh) // 2) on black.
   A picture already rw × rh is copied. The scaling is llama.cpp's bicubic:
   output (i, j) samples the source at (x, y) = (j·w/nw, i·h/nh) — no
   half-pixel shift — as the cubic through the four samples at x−1 … x+2
   (Lagrange interpolation: p(t) = b + a1 t + a2 t² + a3 t³ with, for
   differences d0 = a − b, d2 = c − b, d3 = d − b, a1 = −d0/3 + d2 − d3/6,
   a2 = (d0 + d2)/2, a3 = −d0/6 − d2/2 + d3/6; not Keys' a = −0.5
   Catmull-Rom), first along each of the four source rows y−1 … y+2, then
   down the column; indices clamped to the picture's edges; the result
   rounded half away from zero and clamped to 0 … 255.
3. Tiles. The refined image cut into S × S tiles, row-major.
4. Global image. The picture stretched to S × S (aspect not kept) with
   align-corners bilinear: output x samples x·(w − 1)/(S − 1), the two
   neighbours blended by the fraction, rows then columns, truncated to
   uint8. A picture already S × S is copied.

Rounding: llama.cpp computes the positions and the blends in float32 (the
cubic's coefficients in double, stored as float32); this reference does
the same operations in the same order with NumPy float32, so it gives the
same pixels whenever the C side evaluates in plain IEEE float32 (x86-64
SSE, no fused multiply-add: -std=c11 turns contraction off). Evaluated in
float64 instead, a few pixels move by one where a value sits on a rounding
or truncation boundary (--float64: the resampling in float64), and the grid
itself can change: 40 × 200 with L = 112 is 0.56 · 200 = 112.00000000000001
in float64, 3 tiles high instead of float32's 2 (grid(..., f=np.float64)).

Hugging Face's own processor differs in the resampling (PIL's LANCZOS) and
in the global image (a resize to the longest edge S, not a stretch);
pagoda follows llama.cpp, so this reference does too.
"""
import argparse
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_ref import GGUF  # noqa: E402
from vision_ref import encode, read_ppm  # noqa: E402

F = np.float32
MAGIC = b"PGIMGDMP"


def grid(w, h, S, L, f=F):
    """(nx, ny, rw, rh) of a w x h picture; (0, 0, 0, 0) without tiles."""
    if L <= 0:
        return 0, 0, 0, 0
    scale = min(f(L) / f(w), f(L) / f(h))
    tw, th = f(w) * scale, f(h) * scale
    rw = int(math.ceil(f(tw) / f(S))) * S
    rh = int(math.ceil(f(th) / f(S))) * S
    return rw // S, rh // S, rw, rh


def bicubic(img, nw, nh, f=F):
    """llama.cpp's resize_bicubic of (h, w, 3) uint8 into (nh, nw, 3)."""
    h, w, _ = img.shape
    tx, ty = f(w) / f(nw), f(h) / f(nh)
    px = (tx * np.arange(nw, dtype=f)).astype(f)
    py = (ty * np.arange(nh, dtype=f)).astype(f)
    x = px.astype(np.int64)                       # truncation, px >= 0
    y = py.astype(np.int64)
    dx = (px - x.astype(f)).astype(f)              # (nw,)
    dy = (py - y.astype(f)).astype(f)              # (nh,)
    src = img.astype(f)

    def cubic(a, b, c, d, t):
        # the coefficients in double from float differences, stored as float
        d0 = (a - b).astype(np.float64)
        d2 = (c - b).astype(np.float64)
        d3 = (d - b).astype(np.float64)
        a1 = ((-1.0 / 3) * d0 + d2 - (1.0 / 6) * d3).astype(f)
        a2 = ((1.0 / 2) * d0 + (1.0 / 2) * d2).astype(f)
        a3 = ((-1.0 / 6) * d0 - (1.0 / 2) * d2 + (1.0 / 6) * d3).astype(f)
        return (b + a1 * t + a2 * t * t + a3 * t * t * t).astype(f)

    cols = [np.clip(x + k, 0, w - 1) for k in (-1, 0, 1, 2)]   # (nw,) each
    rows = [np.clip(y + k, 0, h - 1) for k in (-1, 0, 1, 2)]   # (nh,) each
    t = dx[None, :, None]
    C = []
    for r in rows:  # along each of the four source rows: (nh, nw, 3)
        s = src[r]
        C.append(cubic(s[:, cols[0]], s[:, cols[1]], s[:, cols[2]], s[:, cols[3]], t))
    v = cubic(C[0], C[1], C[2], C[3], dy[:, None, None])
    v = v.astype(np.float64)  # std::round: half away from zero (v ± 0.5 exact in double, not in float)
    v = np.where(v >= 0, np.floor(v + 0.5), np.ceil(v - 0.5))
    return np.clip(v, 0, 255).astype(np.uint8)


def bilinear(img, nw, nh, f=F):
    """llama.cpp's resize_bilinear (align corners, truncated) into (nh, nw, 3)."""
    h, w, _ = img.shape
    xr = f(w - 1) / f(nw - 1) if nw > 1 else f(0)
    yr = f(h - 1) / f(nh - 1) if nh > 1 else f(0)
    px = (np.arange(nw, dtype=f) * f(xr)).astype(f)
    py = (np.arange(nh, dtype=f) * f(yr)).astype(f)
    x0 = np.minimum(px.astype(np.int64), w - 1)
    y0 = np.minimum(py.astype(np.int64), h - 1)
    x1 = np.minimum(x0 + 1, w - 1)
    y1 = np.minimum(y0 + 1, h - 1)
    xf = (px - x0.astype(f)).astype(f)[None, :, None]
    yf = (py - y0.astype(f)).astype(f)[:, None, None]
    src = img.astype(f)
    lerp = lambda s, e, t: (s + (e - s) * t).astype(f)  # noqa: E731
    top = lerp(src[y0][:, x0], src[y0][:, x1], xf)
    bot = lerp(src[y1][:, x0], src[y1][:, x1], xf)
    return lerp(top, bot, yf).astype(np.int64).astype(np.uint8)   # truncation toward zero


def fit_pad(img, tw, th, resize, f=F):
    """img scaled into tw x th keeping its aspect ratio, centred on black
    (llama.cpp's resize with PAD_CEIL); a copy when already tw x th."""
    h, w, _ = img.shape
    if (w, h) == (tw, th):
        return img.copy()
    scale = min(f(tw) / f(w), f(th) / f(h))
    nw = min(int(math.ceil(f(w) * scale)), tw)
    nh = min(int(math.ceil(f(h) * scale)), th)
    out = np.zeros((th, tw, 3), dtype=np.uint8)
    ox, oy = (tw - nw) // 2, (th - nh) // 2
    out[oy:oy + nh, ox:ox + nw] = resize(img, nw, nh, f)
    return out


def stretch(img, S, f=F):
    h, w, _ = img.shape
    return img.copy() if (w, h) == (S, S) else bilinear(img, S, S, f)


def preprocess(img, S, L, f=F):
    """The images the encoder takes for one picture: (nx, ny, [tiles row-major..., global]);
    f the resampling's float type (the grid is always float32's)."""
    h, w, _ = img.shape
    nx, ny, rw, rh = grid(w, h, S, L)
    out = []
    if nx:
        ref = fit_pad(img, rw, rh, bicubic, f)
        for ty in range(ny):
            for tx in range(nx):
                out.append(ref[ty * S:(ty + 1) * S, tx * S:(tx + 1) * S].copy())
    out.append(stretch(img, S, f))
    return nx, ny, out


def write_dump(path, nx, ny, imgs, rows, n_tok, dim):
    side = imgs[0].shape[0]
    with open(path, "wb") as fo:
        fo.write(MAGIC + struct.pack("<7I", 1, nx, ny, len(imgs), side, n_tok, dim))
        for im in imgs:
            fo.write(np.ascontiguousarray(im, dtype=np.uint8).tobytes())
        fo.write(np.asarray(rows, dtype="<f4").tobytes())


def read_dump(path):
    """{nx, ny, imgs (n_img, side, side, 3) uint8, rows (n_img, n_tok, dim) float32}"""
    data = open(path, "rb").read()
    if data[:8] != MAGIC:
        raise ValueError("%s: not a pagoda image dump" % path)
    ver, nx, ny, n, side, n_tok, dim = struct.unpack_from("<7I", data, 8)
    if ver != 1:
        raise ValueError("%s: dump version %d" % (path, ver))
    npx = n * side * side * 3
    if len(data) != 36 + npx + 4 * n * n_tok * dim:
        raise ValueError("%s: %d bytes, the header says %d" % (path, len(data), 36 + npx + 4 * n * n_tok * dim))
    imgs = np.frombuffer(data, np.uint8, npx, 36).reshape(n, side, side, 3)
    rows = np.frombuffer(data, "<f4", n * n_tok * dim, 36 + npx).reshape(n, n_tok, dim)
    return {"nx": nx, "ny": ny, "imgs": imgs, "rows": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mmproj")
    ap.add_argument("image")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pixels-only", action="store_true", help="no encoding: rows of zeros")
    ap.add_argument("--float64", action="store_true",
                    help="resample in float64, the grid still float32's (a few pixels move by one)")
    args = ap.parse_args()
    g = GGUF(args.mmproj)
    kv = g.kv
    proj = kv.get("clip.projector_type", kv.get("clip.vision.projector_type"))
    S = int(kv["clip.vision.image_size"])
    img = read_ppm(args.image)
    if proj == "idefics3":
        nx, ny, imgs = preprocess(img, S, int(kv.get("clip.vision.preproc_image_size", 0)),
                                  np.float64 if args.float64 else F)
    else:  # gemma3: the picture as it is (the encoder checks its size)
        nx, ny, imgs = 0, 0, [img]
    if args.pixels_only:
        rows = np.zeros((len(imgs), 1, 1), dtype=np.float32)
    else:
        rows = np.stack([encode(g, im) for im in imgs])
    write_dump(args.out, nx, ny, imgs, rows, rows.shape[1], rows.shape[2])


if __name__ == "__main__":
    main()
