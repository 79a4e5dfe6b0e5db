"""make_test_models.py — writes tiny random GGUF models that exercise the model
loader's variants the shared test models do not cover.

Usage: make_test_models.py OUTDIR

Writes (all F32, random weights, vocab 128, BOS 1):
  qwen2-tied.gguf      qwen2: Q/K/V biases, NeoX rope, rope base 1e6, no output.weight
  llama-linear.gguf    llama: rope.scaling.type linear (factor 4), partial rope
                       (rope_dim 8 of head_dim 16), separate output.weight
  llama-ropefreqs.gguf llama: llama3-style factors in a rope_freqs.weight tensor
  llama-llama3.gguf    llama: rope.scaling.type llama3 from metadata (no tensor),
                       original context 64 so every branch of the formula is used
  llama-swa.gguf       llama with attention.sliding_window 16 (Mistral-style)
  qwen3.gguf           per-head Q/K RMSNorm, NeoX rope
  qwen3moe.gguf        qwen3 attention, 8 experts, 2 used, renormalised weights
  qwen2moe.gguf        biases, 4 experts, 2 used, not renormalised, shared expert
  gemma2.gguf          GeGLU, post norms, embedding scale, soft-capping (attn 2,
                       final 5: small so tanh bites), window 8 on every 2nd layer
  gemma3.gguf          Q/K norm, 3 layers with pattern 3 (two local, one
                       global), window 8, local rope base 1e4, global 1e6 with
                       linear scaling x2, final soft-capping absent
  phi3.gguf            fused attn_qkv and ffn_up, partial rope (8 of 16),
                       LongRoPE long factors (context 256 > original 64) and
                       attn_factor 1.2
  <family>-q8.gguf     each of the above families with its matrices in Q8_0
                       (the reference reads Q8_0 itself)
  bad-arch.gguf        architecture "gpt2" (must be refused)
  bad-type.gguf        llama with one Q2_K matrix (must be refused naming Q2_K)
  bad-shape.gguf       llama whose attn_k has the wrong number of rows

The GGUF writer here follows the format description in common/text/gguf.h and is
deliberately separate from the C reader and from gguf_ref.py's reader.
"""
import os
import struct
import sys

import numpy as np

ALIGN = 32


def _s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key, val):
    if isinstance(val, str):
        return _s(key) + struct.pack("<I", 8) + _s(val)
    if isinstance(val, float):
        return _s(key) + struct.pack("<If", 6, val)
    return _s(key) + struct.pack("<II", 4, val)


def write_gguf(path, kvs, tensors):
    """kvs: dict; tensors: list of (name, ndarray float32 or (bytes, ne, type))."""
    infos, blobs, off = [], [], 0
    for name, t in tensors:
        if isinstance(t, tuple):
            data, ne, ttype = t
        else:
            data, ne, ttype = t.astype("<f4").tobytes(), list(reversed(t.shape)), 0
        infos.append(_s(name) + struct.pack("<I", len(ne)) +
                     b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", ttype, off))
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    head = struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(kvs))
    head += b"".join(_kv(k, v) for k, v in kvs.items()) + b"".join(infos)
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(path, "wb") as f:
        f.write(head + b"".join(blobs))


def q8_0(a):
    """(data bytes, ne, type) of float array a in Q8_0 (rows of 32-blocks:
    f16 scale d = max|x| / 127, int8 q = round(x / d))."""
    x = a.astype(np.float32).reshape(-1, 32)
    d = (np.abs(x).max(axis=1) / 127.0).astype(np.float16)
    df = d.astype(np.float32)
    q = np.where(df[:, None] > 0, np.round(x / np.where(df > 0, df, 1)[:, None]), 0).astype(np.int8)
    blocks = np.zeros((x.shape[0], 34), dtype=np.uint8)
    blocks[:, :2] = d.view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = q.view(np.uint8)
    return blocks.tobytes(), list(reversed(a.shape)), 8


