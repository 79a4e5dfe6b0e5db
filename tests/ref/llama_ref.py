"""llama_ref.py — independent NumPy forward pass for GGUF `llama` and `qwen2` models.

The plainest possible transcription of the math, in float64, with full-sequence
causal attention (no KV cache, no paging, no batching), so pagoda's paged and
batched C forward pass can be checked against it.

    x      = token_embd[tokens]                                  (T, dim)
    per layer:
      h    = rmsnorm(x) * attn_norm
      q    = h Wq^T (+ bq)  -> (T, n_head, hd);  k, v = ... (T, n_kv_head, hd)
      q, k = rope(q, pos), rope(k, pos)   llama: adjacent pairs (2i, 2i+1)
                                          qwen2: half split (i, i + rope_dim/2)
      att  = softmax(q k^T / sqrt(hd) + causal mask) v   (kv head = head // group)
      x   += att Wo^T
      h    = rmsnorm(x) * ffn_norm
      x   += (silu(h Wg^T) * (h Wu^T)) Wd^T
    logits = (rmsnorm(x) * output_norm) Wout^T          (Wout = token_embd if absent)

Rope frequencies: inv_freq_i = base^(-2i/rope_dim), divided by rope_freqs.weight[i]
when that tensor exists (llama3 scaling as written by llama.cpp's converter) or by the
llama3 factors computed from metadata when rope.scaling.type = llama3; linear scaling
divides the position by rope.scaling.factor.

KV cache element type: with --kv-f16, every K (after rope) and V vector is
rounded to IEEE half (np.float16, round to nearest even) before attention
reads it, exactly where a pagoda f16 KV cache stores it; everything else stays
float64. Without it K/V are used unrounded (what an f32 cache approximates).

Usage:
  llama_ref.py MODEL --seq 1,2,3 [--seq 4,5 ...] [--kv-f16] --out FILE
      writes float32 logits for every position of every sequence, sequences
      concatenated in order: (sum of lengths, vocab), little-endian, no header.
  llama_ref.py MODEL --seq 1,2,3 [--kv-f16] --greedy N
      prints the N greedily generated token ids, space-separated, on one line.
"""
import argparse
import math
import sys

import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
from gguf_ref import GGUF  # noqa: E402


