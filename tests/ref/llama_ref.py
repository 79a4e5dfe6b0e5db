"""llama_ref.py — independent NumPy forward pass for GGUF decoder models:
`llama`, `qwen2`, `qwen3`, `qwen2moe`, `qwen3moe`, `gemma2`, `gemma3`, `phi3`.

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

Families (written from the model papers / Hugging Face modeling descriptions,
not from pagoda's C code):
  qwen3, qwen3moe, gemma3: q and k of every head RMS-normalised (weight of
      head_dim) right after the projection, before rope.
  gemma2, gemma3: x scaled by sqrt(dim) after the lookup; the attention output
      and the FFN output are RMS-normalised (post_attention_norm, post_ffw_norm)
      before they are added to x; FFN gelu_tanh(h Wg) * (h Wu); gemma2 scores
      soft-capped 50 * tanh(s / 50) and logits 30 * tanh(l / 30) (metadata
      overrides); sliding-window layers (pattern p: layer i local when
      i % p < p - 1) see only keys with query_pos - key_pos < window; gemma3's
      local layers use rope.freq_base_swa and no rope scaling.
  llama with attention.sliding_window: every layer sliding (Mistral).
  phi3: attn_qkv split into q, k, v rows; ffn_up split into gate, up rows;
      inv_freq divided by rope_factors_short (or _long when context_length >
      original_context_length); cos and sin times rope.scaling.attn_factor.
  qwen2moe, qwen3moe: the FFN is a mixture: p = softmax(h Wr), the top
      expert_used_count experts by p, weights p (renormalised for qwen3moe or
      when expert_weights_norm), out = sum_e w_e * ffn_e(h); qwen2moe adds
      sigmoid(h . w_shexp_gate) * ffn_shared(h).
Every architecture except llama uses the half-split (NeoX) rope pairing.

Rope frequencies: inv_freq_i = base^(-2i/rope_dim), divided by rope_freqs.weight[i]
when that tensor exists (llama3 scaling as written by llama.cpp's converter) or by the
llama3 factors computed from metadata when rope.scaling.type = llama3; linear scaling
divides the position by rope.scaling.factor.

KV cache element type: with --kv-f16, every K (after rope) and V vector is
rounded to IEEE half (np.float16, round to nearest even) before attention
reads it, exactly where a pagoda f16 KV cache stores it; everything else stays
float64. Without it K/V are used unrounded (what an f32 cache approximates).
With --kv-q8, K and V are quantized as a pagoda q8_0 cache stores them (blocks of
qb = 32, 16 or 8 elements, the largest dividing head_dim: d = amax/127, quants
round(x/d) clipped to [-127, 127], read back as f16(d) * q) and the queries as the
q8 attention quantizes them (same blocks, d kept unrounded), in float64; the
scores are then the products of those values (pagoda sums them exactly in int32).

Usage:
  llama_ref.py MODEL --seq 1,2,3 [--seq 4,5 ...] [--kv-f16] [--lora A.gguf [--lora-scale S]] --out FILE
      writes float32 logits for every position of every sequence, sequences
      concatenated in order: (sum of lengths, vocab), little-endian, no header.
  llama_ref.py MODEL --seq 1,2,3 [--kv-f16] --greedy N
      prints the N greedily generated token ids, space-separated, on one line.
  llama_ref.py MODEL --seq 1,2,3 [--seq ...] [--pooling mean|last] --embed FILE
      writes one embedding per sequence, float32 little-endian (n_seq, dim):
      the final hidden states rmsnorm(x) * output_norm (what the output head
      reads), pooled over the sequence — mean of every position, or the last
      position — and L2-normalised. The pooling defaults to the GGUF's
      {arch}.pooling_type (llama.cpp's enum: 3 = last, anything else or
      absent = mean).
  llama_ref.py MODEL --seq 1,2,3 [--seq ...] --rank FILE
      writes the rank head's outputs per sequence, float32 little-endian
      (n_seq, n_out), for a reranker (pooling_type 4): the final hidden state
      of the last position (every family here is a decoder: only the last
      position has seen the whole pair, as in Hugging Face's
      *ForSequenceClassification for decoder models) through y = tanh(cls.weight @ h + cls.bias) when cls.weight exists, then
      y = cls.output.weight @ y + cls.output.bias when cls.output.weight exists,
      then (qwen3) softmax(y). Output 0 is the relevance score.
"""
import argparse
import math
import sys

import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
from gguf_ref import GGUF  # noqa: E402


