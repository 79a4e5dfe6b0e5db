"""dequant_gguf.py — writes every tensor of a GGUF dequantized to F32.

Usage: dequant_gguf.py IN.gguf OUT.gguf

The same metadata (copied byte for byte) and tensor names, in the same order;
each tensor decoded by gguf_ref.py (NumPy, written from the block layouts, no
code shared with pagoda's dequantizers) and stored as F32. The Makefile makes
the stand-ins of ../shared/models/zoo/zoo-TYPE.dequant-f32.gguf with it, which
tests compare pagoda's dequantized weights and forward pass against.
"""
import struct
import sys

import numpy as np

from gguf_ref import GGUF


def main(src, dst):
    g = GGUF(src)
    align = int(g.kv.get("general.alignment", 32))
    names = sorted(g.tensors, key=lambda n: g.tensors[n]["offset"])
    # header: magic, version, counts, then the metadata as it was
    out = bytearray(g.buf[:24])
    out += g.buf[24:g.kv_end]
    datas, off = [], 0
    for name in names:
        ne = g.tensors[name]["ne"]
        data = np.ascontiguousarray(g.tensor(name), dtype="<f4").tobytes()
        b = name.encode("utf-8")
        out += struct.pack("<Q", len(b)) + b + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", 0, off)
        datas.append(data)
        off += (len(data) + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    for data in datas:
        out += data + b"\0" * ((-len(data)) % align)
    with open(dst, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: dequant_gguf.py IN.gguf OUT.gguf")
    main(sys.argv[1], sys.argv[2])
