#!/usr/bin/env python3
"""Float64 NumPy reference of the mmproj image encoders pagoda supports,
written from the models' definitions and llama.cpp's mmproj tensor layout,
independently of worker/model/vision*.c: the SigLIP ViT (HF
SiglipVisionModel), then per clip.projector_type
  gemma3   — average pooling, soft-embedding RMSNorm, input projection
             (Gemma3MultiModalProjector);
  idefics3 — pixel shuffle by scale_factor and a linear projection without
             bias (Idefics3Connector, SmolVLM).

    vision_ref.py MMPROJ.gguf IMAGE.ppm --out EMB.f32

IMAGE is a binary PPM (P6, maxval 255) of exactly image_size x image_size
pixels. EMB gets (n_tok, projection_dim) little-endian float32, row-major.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_ref import GGUF  # noqa: E402


def read_ppm(path):
    data = open(path, "rb").read()
    # header: P6 <ws> W <ws> H <ws> 255 <one ws> pixels (comments not written by the tests)
    fields, pos = [], 0
    while len(fields) < 4:
        while data[pos:pos + 1].isspace():
            pos += 1
        start = pos
        while not data[pos:pos + 1].isspace():
            pos += 1
        fields.append(data[start:pos])
    pos += 1
    if fields[0] != b"P6" or int(fields[3]) != 255:
        raise ValueError("%s: not a P6 PPM with maxval 255" % path)
    w, h = int(fields[1]), int(fields[2])
    px = np.frombuffer(data, dtype=np.uint8, count=w * h * 3, offset=pos)
    return px.reshape(h, w, 3)


def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def act(x, kind):
    if kind == "gelu":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    if kind == "silu":
        return x / (1.0 + np.exp(-x))
    return x / (1.0 + np.exp(-1.702 * x))


def pixel_shuffle(h, n, k):
    """Idefics3's connector: the (n, n, D) grid's rows cut into runs of k
    patches (width n/k, features k D), rows and columns swapped, cut again
    by k along the other side (features k^2 D), swapped back; flattened."""
    D = h.shape[-1]
    x = h.reshape(n, n, D).reshape(n, n // k, D * k)
    x = x.transpose(1, 0, 2).reshape(n // k, n // k, D * k * k)
    return x.transpose(1, 0, 2).reshape((n // k) ** 2, D * k * k)


def encode(g, img):
    kv = g.kv
    proj = kv.get("clip.projector_type", kv.get("clip.vision.projector_type"))
    if proj not in ("gemma3", "idefics3"):
        raise ValueError("projector %r is not modelled" % proj)
    S = int(kv["clip.vision.image_size"])
    P = int(kv["clip.vision.patch_size"])
    D = int(kv["clip.vision.embedding_length"])
    H = int(kv["clip.vision.attention.head_count"])
    L = int(kv["clip.vision.block_count"])
    eps = float(kv["clip.vision.attention.layer_norm_epsilon"])
    k = int(kv.get("clip.vision.projector.scale_factor", 4 if proj == "gemma3" else 1))
    mean = np.asarray(kv["clip.vision.image_mean"], dtype=np.float64)
    std = np.asarray(kv["clip.vision.image_std"], dtype=np.float64)
    kind = "gelu" if kv.get("clip.use_gelu", False) else "silu" if kv.get("clip.use_silu", False) else "quick"
    if img.shape != (S, S, 3):
        raise ValueError("image is %s, the encoder takes %dx%d" % (img.shape, S, S))
    t = lambda name: g.tensor(name).astype(np.float64)  # noqa: E731

    # pixels (3, S, S) normalized; the conv kernel as numpy (D, 3, P, P)
    x = (img.astype(np.float64) / 255.0 - mean) / std
    x = x.transpose(2, 0, 1)
    n = S // P
    grid = x.reshape(3, n, P, n, P)                       # (c, py, ky, px, kx)
    conv = np.einsum("cyaxb,dcab->yxd", grid, t("v.patch_embd.weight"))
    h = conv.reshape(n * n, D) + t("v.patch_embd.bias") + t("v.position_embd.weight")

    hd = D // H
    for i in range(L):
        b = "v.blk.%d." % i
        up, down = "ffn_up", "ffn_down"
        if g.tensors[b + "ffn_down.weight"]["ne"][0] == D:  # names swapped (old converters)
            up, down = down, up
        a = layer_norm(h, t(b + "ln1.weight"), t(b + "ln1.bias"), eps)
        q = a @ t(b + "attn_q.weight").T + t(b + "attn_q.bias")
        kk = a @ t(b + "attn_k.weight").T + t(b + "attn_k.bias")
        v = a @ t(b + "attn_v.weight").T + t(b + "attn_v.bias")
        q = q.reshape(-1, H, hd).transpose(1, 0, 2)
        kk = kk.reshape(-1, H, hd).transpose(1, 0, 2)
        v = v.reshape(-1, H, hd).transpose(1, 0, 2)
        s = q @ kk.transpose(0, 2, 1) / np.sqrt(hd)        # (H, N, N), no mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(-1, D)
        h = h + o @ t(b + "attn_out.weight").T + t(b + "attn_out.bias")
        a = layer_norm(h, t(b + "ln2.weight"), t(b + "ln2.bias"), eps)
        f = act(a @ t(b + up + ".weight").T + t(b + up + ".bias"), kind)
        h = h + f @ t(b + down + ".weight").T + t(b + down + ".bias")
    h = layer_norm(h, t("v.post_ln.weight"), t("v.post_ln.bias"), eps)

    if proj == "idefics3":
        return pixel_shuffle(h, n, k) @ t("mm.model.fc.weight").T   # fc (T, D k^2) in numpy

    # average pooling k x k over the (n, n) grid, row-major output
    m = n // k
    pooled = h.reshape(m, k, m, k, D).mean(axis=(1, 3)).reshape(m * m, D)
    r = pooled / np.sqrt((pooled ** 2).mean(axis=-1, keepdims=True) + eps) * t("mm.soft_emb_norm.weight")
    return r @ t("mm.input_projection.weight")          # numpy (D, T): x @ W


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mmproj")
    ap.add_argument("image")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    emb = encode(GGUF(args.mmproj), read_ppm(args.image))
    emb.astype("<f4").tofile(args.out)


if __name__ == "__main__":
    main()
