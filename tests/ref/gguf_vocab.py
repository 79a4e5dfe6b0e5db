"""gguf_vocab.py — a minimal GGUF v3 reader/writer for tokenizer test data.

Independent of pagoda's C reader (tests/ref holds reference code run with
/usr/bin/python3). Only metadata matters here: the writer emits n_tensors = 0.

  read_kv(path)           -> dict key -> value (arrays as lists, strings as str
                             or bytes when not valid UTF-8)
  write_kv(path, items)   items: list of (key, type, value); type is one of the
                             GGUF_* names below; arrays are ("ARRAY", elem_type, list)
"""
import struct

T = dict(UINT8=0, INT8=1, UINT16=2, INT16=3, UINT32=4, INT32=5, FLOAT32=6, BOOL=7,
         STRING=8, ARRAY=9, UINT64=10, INT64=11, FLOAT64=12)
_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
        10: "<Q", 11: "<q", 12: "<d"}


def _read_val(b, off, t):
    if t == T["STRING"]:
        (n,) = struct.unpack_from("<Q", b, off)
        raw = bytes(b[off + 8: off + 8 + n])
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            s = raw
        return s, off + 8 + n
    if t == T["ARRAY"]:
        et, n = struct.unpack_from("<IQ", b, off)
        off += 12
        if et in _FMT and et != T["BOOL"]:
            sz = struct.calcsize(_FMT[et])
            vals = list(struct.unpack_from("<%d%s" % (n, _FMT[et][1]), b, off))
            return vals, off + sz * n
        out = []
        for _ in range(n):
            v, off = _read_val(b, off, et)
            out.append(v)
        return out, off
    fmt = _FMT[t]
    (v,) = struct.unpack_from(fmt, b, off)
    return v, off + struct.calcsize(fmt)


def read_kv(path):
    with open(path, "rb") as f:
        b = f.read()
    magic, ver, n_t, n_kv = struct.unpack_from("<IIQQ", b, 0)
    assert magic == 0x46554747, "not GGUF"
    off = 24
    kv = {}
    for _ in range(n_kv):
        key, off = _read_val(b, off, T["STRING"])
        (t,) = struct.unpack_from("<I", b, off)
        v, off = _read_val(b, off + 4, t)
        kv[key] = v
    return kv


def _enc_val(t, v, et=None):
    if t == T["STRING"]:
        raw = v if isinstance(v, bytes) else v.encode("utf-8")
        return struct.pack("<Q", len(raw)) + raw
    if t == T["ARRAY"]:
        parts = [struct.pack("<IQ", et, len(v))]
        if et in _FMT:
            parts.append(struct.pack("<%d%s" % (len(v), _FMT[et][1]), *v))
        else:
            parts.extend(_enc_val(et, x) for x in v)
        return b"".join(parts)
    return struct.pack(_FMT[t], v)


def write_kv(path, items):
    """items: [(key, "UINT32", 5), (key, "ARRAY", "STRING", [...]), ...]"""
    out = [struct.pack("<IIQQ", 0x46554747, 3, 0, len(items))]
    for it in items:
        key, tn = it[0], it[1]
        out.append(_enc_val(T["STRING"], key))
        out.append(struct.pack("<I", T[tn]))
        if tn == "ARRAY":
            out.append(_enc_val(T["ARRAY"], it[3], T[it[2]]))
        else:
            out.append(_enc_val(T[tn], it[2]))
    data = b"".join(out)
    data += b"\0" * ((-len(data)) % 32)
    with open(path, "wb") as f:
        f.write(data)
