"""gguf_ref.py — a small, independent GGUF reader for the NumPy references.

Written from the GGUF specification (little-endian header, metadata key/values,
tensor infos, aligned data section); it shares no code with common/text/gguf.c so the
reference forward pass does not inherit the C reader's mistakes.

Tensors come back as numpy arrays shaped like the math uses them: GGUF lists
dimensions fastest-first (ne[0] is the row length), numpy wants slowest-first,
so a tensor with ne = [cols, rows] becomes an array of shape (rows, cols).
Types decoded here: F32, F16, BF16, Q8_0 (the dequant-f32 test files are F32;
the others are for convenience).
"""
import struct
import sys

import numpy as np

GGUF_MAGIC = 0x46554747

# metadata value types -> struct format (scalars)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
           7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
T_STRING, T_ARRAY = 8, 9

TYPE_F32, TYPE_F16, TYPE_Q8_0, TYPE_BF16 = 0, 1, 8, 30
TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1",
              8: "Q8_0", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K",
              13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16"}


class GGUF:
    """Parsed GGUF file: .kv (dict key -> value), .tensors (dict name -> info)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        magic, self.version = self._unpack("<II")
        if magic != GGUF_MAGIC:
            raise ValueError("%s: not a GGUF file" % path)
        if self.version not in (2, 3):
            raise ValueError("%s: GGUF version %d unsupported" % (path, self.version))
        n_tensors, n_kv = self._unpack("<QQ")
        self.kv = {}
        for _ in range(n_kv):
            key = self._str()
            (vtype,) = self._unpack("<I")
            self.kv[key] = self._value(vtype)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str()
            (n_dims,) = self._unpack("<I")
            ne = list(self._unpack("<%dQ" % n_dims))
            ttype, offset = self._unpack("<IQ")
            self.tensors[name] = {"ne": ne, "type": ttype, "offset": offset}
        align = int(self.kv.get("general.alignment", 32))
        self.data_start = (self.pos + align - 1) // align * align

    def _unpack(self, fmt):
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals

    def _str(self):
        (n,) = self._unpack("<Q")
        s = self.buf[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def _value(self, vtype):
        if vtype == T_STRING:
            return self._str()
        if vtype == T_ARRAY:
            etype, n = self._unpack("<IQ")
            if etype in _SCALAR and etype != 7:
                dt = np.dtype(_SCALAR[etype])
                arr = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos)
                self.pos += n * dt.itemsize
                return arr
            return [self._value(etype) for _ in range(n)]
        (v,) = self._unpack(_SCALAR[vtype])
        return v

    def arch(self):
        return self.kv["general.architecture"]

    def get(self, key, default=None):
        return self.kv.get(key, default)

    def has(self, name):
        return name in self.tensors

    def tensor(self, name):
        """The tensor as float32, numpy shape = reversed(ne)."""
        info = self.tensors[name]
        ne, t = info["ne"], info["type"]
        n = 1
        for d in ne:
            n *= d
        off = self.data_start + info["offset"]
        shape = tuple(reversed(ne))
        if t == TYPE_F32:
            a = np.frombuffer(self.buf, dtype="<f4", count=n, offset=off)
        elif t == TYPE_F16:
            a = np.frombuffer(self.buf, dtype="<f2", count=n, offset=off).astype(np.float32)
        elif t == TYPE_BF16:
            u = np.frombuffer(self.buf, dtype="<u2", count=n, offset=off).astype(np.uint32)
            a = (u << 16).view(np.float32)
        elif t == TYPE_Q8_0:
            # block of 32: f16 scale d, then 32 int8 q; value = d * q
            nb = n // 32
            raw = np.frombuffer(self.buf, dtype=np.uint8, count=nb * 34, offset=off).reshape(nb, 34)
            d = raw[:, :2].copy().view("<f2").astype(np.float32)
            q = raw[:, 2:].copy().view(np.int8).astype(np.float32)
            a = (d * q).reshape(-1)
        else:
            raise ValueError("tensor %s: type %s not decoded by the reference"
                             % (name, TYPE_NAMES.get(t, str(t))))
        return np.array(a, dtype=np.float32).reshape(shape)


if __name__ == "__main__":
    g = GGUF(sys.argv[1])
    for k, v in g.kv.items():
        if isinstance(v, (list, np.ndarray)) and len(v) > 8:
            print("%s = [%d items]" % (k, len(v)))
        else:
            print("%s = %r" % (k, v))
    for name, info in g.tensors.items():
        print("%-32s %-5s ne=%s" % (name, TYPE_NAMES.get(info["type"], info["type"]), info["ne"]))