class Model:
    def __init__(self, path, kv_f16=False):
        self.kv_f16 = kv_f16
        g = GGUF(path)
        self.arch = a = g.arch()
        if a not in ("llama", "qwen2"):
            raise ValueError("architecture %s not supported by the reference" % a)
        self.n_layer = int(g.get(a + ".block_count"))
        self.dim = int(g.get(a + ".embedding_length"))
        self.n_head = int(g.get(a + ".attention.head_count"))
        self.n_kv_head = int(g.get(a + ".attention.head_count_kv", self.n_head))
        self.hd = int(g.get(a + ".attention.key_length", self.dim // self.n_head))
        self.eps = float(g.get(a + ".attention.layer_norm_rms_epsilon", 1e-5))
        self.rope_dim = int(g.get(a + ".rope.dimension_count", self.hd))
        self.base = float(g.get(a + ".rope.freq_base", 10000.0))
        self.neox = (a == "qwen2")
        stype = g.get(a + ".rope.scaling.type", "none")
        self.pos_scale = 1.0
        inv = self.base ** (-np.arange(0, self.rope_dim, 2, dtype=np.float64) / self.rope_dim)
        if stype == "linear":
            self.pos_scale = 1.0 / float(g.get(a + ".rope.scaling.factor", 1.0))
        if g.has("rope_freqs.weight"):
            inv = inv / g.tensor("rope_freqs.weight").astype(np.float64)
        elif stype == "llama3":
            factor = float(g.get(a + ".rope.scaling.factor", 8.0))
            lo = float(g.get(a + ".rope.scaling.low_freq_factor", 1.0))
            hi = float(g.get(a + ".rope.scaling.high_freq_factor", 4.0))
            old = float(g.get(a + ".rope.scaling.original_context_length", 8192))
            out = []
            for f in inv:
                wavelen = 2 * math.pi / f
                if wavelen < old / hi:
                    out.append(f)
                elif wavelen > old / lo:
                    out.append(f / factor)
                else:
                    s = (old / wavelen - lo) / (hi - lo)
                    out.append((1 - s) * f / factor + s * f)
            inv = np.array(out)
        elif stype not in ("none", "linear"):
            raise ValueError("rope scaling %s not supported by the reference" % stype)
        self.inv_freq = inv

        def t(name):
            return g.tensor(name).astype(np.float64)

        def opt(name):
            return t(name) if g.has(name) else None

        self.emb = t("token_embd.weight")
        self.out_norm = t("output_norm.weight")
        self.out = opt("output.weight")
        if self.out is None:
            self.out = self.emb
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            self.layers.append({
                "attn_norm": t(p + "attn_norm.weight"),
                "wq": t(p + "attn_q.weight"), "wk": t(p + "attn_k.weight"),
                "wv": t(p + "attn_v.weight"), "wo": t(p + "attn_output.weight"),
                "bq": opt(p + "attn_q.bias"), "bk": opt(p + "attn_k.bias"),
                "bv": opt(p + "attn_v.bias"),
                "ffn_norm": t(p + "ffn_norm.weight"),
                "wg": t(p + "ffn_gate.weight"), "wu": t(p + "ffn_up.weight"),
                "wd": t(p + "ffn_down.weight"),
            })
        self.vocab = self.emb.shape[0]

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        """x: (T, heads, hd); rotates the first rope_dim dims of every head."""
        ang = np.outer(pos * self.pos_scale, self.inv_freq)      # (T, rope_dim/2)
        c = np.cos(ang)[:, None, :]
        s = np.sin(ang)[:, None, :]
        y = x.copy()
        r = self.rope_dim
        if self.neox:
            a, b = x[..., : r // 2], x[..., r // 2: r]
            y[..., : r // 2] = a * c - b * s
            y[..., r // 2: r] = a * s + b * c
        else:
            a, b = x[..., 0:r:2], x[..., 1:r:2]
            y[..., 0:r:2] = a * c - b * s
            y[..., 1:r:2] = a * s + b * c
        return y

    def forward(self, tokens):
        """Logits (T, vocab) for every position of one sequence starting at 0."""
        T = len(tokens)
        pos = np.arange(T, dtype=np.float64)
        x = self.emb[np.array(tokens)]
        group = self.n_head // self.n_kv_head
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        for L in self.layers:
            h = self.rmsnorm(x, L["attn_norm"])
            q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
            if L["bq"] is not None:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q = self.rope(q.reshape(T, self.n_head, self.hd), pos)
            k = self.rope(k.reshape(T, self.n_kv_head, self.hd), pos)
            v = v.reshape(T, self.n_kv_head, self.hd)
            if self.kv_f16:
                # the cache keeps half precision: round to f16, widen back
                k = k.astype(np.float16).astype(np.float64)
                v = v.astype(np.float16).astype(np.float64)
            k = np.repeat(k, group, axis=1)
            v = np.repeat(v, group, axis=1)
            sc = np.einsum("thd,shd->hts", q, k) / math.sqrt(self.hd) + mask
            sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
            sc /= sc.sum(axis=-1, keepdims=True)
            att = np.einsum("hts,shd->thd", sc, v).reshape(T, self.n_head * self.hd)
            x = x + att @ L["wo"].T
            h = self.rmsnorm(x, L["ffn_norm"])
            g = h @ L["wg"].T
            x = x + ((g / (1 + np.exp(-g))) * (h @ L["wu"].T)) @ L["wd"].T
        return self.rmsnorm(x, self.out_norm) @ self.out.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--seq", action="append", required=True,
                    help="comma-separated token ids (one sequence)")
    ap.add_argument("--out", help="write float32 logits here")
    ap.add_argument("--greedy", type=int, default=0, help="generate N tokens greedily")
    ap.add_argument("--kv-f16", action="store_true", help="round K and V to float16 (an f16 KV cache)")
    args = ap.parse_args()
    m = Model(args.model, kv_f16=args.kv_f16)
    seqs = [[int(t) for t in s.split(",") if t != ""] for s in args.seq]
    if args.greedy:
        toks = list(seqs[0])
        gen = []
        for _ in range(args.greedy):
            nxt = int(np.argmax(m.forward(toks)[-1]))
            gen.append(nxt)
            toks.append(nxt)
        print(" ".join(str(t) for t in gen))
    if args.out:
        parts = [m.forward(s).astype("<f4") for s in seqs]
        with open(args.out, "wb") as f:
            for p in parts:
                f.write(p.tobytes())


if __name__ == "__main__":
    main()
