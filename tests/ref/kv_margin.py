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
                 equal within a rope pair), then per token; q scaled to match
V is per token (as q8_0) in every Kch/Kstatic layout.

Only plain llama-architecture models (no biases, q/k norms, soft caps or
sliding windows); asserted.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as R  # noqa: E402
from gguf_vocab import read_kv  # noqa: E402


def q8(x, qb, f16_scale):
    """x (..., hd) per token in blocks of qb along the last axis, dequantized."""
    hd = x.shape[-1]
    b = x.reshape(x.shape[:-1] + (hd // qb, qb)).astype(np.float32)
    d = np.abs(b).max(axis=-1, keepdims=True) / np.float32(127)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    qv = np.clip(np.rint(b * inv), -127, 127)
    if f16_scale:
        d = d.astype(np.float16)
    return (d.astype(np.float64) * qv).reshape(x.shape)


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


class Run:
    def __init__(self, path):
        self.m = R.Model(path)
        m = self.m
        for L in m.layers:
            assert L["bq"] is None and L["q_norm"] is None and L["post_attn"] is None and L["post_ffn"] is None
        assert not m.att_cap and not m.out_cap and not m.window
        self.qb = 32 if m.hd % 32 == 0 else 16 if m.hd % 16 == 0 else 8

    def logits(self, tokens, layout, B):
        m, T = self.m, len(tokens)
        pos = np.arange(T, dtype=np.float64)
        x = m.emb[np.array(tokens)] * m.emb_scale
        g = m.n_head // m.n_kv_head
        causal = np.triu(np.full((T, T), -np.inf), k=1)
        own = (pos[:, None] // B) == (pos[None, :] // B)
        for L in m.layers:
            h = m.rmsnorm(x, L["attn_norm"])
            q = (h @ L["wq"].T).reshape(T, m.n_head, m.hd)
            k = (h @ L["wk"].T).reshape(T, m.n_kv_head, m.hd)
            v = (h @ L["wv"].T).reshape(T, m.n_kv_head, m.hd)
            q, k = m.rope(q, pos, m.inv_freq, m.pos_scale), m.rope(k, pos, m.inv_freq, m.pos_scale)
            if layout == "f16":
                k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
            elif layout != "exact":
                v = q8(v, self.qb, True)
            if layout in ("q8_0", "q8_0/2"):
                qb = self.qb if layout == "q8_0" else 2
                k, q = q8(k, qb, True), q8(q, qb, False)
            elif layout == "Kstatic":
                s = np.abs(k).max(axis=0)                                    # (h, hd)
                s = np.repeat(np.sqrt((s[:, 0::2] ** 2 + s[:, 1::2] ** 2) / 2), 2, axis=1)
                k = q8(k / s, self.qb, True) * s
                sq = np.repeat(s, g, axis=0)
                q = q8(q * sq, self.qb, False) / sq
            kr = np.repeat(k, g, axis=1)
            if layout.startswith("Kch"):
                kq, kd = kch(k, B)
                kq, kd = np.repeat(kq, g, axis=1), np.repeat(kd, g, axis=1)
                if layout == "Kch-floatq":
                    sc = np.einsum("thd,shd->hts", q, kq * kd)
                else:
                    sc = np.empty((m.n_head, T, T))
                    for b0 in range(0, T, B):
                        sl = slice(b0, b0 + B)
                        sc[:, :, sl] = np.einsum("thd,shd->hts", q8(q * kd[b0][None], self.qb, False), kq[sl])
                    if layout == "Kch-int8+tail":
                        sc = np.where(own[None], np.einsum("thd,shd->hts", q, kr), sc)
            else:
                sc = np.einsum("thd,shd->hts", q, kr)
            sc = sc * m.scale + causal
            sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
            sc /= sc.sum(axis=-1, keepdims=True)
            att = np.einsum("hts,shd->thd", sc, np.repeat(v, g, axis=1)).reshape(T, m.n_head * m.hd)
            x = x + att @ L["wo"].T
            x = x + m.ffn(L, m.rmsnorm(x, L["ffn_norm"]))
        return m.rmsnorm(x, m.out_norm) @ m.out.T


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
    run = Run(a.model)
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
        for _ in range(a.n):                      # the float64 text
            gen.append(int(np.argmax(run.m.forward(toks + gen)[-1])))
        for lay in LAYOUTS:
            lg = run.logits(toks + gen, lay, a.block)[len(toks) - 1:-1]
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