def family(arch, rng, quant=False, dim=64, n_head=4, n_kv=2, hd=16, ffn=96, vocab=128, n_layer=2,
           rope_dim=None, extra_kv=None):
    """A tiny random model of one architecture family (see the table above)."""
    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def mat(a):
        return q8_0(a) if quant and a.shape[-1] % 32 == 0 else a

    moe = arch.endswith("moe")
    kvs = {"general.architecture": arch, arch + ".block_count": n_layer,
           arch + ".context_length": 256, arch + ".embedding_length": dim,
           arch + ".feed_forward_length": ffn, arch + ".attention.head_count": n_head,
           arch + ".attention.head_count_kv": n_kv, arch + ".attention.key_length": hd,
           arch + ".attention.value_length": hd, arch + ".rope.freq_base": 10000.0,
           arch + ".rope.dimension_count": rope_dim or hd,
           arch + ".attention.layer_norm_rms_epsilon": 1e-6}
    kvs.update(extra_kv or {})
    qd, kd = n_head * hd, n_kv * hd
    t = [("token_embd.weight", mat(rng.standard_normal((vocab, dim)).astype(np.float32))),
         ("output_norm.weight", norm(dim))]
    if not arch.startswith("gemma"):
        t.append(("output.weight", mat(w(vocab, dim))))
    for l in range(n_layer):
        p = "blk.%d." % l
        t.append((p + "attn_norm.weight", norm(dim)))
        if arch == "phi3":
            t.append((p + "attn_qkv.weight", mat(w(qd + 2 * kd, dim))))
        else:
            t += [(p + "attn_q.weight", mat(w(qd, dim))), (p + "attn_k.weight", mat(w(kd, dim))),
                  (p + "attn_v.weight", mat(w(kd, dim)))]
        if arch == "qwen2moe":
            t += [(p + "attn_q.bias", (0.5 * rng.standard_normal(qd)).astype(np.float32)),
                  (p + "attn_k.bias", (0.5 * rng.standard_normal(kd)).astype(np.float32)),
                  (p + "attn_v.bias", (0.5 * rng.standard_normal(kd)).astype(np.float32))]
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            t += [(p + "attn_q_norm.weight", norm(hd)), (p + "attn_k_norm.weight", norm(hd))]
        t += [(p + "attn_output.weight", mat(w(dim, qd))), (p + "ffn_norm.weight", norm(dim))]
        if arch.startswith("gemma"):
            t += [(p + "post_attention_norm.weight", norm(dim)), (p + "post_ffw_norm.weight", norm(dim))]
        if moe:
            ne, fe = kvs[arch + ".expert_count"], kvs[arch + ".expert_feed_forward_length"]
            t += [(p + "ffn_gate_inp.weight", w(ne, dim)),
                  (p + "ffn_gate_exps.weight", mat(w(ne, fe, dim))),
                  (p + "ffn_up_exps.weight", mat(w(ne, fe, dim))),
                  (p + "ffn_down_exps.weight", mat(w(ne, dim, fe)))]
            if arch == "qwen2moe":
                fs = kvs[arch + ".expert_shared_feed_forward_length"]
                t += [(p + "ffn_gate_inp_shexp.weight", (rng.standard_normal(dim) / 4).astype(np.float32)),
                      (p + "ffn_gate_shexp.weight", mat(w(fs, dim))),
                      (p + "ffn_up_shexp.weight", mat(w(fs, dim))),
                      (p + "ffn_down_shexp.weight", mat(w(dim, fs)))]
        elif arch == "phi3":
            t += [(p + "ffn_up.weight", mat(w(2 * ffn, dim))), (p + "ffn_down.weight", mat(w(dim, ffn)))]
        else:
            t += [(p + "ffn_gate.weight", mat(w(ffn, dim))), (p + "ffn_up.weight", mat(w(ffn, dim))),
                  (p + "ffn_down.weight", mat(w(dim, ffn)))]
    if arch == "phi3":
        half = (rope_dim or hd) // 2
        t += [("rope_factors_short.weight", (1.0 + rng.random(half)).astype(np.float32)),
              ("rope_factors_long.weight", (1.0 + 8.0 * rng.random(half)).astype(np.float32))]
    return kvs, t


FAMILIES = {
    "llama-swa": ("llama", dict(extra_kv={"llama.attention.sliding_window": 16})),
    "qwen3": ("qwen3", dict()),
    "qwen3moe": ("qwen3moe", dict(extra_kv={"qwen3moe.expert_count": 8, "qwen3moe.expert_used_count": 2,
                                            "qwen3moe.expert_feed_forward_length": 32})),
    "qwen2moe": ("qwen2moe", dict(extra_kv={"qwen2moe.expert_count": 4, "qwen2moe.expert_used_count": 2,
                                            "qwen2moe.expert_feed_forward_length": 32,
                                            "qwen2moe.expert_shared_feed_forward_length": 64})),
    "gemma2": ("gemma2", dict(extra_kv={"gemma2.attention.sliding_window": 8,
                                        "gemma2.attn_logit_softcapping": 2.0,
                                        "gemma2.final_logit_softcapping": 5.0})),
    "gemma3": ("gemma3", dict(n_layer=3, extra_kv={"gemma3.attention.sliding_window": 8,
                                                   "gemma3.attention.sliding_window_pattern": 3,
                                                   "gemma3.rope.freq_base": 1e6,
                                                   "gemma3.rope.freq_base_swa": 10000.0,
                                                   "gemma3.rope.scaling.type": "linear",
                                                   "gemma3.rope.scaling.factor": 2.0})),
    "phi3": ("phi3", dict(rope_dim=8, extra_kv={"phi3.rope.scaling.original_context_length": 64,
                                                "phi3.rope.scaling.attn_factor": 1.2})),
}


