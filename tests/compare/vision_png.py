"""vision_png.py DIR NAME... — writes DIR/NAME.png with the pixels of
DIR/NAME.ppm (binary P6, maxval 255; as vision_images.py writes them):
an 8-bit RGB PNG, no filter, zlib-compressed, so a server that takes
PNG data URLs gets the same pixels the PPM gives pagoda-run and
llama-mtmd-cli."""
import os
import struct
import sys
import zlib


def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def ppm_to_png(ppm, png):
    head, px = open(ppm, "rb").read().split(b"\n255\n", 1)
    w, h = map(int, head.split()[1:3])
    rows = b"".join(b"\0" + px[y * w * 3:(y + 1) * w * 3] for y in range(h))
    with open(png, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


if __name__ == "__main__":
    for name in sys.argv[2:]:
        ppm_to_png(os.path.join(sys.argv[1], name + ".ppm"), os.path.join(sys.argv[1], name + ".png"))
