#!/usr/bin/env python3
"""Writes the three test images the vision comparisons use, as binary PPM
(P6) files of SIDE x SIDE pixels: a gradient, a checkerboard (14 px
squares), seeded noise (an LCG, the same bytes on every machine) — the
images tests/worker/model/test_vision.c makes in C.

    vision_images.py OUTDIR SIDE   → OUTDIR/{gradient,checker,noise}.ppm
"""
import os
import sys


def images(side):
    grad, chk, noise = bytearray(), bytearray(), bytearray()
    seed = 12345
    for y in range(side):
        for x in range(side):
            grad += bytes([x * 255 // (side - 1), y * 255 // (side - 1), (x + y) * 255 // (2 * side - 2)])
            on = ((x // 14) + (y // 14)) % 2
            chk += bytes([230, 40, 90] if on else [20, 200, 160])
            for _ in range(3):
                seed = (seed * 1664525 + 1013904223) & 0xFFFFFFFF
                noise.append(seed >> 24)
    return {"gradient": grad, "checker": chk, "noise": noise}


def main():
    out, side = sys.argv[1], int(sys.argv[2])
    for name, px in images(side).items():
        with open(os.path.join(out, name + ".ppm"), "wb") as f:
            f.write(b"P6\n%d %d\n255\n" % (side, side))
            f.write(bytes(px))


if __name__ == "__main__":
    main()
