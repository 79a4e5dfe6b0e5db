"""gguf_ref.py — a small, independent GGUF reader for the NumPy references.

Written from the GGUF specification (little-endian header, metadata key/values,
tensor infos, aligned data section); it shares no code with common/text/gguf.c so the
reference forward pass does not inherit the C reader's mistakes.

Tensors come back as numpy arrays shaped like the math uses them: GGUF lists
dimensions fastest-first (ne[0] is the row length), numpy wants slowest-first,
so a tensor with ne = [cols, rows] becomes an array of shape (rows, cols).
Types decoded here: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K (the shared
dequant-f32 test files are F32; dequant_gguf.py makes the build's stand-ins of
them with the decoders here, written from the GGUF block layouts).
"""
import struct
import sys

import numpy as np

GGUF_MAGIC = 0x46554747

# metadata value types -> struct format (scalars)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
           7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
T_STRING, T_ARRAY = 8, 9

TYPE_F32, TYPE_F16, TYPE_Q4_0, TYPE_Q8_0, TYPE_BF16 = 0, 1, 2, 8, 30
TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K = 12, 13, 14
# bytes per block and elements per block of the block-quantized types
BLOCK = {TYPE_Q4_0: (18, 32), TYPE_Q8_0: (34, 32), TYPE_Q4_K: (144, 256),
         TYPE_Q5_K: (176, 256), TYPE_Q6_K: (210, 256)}


def _f16(raw):
    """(nb, 2) uint8 -> (nb, 1) float32 from little-endian IEEE half."""
    return raw.copy().view("<f2").astype(np.float32)


def _k_scales(sc):
    """Q4_K / Q5_K: 12 bytes per block -> (nb, 8) 6-bit scales and mins.
    Sub-blocks 0-3: low 6 bits of bytes 0-3 (scale) and 4-7 (min); 4-7: the
    low / high nibble of bytes 8-11 with the top two bits of bytes 0-3 / 4-7."""
    sc = sc.astype(np.int32)
    scale = np.empty((sc.shape[0], 8), np.int32)
    mn = np.empty((sc.shape[0], 8), np.int32)
    for j in range(4):
        scale[:, j] = sc[:, j] & 63
        mn[:, j] = sc[:, j + 4] & 63
        scale[:, j + 4] = (sc[:, j + 8] & 15) | ((sc[:, j] >> 6) << 4)
        mn[:, j + 4] = (sc[:, j + 8] >> 4) | ((sc[:, j + 4] >> 6) << 4)
    return scale.astype(np.float32), mn.astype(np.float32)


def _dequant(t, raw):
    """raw: (nb, block bytes) uint8 of type t -> (nb, block elements) float32."""
    if t == TYPE_Q8_0:
        # f16 scale d, then 32 int8 q; value = d * q
        return _f16(raw[:, :2]) * raw[:, 2:].copy().view(np.int8).astype(np.float32)
    if t == TYPE_Q4_0:
        # f16 d, 16 bytes: element j < 16 is the low nibble of byte j, element
        # 16 + j its high nibble; value = d * (nibble - 8)
        q = raw[:, 2:].astype(np.int32)
        return _f16(raw[:, :2]) * (np.concatenate([q & 15, q >> 4], axis=1) - 8).astype(np.float32)
    if t in (TYPE_Q4_K, TYPE_Q5_K):
        # f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, [Q5_K: 32 bytes of
        # fifth bits], 128 bytes of nibbles; 4 chunks of 64 elements: the low
        # nibbles of 32 bytes are sub-block 2c, the high ones 2c + 1;
        # value = d * scale * q - dmin * min
        d, dmin = _f16(raw[:, 0:2]), _f16(raw[:, 2:4])
        scale, mn = _k_scales(raw[:, 4:16])
        qh = raw[:, 16:48].astype(np.int32) if t == TYPE_Q5_K else None
        qs = raw[:, 48:176] if t == TYPE_Q5_K else raw[:, 16:144]
        qs = qs.astype(np.int32)
        out = np.empty((raw.shape[0], 256), np.float32)
        for c in range(4):
            chunk = qs[:, 32 * c:32 * c + 32]
            for half, q in enumerate((chunk & 15, chunk >> 4)):
                sb = 2 * c + half
                if qh is not None:
                    q = q + ((qh >> sb) & 1) * 16
                out[:, 32 * sb:32 * sb + 32] = d * scale[:, sb:sb + 1] * q - dmin * mn[:, sb:sb + 1]
        return out
    if t == TYPE_Q6_K:
        # 128 bytes of low nibbles (ql), 64 of high 2-bit pairs (qh), 16 int8
        # scales, f16 d; two halves of 128 elements, each four rows of 32:
        # row r takes the low (r = 0, 1) or high (r = 2, 3) nibble of
        # ql[half][32 * (r & 1) + l] and bits 2r..2r+1 of qh[half][l];
        # value = d * scale[16-element group] * (q - 32)
        ql, qh = raw[:, :128].astype(np.int32), raw[:, 128:192].astype(np.int32)
        sc = raw[:, 192:208].copy().view(np.int8).astype(np.float32)
        d = _f16(raw[:, 208:210])
        out = np.empty((raw.shape[0], 256), np.float32)
        for h in range(2):
            L, H = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32]
            for r in range(4):
                lo = L[:, 32 * (r & 1):32 * (r & 1) + 32]
                lo = lo & 15 if r < 2 else lo >> 4
                q = (lo | (((H >> (2 * r)) & 3) << 4)) - 32
                base = 128 * h + 32 * r
                for g in range(2):
                    s_idx = 8 * h + 2 * r + g
                    out[:, base + 16 * g:base + 16 * g + 16] = d * sc[:, s_idx:s_idx + 1] * q[:, 16 * g:16 * g + 16]
        return out
    return None
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
        self.kv_end = self.pos  # end of the metadata (dequant_gguf.py copies it as is)
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
        elif t in BLOCK:
            nbytes, nel = BLOCK[t]
            nb = n // nel
            raw = np.frombuffer(self.buf, dtype=np.uint8, count=nb * nbytes, offset=off).reshape(nb, nbytes)
            a = _dequant(t, raw).reshape(-1)
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
