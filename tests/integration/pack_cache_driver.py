"""The packed-weight cache through real worker processes (driven by
pack_cache.sh; helpers from kv_disk_driver.py). Prints TAP-like lines.

Env: BUILD, TMP, MODEL_FILE (a Q4_K_M model: Q4_K and Q6_K matrices).
Every text is compared with a worker WITHOUT --kv-cache-dir (greedy):
  1. first worker with a folder: packs, registers, writes DIR/packed/*.pack
     on a thread while it serves, same texts;
  2. killed with -9, started again: reads the file (log "pack cache: read"),
     remembers the weights hash (log "remembered"), same texts;
  3. a flipped byte in the file's payload: the worker says the file is not
     used, serves the same texts, rewrites it; the next start reads it again;
  4. the file cut to half: rejected and rewritten the same way;
  5. a read-only folder (read-only bind mount, `unshare -m`; skipped where
     not allowed): one "pack cache off" line, same texts.
"""
import glob
import os
import sys

import kv_disk_driver as kd


def pack_files(d):
    return sorted(glob.glob(os.path.join(d, "packed", "*.pack")))


def flip_payload(f):
    with open(f, "r+b") as fh:
        fh.seek(-4096, 2)
        b = bytearray(fh.read(1))
        b[0] ^= 0x20
        fh.seek(-4096, 2)
        fh.write(bytes(b))


def loaded(t):
    """the worker took the packings from the file: read (copied) or mapped"""
    return "pack cache: read" in t or "pack cache: mapped" in t


def run():
    w = kd.Worker("ref")
    kd.check("a worker without a cache folder registers", w.ok, w.text()[-2000:])
    if not w.ok:
        return
    ref = [kd.post(p)[0] for p in kd.PROMPTS[:3]]
    w.term()
    d = os.path.join(kd.TMP, "cache")

    w = kd.Worker("p1", d)
    texts = [kd.post(p)[0] for p in kd.PROMPTS[:3]]
    kd.wait_until(lambda: "pack cache: wrote" in w.text(), 60)  # written after registering, on a thread
    files = pack_files(d)
    kd.check("first start: packs, writes one pack file, the same texts",
             texts == ref and len(files) == 1 and "pack cache: wrote" in w.text(), w.text()[-1500:])
    w.kill9()

    w = kd.Worker("p2", d)
    texts = [kd.post(p)[0] for p in kd.PROMPTS[:3]]
    kd.check("restart after kill -9: packed weights read from the file, weights hash remembered, the same texts",
             texts == ref and loaded(w.text()) and "remembered" in w.text(), w.text()[-1500:])
    w.term()
    if not files:
        return
    for what, damage in (("a flipped payload byte", flip_payload),
                         ("a file cut to half", lambda f: os.truncate(f, os.path.getsize(f) // 2))):
        size = os.path.getsize(files[0])
        damage(files[0])
        w = kd.Worker("p-" + what.split()[-2], d)
        texts = [kd.post(p)[0] for p in kd.PROMPTS[:3]]
        kd.wait_until(lambda: "pack cache: wrote" in w.text(), 60)  # the rewrite runs on a thread after registering
        t = w.text()
        w.term()
        kd.check("%s: the file is not used, the same texts, the file rewritten" % what,
                 texts == ref and "not used" in t and not loaded(t) and
                 "pack cache: wrote" in t and os.path.getsize(files[0]) == size, t[-1500:])
    w = kd.Worker("p3", d)
    texts = [kd.post(p)[0] for p in kd.PROMPTS[:3]]
    w.term()
    kd.check("after the rewrite the next start reads the file again, the same texts",
             texts == ref and loaded(w.text()), w.text()[-1500:])

    probe = kd.subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt && true"],
                              capture_output=True)
    if probe.returncode != 0:
        print("skip - read-only folder: unshare -m / mount not allowed here", flush=True)
        return
    ro_dir = os.path.join(kd.TMP, "ro")
    os.makedirs(ro_dir)
    ro = 'mount --bind "%s" "%s" && mount -o remount,bind,ro "%s" "%s" && exec "$@"' % ((ro_dir,) * 4)
    w = kd.Worker("p-ro", ro_dir, ro)
    texts = [kd.post(p)[0] for p in kd.PROMPTS[:3]] if w.ok else None
    rc = w.term()
    kd.check("read-only folder: one 'pack cache off' line, the same texts, clean exit",
             texts == ref and w.text().count("pack cache off") == 1 and rc == 0, w.text()[-1500:])


kd.main(run)
sys.exit(1 if kd.tap.n_failed() else 0)
