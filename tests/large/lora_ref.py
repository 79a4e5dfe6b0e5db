#!/usr/bin/env python3
"""lora_ref.py — pagoda's logits with LoRA adapters on a real-size base
against tests/ref/llama_ref.py (float64, W += s·B·A), for tests/large/lora_ref.sh.

usage: lora_ref.py --run PAGODA_RUN --base BASE.gguf --a8 A8.gguf --a64 A64.gguf
                   --tmp DIR [--tol 1e-4] [--len 32] [--threads 2]

One token sequence (BOS then len-1 seeded random ids), five cases: the base
alone, the rank-8 adapter at scales 1 and 0.5, the rank-64 one at 1 and 0.5.
The reference loads the base once (dequantized to float64 by gguf_ref.py),
adds s·B·A for a case and subtracts it after. pagoda: `pagoda-run --tokens
--logits --exact-matmul` (float matmuls over the dequantized weights; its
default int8 kernels round activations to 8 bits, and that rounding, not the
adapter, would set the tolerance — printed too, for information).

Per case, over every logit of every position:
    err = max |pagoda - ref| / max(1, max |ref|)      must be <= tol (1e-4)
(measured on the 110M Q8_0 base: 7e-7 to 9e-7 in all five cases, so 1e-4
leaves float32 summation order a hundredfold room and still fails for an
adapter off by 1e-4 of the logits' scale; the int8 kernels' 2e-2 is printed)
and the adapter must matter: max |ref_case - ref_base| / max(1, max |ref_base|)
must be >= 100 x tol (else the check could not see a wrong adapter).
Prints TAP lines (ok / not ok).
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
from llama_ref import Model  # noqa: E402


def pagoda(a, ids, loras, exact):
    out = os.path.join(a.tmp, "pagoda.f32")
    cmd = [a.run, "-m", a.base, "--tokens", ",".join(map(str, ids)), "--logits", out, "--kv-type", "f32",
           "--threads", str(a.threads)]
    cmd += ["--exact-matmul"] if exact else []
    for i, (path, s) in enumerate(loras):
        cmd += ["--lora", f"x{i}={path}:{s:g}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pagoda-run failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return np.fromfile(out, dtype="<f4").astype(np.float64).reshape(len(ids), -1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--a8", required=True)
    ap.add_argument("--a64", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--len", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    name = os.path.basename(a.base)
    t0 = time.time()
    m = Model(a.base)
    print(f"# {name}: reference loaded in {time.time() - t0:.0f} s", flush=True)
    rng = np.random.default_rng(7)
    ids = [1] + [int(t) for t in rng.integers(259, m.out.shape[0], a.len - 1)]
    cases = [("none", []), ("a8@1", [(a.a8, 1.0)]), ("a8@0.5", [(a.a8, 0.5)]), ("a64@1", [(a.a64, 1.0)]),
             ("a64@0.5", [(a.a64, 0.5)])]
    ref_base = None
    bad = 0
    for cname, loras in cases:
        for path, s in loras:
            m.apply_lora(path, s)
        t1 = time.time()
        ref = m.forward(ids)
        for path, s in loras:
            m.apply_lora(path, -s)  # back to the base (float64: exact to ~1e-16)
        if ref_base is None:
            ref_base = ref
        scale = max(1.0, float(np.abs(ref).max()))
        try:
            got = pagoda(a, ids, loras, True)
            fast = pagoda(a, ids, loras, False)
        except RuntimeError as e:
            print(f"not ok - {name} {cname}: {e}")
            bad += 1
            continue
        err = float(np.abs(got - ref).max()) / scale
        err8 = float(np.abs(fast - ref).max()) / scale
        eff = float(np.abs(ref - ref_base).max()) / max(1.0, float(np.abs(ref_base).max()))
        print(f"# {name} {cname}: max|ref| {scale:.3f}; exact-matmul err {err:.2e}, int8 kernels err {err8:.2e} "
              f"(information), adapter effect {eff:.3e} (ref {time.time() - t1:.0f} s)", flush=True)
        ok = err <= a.tol
        print(f"{'ok' if ok else 'not ok'} - {name} {cname}: pagoda --exact-matmul logits = NumPy reference "
              f"within {a.tol:g} x max(1, max|ref|) ({err:.2e}, {len(ids)} positions x {ref.shape[1]})")
        bad += not ok
        if loras:
            ok = eff >= 100 * a.tol
            print(f"{'ok' if ok else 'not ok'} - {name} {cname}: the adapter moves the reference logits by "
                  f"{eff:.3e} >= 100 x tol")
            bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
