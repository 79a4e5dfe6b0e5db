#!/usr/bin/env python3
"""How far 8-bit K/V layouts move a small model's greedy text (docs/KV_CACHE.md, "q8_0").

For each prompt: the float64 model's greedy continuation of N tokens is the
text; then, per KV layout, the same sequence is run teacher-forced and each
step's top-two logit margin (logit of the text's token minus the best other
logit) is taken. A negative margin is where that layout's greedy text leaves
the float64 text. Prints, per layout and prompt, the first such step or
"holds" with the smallest margin, then per layout how many prompts held.

    /usr/bin/python3 tests/ref/kv_margin.py [model.gguf] [-n 200] [--prompt TEXT ...]

Layouts (K after rope; "q" the attention queries):
  exact          no rounding (the float64 text's own margins)
  f16            K and V rounded to f16 (pagoda's default cache)
  q8_0           K, V and q per token in blocks of the head (pagoda's q8_0 cache)
  q8_0/2         the same with 2 elements per scale
  Kch-floatq     K per channel over each KV block of B positions (KIVI), float q
  Kch-int8       the same with int8 q: per KV block, q*d_block quantized per token
                 (what an integer-dot kernel over per-channel K computes)
  Kch-int8+tail  the same, but the block holding the query's own position read
                 in float (a per-sequence float tail until the block is full)
  Kstatic        K divided by a per-channel scale (the sequence's own max |K|,
                 equal within adjacent channel pairs: llama's rope pairs), then
                 per token; q scaled to match
V is per token (as q8_0) in every Kch/Kstatic layout.

Any architecture llama_ref.py runs: the layouts replace its cache rounding and
q·k products (llama_ref.Model.scores); the rest of its forward pass is unchanged.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as R  # noqa: E402
from gguf_vocab import read_kv  # noqa: E402


def kch(k, B):
    """Per-channel quants and the f16 scale of each position's block: (T, h, hd) each."""
    T = k.shape[0]
    q, d = np.empty_like(k), np.empty_like(k)
    for s in range(0, T, B):
        b = k[s:s + B].astype(np.float32)
        dd = np.abs(b).max(axis=0, keepdims=True) / np.float32(127)
        inv = np.where(dd > 0, 1 / np.where(dd > 0, dd, 1), 0)
        q[s:s + B] = np.clip(np.rint(b * inv), -127, 127)
        d[s:s + B] = np.broadcast_to(dd.astype(np.float16).astype(np.float64), b.shape)
    return q, d


def scores(q, k, v, layout, B):
    """llama_ref.Model.scores for one layout: (q·k products (h, T, T), v as read)."""
    T, g = q.shape[0], q.shape[1] // k.shape[1]
    if layout == "f16":
        k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
    elif layout != "exact":
        v = R.q8(v, True)
    if layout in ("q8_0", "q8_0/2"):
        qb = None if layout == "q8_0" else 2
        k, q = R.q8(k, True, qb), R.q8(q, False, qb)
    elif layout == "Kstatic":
        s = np.abs(k).max(axis=0)                                    # (h, hd)
        s = np.repeat(np.sqrt((s[:, 0::2] ** 2 + s[:, 1::2] ** 2) / 2), 2, axis=1)
        k = R.q8(k / s, True) * s
        sq = np.repeat(s, g, axis=0)
        q = R.q8(q * sq, False) / sq
    kr = np.repeat(k, g, axis=1)
    if not layout.startswith("Kch"):
        return np.einsum("thd,shd->hts", q, kr), v
    kq, kd = kch(k, B)
    kq, kd = np.repeat(kq, g, axis=1), np.repeat(kd, g, axis=1)
    if layout == "Kch-floatq":
        return np.einsum("thd,shd->hts", q, kq * kd), v
    sc = np.empty((q.shape[1], T, T))
    for b0 in range(0, T, B):
        sl = slice(b0, b0 + B)
        sc[:, :, sl] = np.einsum("thd,shd->hts", R.q8(q * kd[b0][None], False), kq[sl])
    if layout == "Kch-int8+tail":
        pos = np.arange(T)
        own = (pos[:, None] // B) == (pos[None, :] // B)
        sc = np.where(own[None], np.einsum("thd,shd->hts", q, kr), sc)
    return sc, v


PROMPTS = ["Once upon a time", "One day a", "Lily was", "The big", "Tim and his mom",
           "Once upon a time there was a little", "She saw", "They play"]
LAYOUTS = ["exact", "f16", "q8_0", "q8_0/2", "Kch-floatq", "Kch-int8", "Kch-int8+tail", "Kstatic"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default=os.path.join(here, "../../../shared/models/stories260K.gguf"))
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--block", type=int, default=32, help="KV block size (positions) of the Kch layouts")
    ap.add_argument("--prompt", action="append", help="default: PROMPTS (each word one token of the vocabulary)")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        sys.exit("kv_margin: no model at %s" % a.model)
    m = R.Model(a.model)
    tid = {t: i for i, t in enumerate(read_kv(a.model)["tokenizer.ggml.tokens"])}
    held = {lay: [] for lay in LAYOUTS}
    prompts = a.prompt or PROMPTS
    for p in prompts:
        words = ["\u2581" + w for w in p.split()]
        missing = [w for w in words if w not in tid]
        if missing:
            sys.exit("kv_margin: %r is not one token per word (%s)" % (p, missing))
        toks = [1] + [tid[w] for w in words]
        gen = []
        m.scores = None                            # the float64 model's own attention
        for _ in range(a.n):                      # the float64 text
            gen.append(int(np.argmax(m.forward(toks + gen)[-1])))
        for lay in LAYOUTS:
            m.scores = lambda q, k, v: scores(q, k, v, lay, a.block)
            lg = m.forward(toks + gen)[len(toks) - 1:-1]
            marg = np.array([row[t] - np.delete(row, t).max() for row, t in zip(lg, gen)])
            bad = np.nonzero(marg < 0)[0]
            what = ("changes at token %d (margin %+.4f)" % (bad[0], marg[bad[0]]) if len(bad)
                    else "holds (smallest margin %.4f at %d)" % (marg.min(), marg.argmin()))
            print("%-36s %-14s %s" % (p, lay, what), flush=True)
            held[lay].append(len(bad) == 0)
    print("\ntext unchanged over %d tokens, of %d prompts:" % (a.n, len(prompts)))
    for lay in LAYOUTS:
        print("  %-14s %d" % (lay, sum(held[lay])))


if __name__ == "__main__":
    main()