def model(arch, rng, dim=64, n_head=4, n_kv=2, hd=16, ffn=96, vocab=128, n_layer=2,
          rope_dim=None, base=10000.0, biases=False, tied=False, extra_kv=None,
          extra_t=None, override=None):
    def w(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    kvs = {"general.architecture": arch, arch + ".block_count": n_layer,
           arch + ".context_length": 256, arch + ".embedding_length": dim,
           arch + ".feed_forward_length": ffn, arch + ".attention.head_count": n_head,
           arch + ".attention.head_count_kv": n_kv, arch + ".attention.key_length": hd,
           arch + ".attention.value_length": hd, arch + ".rope.freq_base": base,
           arch + ".rope.dimension_count": rope_dim or hd,
           arch + ".attention.layer_norm_rms_epsilon": 1e-6}
    kvs.update(extra_kv or {})
    t = [("token_embd.weight", rng.standard_normal((vocab, dim)).astype(np.float32)),
         ("output_norm.weight", norm(dim))]
    if not tied:
        t.append(("output.weight", w(vocab, dim)))
    for l in range(n_layer):
        p = "blk.%d." % l
        t += [(p + "attn_norm.weight", norm(dim)),
              (p + "attn_q.weight", w(n_head * hd, dim)),
              (p + "attn_k.weight", w(n_kv * hd, dim)),
              (p + "attn_v.weight", w(n_kv * hd, dim)),
              (p + "attn_output.weight", w(dim, n_head * hd)),
              (p + "ffn_norm.weight", norm(dim)),
              (p + "ffn_gate.weight", w(ffn, dim)),
              (p + "ffn_up.weight", w(ffn, dim)),
              (p + "ffn_down.weight", w(dim, ffn))]
        if biases:
            t += [(p + "attn_q.bias", (0.5 * rng.standard_normal(n_head * hd)).astype(np.float32)),
                  (p + "attn_k.bias", (0.5 * rng.standard_normal(n_kv * hd)).astype(np.float32)),
                  (p + "attn_v.bias", (0.5 * rng.standard_normal(n_kv * hd)).astype(np.float32))]
    t += extra_t or []
    if override:
        t = [(n, override.get(n, x)) for n, x in t]
    return kvs, t


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1234)
    write_gguf(os.path.join(out, "qwen2-tied.gguf"),
               *model("qwen2", rng, base=1e6, biases=True, tied=True))
    write_gguf(os.path.join(out, "llama-linear.gguf"),
               *model("llama", rng, rope_dim=8,
                      extra_kv={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}))
    factors = np.array([1.0, 1.0, 1.5, 3.0, 6.0, 8.0, 8.0, 8.0], dtype=np.float32)
    write_gguf(os.path.join(out, "llama-ropefreqs.gguf"),
               *model("llama", rng, extra_t=[("rope_freqs.weight", factors)]))
    write_gguf(os.path.join(out, "llama-llama3.gguf"),
               *model("llama", rng, extra_kv={
                   "llama.rope.scaling.type": "llama3", "llama.rope.scaling.factor": 8.0,
                   "llama.rope.scaling.low_freq_factor": 1.0, "llama.rope.scaling.high_freq_factor": 4.0,
                   "llama.rope.scaling.original_context_length": 64}))
    for name, (arch, kw) in FAMILIES.items():
        write_gguf(os.path.join(out, name + ".gguf"), *family(arch, np.random.default_rng(len(name)), **kw))
        write_gguf(os.path.join(out, name + "-q8.gguf"),
                   *family(arch, np.random.default_rng(len(name)), quant=True, **kw))
    write_gguf(os.path.join(out, "bad-arch.gguf"), *model("gpt2", rng))
    # Q2_K: 256 elements per 84-byte block; attn_q of layer 1 is (64 rows, 64 cols) -> not a
    # multiple of 256 per row, so make it a square 256-wide... keep shapes valid for the
    # type check to be the reason: use ffn_down with ffn = 256.
    kv, t = model("llama", rng, ffn=256)
    t = [(n, (b"\0" * (84 * 64), [256, 64], 10)) if n == "blk.1.ffn_down.weight" else (n, x) for n, x in t]
    write_gguf(os.path.join(out, "bad-type.gguf"), kv, t)
    kv, t = model("llama", rng)
    t = [(n, x[:16] if n == "blk.0.attn_k.weight" else x) for n, x in t]
    write_gguf(os.path.join(out, "bad-shape.gguf"), kv, t)


if __name__ == "__main__":
    main()