ARCHS = ("llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gemma2", "gemma3", "phi3")


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def q8(x, f16_scale, qb=None):
    """x (T, heads, hd) quantized in blocks of qb along hd (default: the
    cache's, the largest of 32, 16, 8 dividing hd), dequantized back."""
    hd = x.shape[-1]
    if qb is None:
        qb = 32 if hd % 32 == 0 else 16 if hd % 16 == 0 else 8
    b = x.reshape(x.shape[:-1] + (hd // qb, qb)).astype(np.float32)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    d = amax / np.float32(127)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    qv = np.clip(np.rint(b * inv), -127, 127)
    if f16_scale:
        d = d.astype(np.float16)
    return (d.astype(np.float64) * qv).reshape(x.shape)


class Model:
    def __init__(self, path, kv_f16=False, kv_q8=False):
        self.kv_f16 = kv_f16
        self.kv_q8 = kv_q8
        # scores(q, k, v) -> (sc, v): when set, replaces the cache rounding
        # and the q·k products of every layer (q (T, n_head, hd), k and v
        # (T, n_kv_head, hd) after rope; sc (n_head, T, T) unscaled, v as
        # attention reads it); for layouts the flags do not cover (kv_margin.py)
        self.scores = None
        g = GGUF(path)
        self.arch = a = g.arch()
        if a not in ARCHS:
            raise ValueError("architecture %s not supported by the reference" % a)
        gemma = a in ("gemma2", "gemma3")
        self.n_layer = int(g.get(a + ".block_count"))
        self.dim = int(g.get(a + ".embedding_length"))
        self.n_head = int(g.get(a + ".attention.head_count"))
        self.n_kv_head = int(g.get(a + ".attention.head_count_kv", self.n_head))
        self.pooling_type = int(g.get(a + ".pooling_type", -1))
        self.hd = int(g.get(a + ".attention.key_length", self.dim // self.n_head))
        self.eps = float(g.get(a + ".attention.layer_norm_rms_epsilon", 1e-5))
        self.rope_dim = int(g.get(a + ".rope.dimension_count", self.hd))
        self.base = float(g.get(a + ".rope.freq_base", 10000.0))
        self.ctx = int(g.get(a + ".context_length"))
        self.neox = (a != "llama")
        stype = g.get(a + ".rope.scaling.type", "none")
        self.pos_scale = 1.0
        exps = np.arange(0, self.rope_dim, 2, dtype=np.float64) / self.rope_dim
        inv = self.base ** (-exps)
        self.rope_mag = 1.0
        if stype == "linear":
            self.pos_scale = 1.0 / float(g.get(a + ".rope.scaling.factor", 1.0))
        if a == "phi3":
            orig = int(g.get(a + ".rope.scaling.original_context_length", 8192))
            name = "rope_factors_long.weight" if self.ctx > orig else "rope_factors_short.weight"
            if g.has(name):
                inv = inv / g.tensor(name).astype(np.float64)
            self.rope_mag = float(g.get(a + ".rope.scaling.attn_factor", 1.0))
        elif g.has("rope_freqs.weight"):
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

        # sliding window: which layers, how wide, and their rope
        self.window = 0
        pattern = 1
        if gemma or a == "llama":
            self.window = int(g.get(a + ".attention.sliding_window", 4096 if a == "gemma2" else 0))
            pattern = g.get(a + ".attention.sliding_window_pattern", 2 if a == "gemma2" else 6 if a == "gemma3" else 1)
        if isinstance(pattern, list):
            self.local = [bool(x) for x in pattern]
        else:
            p = int(pattern)
            self.local = [p == 1 or i % p < p - 1 for i in range(self.n_layer)]
        if self.window == 0:
            self.local = [False] * self.n_layer
        self.local_inv_freq, self.local_pos_scale = self.inv_freq, self.pos_scale
        if a == "gemma3":
            b_loc = float(g.get(a + ".rope.freq_base_swa", 10000.0))
            self.local_inv_freq, self.local_pos_scale = b_loc ** (-exps), 1.0

        self.emb_scale = math.sqrt(self.dim) if gemma else 1.0
        self.scale = 1.0 / math.sqrt(self.hd)
        if (a == "gemma2" and self.n_layer == 46) or (a == "gemma3" and self.n_layer == 62):
            self.scale = 1.0 / math.sqrt(self.dim / self.n_head)
        self.att_cap = float(g.get(a + ".attn_logit_softcapping", 50.0)) if a == "gemma2" else 0.0
        self.out_cap = float(g.get(a + ".final_logit_softcapping", 30.0 if a == "gemma2" else 0.0)) if gemma else 0.0
        self.act = gelu_tanh if gemma else silu
        self.n_expert = int(g.get(a + ".expert_count", 0)) if a.endswith("moe") else 0
        self.k_used = int(g.get(a + ".expert_used_count", 0))
        self.moe_norm = bool(g.get(a + ".expert_weights_norm", a == "qwen3moe"))
        sc = float(g.get(a + ".expert_weights_scale", 1.0))
        self.moe_scale = sc if sc != 0 else 1.0

        def t(name):
            return g.tensor(name).astype(np.float64)

        def opt(name):
            return t(name) if g.has(name) else None

        # the rank head (None when absent), matrices as (rows, cols)
        self.cls_w = opt("cls.weight")
        self.cls_b = opt("cls.bias")
        self.cls_out_w = opt("cls.output.weight")
        self.cls_out_b = opt("cls.output.bias")
        self.emb = t("token_embd.weight")
        self.out_norm = t("output_norm.weight")
        self.out = opt("output.weight")
        if self.out is None:
            self.out = self.emb
        qd, kd = self.n_head * self.hd, self.n_kv_head * self.hd
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            L = {"attn_norm": t(p + "attn_norm.weight"), "wo": t(p + "attn_output.weight"),
                 "ffn_norm": t(p + "ffn_norm.weight"),
                 "q_norm": opt(p + "attn_q_norm.weight"), "k_norm": opt(p + "attn_k_norm.weight"),
                 "post_attn": opt(p + "post_attention_norm.weight"),
                 "post_ffn": opt(p + "post_ffw_norm.weight")}
            if g.has(p + "attn_qkv.weight"):
                w = t(p + "attn_qkv.weight")
                L["wq"], L["wk"], L["wv"] = w[:qd], w[qd:qd + kd], w[qd + kd:]
                b = opt(p + "attn_qkv.bias")
                L["bq"], L["bk"], L["bv"] = (None, None, None) if b is None else (b[:qd], b[qd:qd + kd], b[qd + kd:])
            else:
                L["wq"], L["wk"], L["wv"] = t(p + "attn_q.weight"), t(p + "attn_k.weight"), t(p + "attn_v.weight")
                L["bq"], L["bk"], L["bv"] = opt(p + "attn_q.bias"), opt(p + "attn_k.bias"), opt(p + "attn_v.bias")
            if self.n_expert:
                L["router"] = t(p + "ffn_gate_inp.weight")            # (E, dim)
                L["eg"] = t(p + "ffn_gate_exps.weight")               # (E, ffe, dim)
                L["eu"] = t(p + "ffn_up_exps.weight")
                L["ed"] = t(p + "ffn_down_exps.weight")               # (E, dim, ffe)
                L["sh_inp"] = opt(p + "ffn_gate_inp_shexp.weight")
                if L["sh_inp"] is not None:
                    L["sg"], L["su"], L["sd"] = (t(p + "ffn_gate_shexp.weight"), t(p + "ffn_up_shexp.weight"),
                                                 t(p + "ffn_down_shexp.weight"))
            elif g.has(p + "ffn_gate.weight"):
                L["wg"], L["wu"], L["wd"] = t(p + "ffn_gate.weight"), t(p + "ffn_up.weight"), t(p + "ffn_down.weight")
            else:
                w = t(p + "ffn_up.weight")
                n = w.shape[0] // 2
                L["wg"], L["wu"], L["wd"] = w[:n], w[n:], t(p + "ffn_down.weight")
            self.layers.append(L)
        self.vocab = self.emb.shape[0]

    def apply_lora(self, path, scale):
        """W += s * B A for every matrix the LoRA adapter at path changes, in
        float64: A = <W>.lora_a (r, in), B = <W>.lora_b (out, r), s = scale *
        alpha / r (scale alone when adapter.lora.alpha is 0 or absent), the
        rule llama.cpp's adapter loader documents. A fused attn_qkv's delta
        splits by rows like the weight does."""
        g = GGUF(path)
        if g.get("general.type") != "adapter" or g.get("adapter.type") != "lora":
            raise ValueError("%s: not a LoRA adapter" % path)
        if g.arch() != self.arch:
            raise ValueError("%s: adapter for %s, model is %s" % (path, g.arch(), self.arch))
        alpha = float(g.get("adapter.lora.alpha", 0.0))
        keys = {"attn_q": ["wq"], "attn_k": ["wk"], "attn_v": ["wv"], "attn_output": ["wo"],
                "ffn_gate": ["wg"], "ffn_up": ["wu"], "ffn_down": ["wd"], "attn_qkv": ["wq", "wk", "wv"]}
        for name in g.tensors:
            if not name.endswith(".lora_a"):
                continue
            base = name[:-len(".lora_a")]
            parts = base.split(".")          # blk, L, proj, weight
            a = g.tensor(name).astype(np.float64)             # (r, in)
            b = g.tensor(base + ".lora_b").astype(np.float64)  # (out, r)
            r = a.shape[0]
            s = scale * alpha / r if alpha != 0 else scale
            delta = s * (b @ a)                                # (out, in)
            L = self.layers[int(parts[1])]
            row = 0
            for k in keys[parts[2]]:
                n = L[k].shape[0]
                L[k] = L[k] + delta[row:row + n]
                row += n

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos, inv_freq, pos_scale):
        """x: (T, heads, hd); rotates the first rope_dim dims of every head."""
        ang = np.outer(pos * pos_scale, inv_freq)                 # (T, rope_dim/2)
        c = np.cos(ang)[:, None, :] * self.rope_mag
        s = np.sin(ang)[:, None, :] * self.rope_mag
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

    def ffn(self, L, h):
        if not self.n_expert:
            return (self.act(h @ L["wg"].T) * (h @ L["wu"].T)) @ L["wd"].T
        logits = h @ L["router"].T                                # (T, E)
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for ti in range(h.shape[0]):
            top = sorted(range(self.n_expert), key=lambda e: (-p[ti, e], e))[: self.k_used]
            w = np.array([p[ti, e] for e in top])
            if self.moe_norm:
                w = w / w.sum()
            w = w * self.moe_scale
            for we, e in zip(w, top):
                x = h[ti]
                out[ti] += we * ((self.act(L["eg"][e] @ x) * (L["eu"][e] @ x)) @ L["ed"][e].T)
        if L.get("sh_inp") is not None:
            gate = 1.0 / (1.0 + np.exp(-(h @ L["sh_inp"])))        # (T,)
            out += gate[:, None] * ((self.act(h @ L["sg"].T) * (h @ L["su"].T)) @ L["sd"].T)
        return out

    def forward(self, tokens, hidden=False, images=()):
        """Logits (T, vocab) for every position of one sequence starting at 0.
        images: (pos, rows) pairs: rows (n, dim) replace the inputs of
        positions pos..pos+n-1 as they are (no embedding scale), and those
        positions attend to each other both ways (an image decoded
        non-causally, as llama.cpp does for Gemma 3)."""
        T = len(tokens)
        pos = np.arange(T, dtype=np.float64)
        x = self.emb[np.array(tokens)] * self.emb_scale
        group = self.n_head // self.n_kv_head
        causal = np.triu(np.full((T, T), -np.inf), k=1)
        for p0, rows in images:
            n = rows.shape[0]
            x[p0:p0 + n] = rows
            causal[p0:p0 + n, p0:p0 + n] = 0.0
        dist = pos[:, None] - pos[None, :]                       # query pos - key pos
        windowed = np.where(dist >= self.window, -np.inf, causal) if self.window else causal
        for i, L in enumerate(self.layers):
            local = self.local[i]
            h = self.rmsnorm(x, L["attn_norm"])
            q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
            if L["bq"] is not None:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q = q.reshape(T, self.n_head, self.hd)
            k = k.reshape(T, self.n_kv_head, self.hd)
            if L["q_norm"] is not None:
                q, k = self.rmsnorm(q, L["q_norm"]), self.rmsnorm(k, L["k_norm"])
            inv, ps = (self.local_inv_freq, self.local_pos_scale) if local else (self.inv_freq, self.pos_scale)
            q = self.rope(q, pos, inv, ps)
            k = self.rope(k, pos, inv, ps)
            v = v.reshape(T, self.n_kv_head, self.hd)
            if self.scores is not None:
                sc, v = self.scores(q, k, v)
            else:
                if self.kv_f16:
                    # the cache keeps half precision: round to f16, widen back
                    k = k.astype(np.float16).astype(np.float64)
                    v = v.astype(np.float16).astype(np.float64)
                if self.kv_q8:
                    k, v, q = q8(k, True), q8(v, True), q8(q, False)
                sc = np.einsum("thd,shd->hts", q, np.repeat(k, group, axis=1))
            v = np.repeat(v, group, axis=1)
            sc = sc * self.scale
            if self.att_cap:
                sc = self.att_cap * np.tanh(sc / self.att_cap)
            sc = sc + (windowed if local else causal)
            sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
            sc /= sc.sum(axis=-1, keepdims=True)
            att = np.einsum("hts,shd->thd", sc, v).reshape(T, self.n_head * self.hd) @ L["wo"].T
            if L["post_attn"] is not None:
                att = self.rmsnorm(att, L["post_attn"])
            x = x + att
            f = self.ffn(L, self.rmsnorm(x, L["ffn_norm"]))
            if L["post_ffn"] is not None:
                f = self.rmsnorm(f, L["post_ffn"])
            x = x + f
        h = self.rmsnorm(x, self.out_norm)                       # (T, dim) final hidden states
        if hidden:
            return h
        logits = h @ self.out.T
        if self.out_cap:
            logits = self.out_cap * np.tanh(logits / self.out_cap)
        return logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--seq", action="append", required=True,
                    help="comma-separated token ids (one sequence)")
    ap.add_argument("--out", help="write float32 logits here")
    ap.add_argument("--greedy", type=int, default=0, help="generate N tokens greedily")
    ap.add_argument("--kv-f16", action="store_true", help="round K and V to float16 (an f16 KV cache)")
    ap.add_argument("--kv-q8", action="store_true", help="K/V and queries as a q8_0 KV cache quantizes them")
    ap.add_argument("--embed", help="write float32 pooled, L2-normalised embeddings here")
    ap.add_argument("--pooling", choices=["mean", "last"], help="default: the GGUF's pooling_type")
    ap.add_argument("--rank", help="write float32 rank-head outputs here (a reranker)")
    ap.add_argument("--lora", action="append", default=[], help="a LoRA adapter GGUF applied to the model")
    ap.add_argument("--lora-scale", action="append", type=float, default=[],
                    help="the scale of the --lora of the same position (default 1)")
    ap.add_argument("--image-rows", help="float32 (n, dim) rows replacing the inputs at --image-pos")
    ap.add_argument("--image-pos", type=int, default=0, help="first position of --image-rows")
    args = ap.parse_args()
    m = Model(args.model, kv_f16=args.kv_f16, kv_q8=args.kv_q8)
    for i, path in enumerate(args.lora):
        m.apply_lora(path, args.lora_scale[i] if i < len(args.lora_scale) else 1.0)
    images = ()
    if args.image_rows:
        rows = np.fromfile(args.image_rows, dtype="<f4").astype(np.float64).reshape(-1, m.dim)
        images = ((args.image_pos, rows),)
    seqs = [[int(t) for t in s.split(",") if t != ""] for s in args.seq]
    if args.greedy:
        toks = list(seqs[0])
        gen = []
        for _ in range(args.greedy):
            nxt = int(np.argmax(m.forward(toks, images=images)[-1]))
            gen.append(nxt)
            toks.append(nxt)
        print(" ".join(str(t) for t in gen))
    if args.embed:
        pooling = args.pooling or ("last" if m.pooling_type == 3 else "mean")
        with open(args.embed, "wb") as f:
            for s in seqs:
                h = m.forward(s, hidden=True)
                v = h[-1] if pooling == "last" else h.mean(axis=0)
                n = np.linalg.norm(v)
                f.write((v / n if n > 0 else v).astype("<f4").tobytes())
    if args.rank:
        with open(args.rank, "wb") as f:
            for s in seqs:
                h = m.forward(s, hidden=True)
                y = h[-1]
                if m.cls_w is not None:
                    w = m.cls_w.reshape(-1, y.shape[0])
                    y = np.tanh(w @ y + (m.cls_b.reshape(-1) if m.cls_b is not None else 0.0))
                if m.cls_out_w is not None:
                    w = m.cls_out_w.reshape(-1, y.shape[0])
                    y = w @ y + (m.cls_out_b.reshape(-1) if m.cls_out_b is not None else 0.0)
                if m.arch == "qwen3":
                    e = np.exp(y - y.max())
                    y = e / e.sum()
                f.write(np.asarray(y).astype("<f4").tobytes())
    if args.out:
        parts = [m.forward(s, images=images).astype("<f4") for s in seqs]
        with open(args.out, "wb") as f:
            for p in parts:
                f.write(p.tobytes())


if __name__ == "__main__":
    main()
