"""Files only their owner reads (driven by private_files.sh). TAP-like lines.

As a second local user (nobody, `setpriv --reuid=nobody --regid=nogroup
--clear-groups`) and as anyone who can write into the folder:
  a. the disk tier's block files, folders and key are 0600/0700: nobody can
     neither list the folder nor read a block; the pack cache likewise; the
     gateway's state dir and database too;
  b. a --kv-cache-dir pre-created by nobody (or world-writable) is refused at
     start-up with a message naming the path and the fix; nobody cannot plant
     a symlink in our folder; a symlink planted at every block's name (by one
     who could write there) is never followed: its target is unchanged and
     the texts are the same;
  c. forged blocks — the payload edited, or a whole folder written by a
     worker with another key copied in — are rejected, counted
     (pagoda_kv_disk_rejected_total) and never served (same texts).
"""
import glob
import os
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import kv_disk_driver as kd  # noqa: E402  (its gateway, worker and metric helpers)

check, post, metric, settled, Worker, TMP, BUILD = (kd.check, kd.post, kd.metric, kd.settled, kd.Worker, kd.TMP,
                                                    kd.BUILD)
PROMPTS = kd.PROMPTS[:3]
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def nobody(*cmd):
    """Runs cmd as nobody: (exit code, output)."""
    p = subprocess.run(AS_NOBODY + list(cmd), capture_output=True, text=True)
    return p.returncode, (p.stdout + p.stderr).strip()


def mode(p):
    return stat.S_IMODE(os.lstat(p).st_mode)


def run():
    ref_w = Worker("ref")
    check("a worker without a disk tier registers", ref_w.ok, ref_w.text()[-2000:])
    if not ref_w.ok:
        return
    ref = [post(p)[0] for p in PROMPTS]
    ref_w.term()

    d = os.path.join(TMP, "kv")
    old = os.umask(0)  # a careless umask must not open anything up
    w = Worker("w1", d)
    os.umask(old)
    texts = [post(p)[0] for p in PROMPTS]
    check("disk tier on: same texts", texts == ref)
    settled(lambda m: metric(m, "pagoda_kv_disk_written_bytes_total") > 0)
    w.term()
    blocks = kd.block_files(d)
    check("blocks were written (%d)" % len(blocks), len(blocks) >= 3)
    if not blocks:
        return
    # a. private files
    sub = os.path.dirname(blocks[0])
    key = d + ".key"
    dirs = [d, sub] + [p for p in glob.glob(os.path.join(d, "**"), recursive=True) if os.path.isdir(p)]
    files = blocks + [p for p in glob.glob(os.path.join(d, "**", "*"), recursive=True) if os.path.isfile(p)]
    check("(a) every folder under --kv-cache-dir is 0700 (umask 0 at start)", all(mode(p) == 0o700 for p in dirs),
          ["%s %o" % (p, mode(p)) for p in dirs if mode(p) != 0o700])
    check("(a) every file under it is 0600", all(mode(p) == 0o600 for p in files),
          ["%s %o" % (p, mode(p)) for p in files if mode(p) != 0o600])
    check("(a) the MAC key DIR.key is outside the folder, 0600", os.path.isfile(key) and mode(key) == 0o600)
    rc, out = nobody("cat", blocks[0])
    check("(a) nobody cannot read a block file (the prompt's token ids)", rc != 0 and "ermission" in out, out)
    rc, out = nobody("ls", sub)
    check("(a) nobody cannot list the tier's folder", rc != 0, out)
    rc, out = nobody("cat", key)
    check("(a) nobody cannot read the MAC key", rc != 0, out)
    packs = glob.glob(os.path.join(d, "packed", "*.pack"))
    if packs:
        rc, out = nobody("cat", packs[0])
        check("(a) nobody cannot read the pack file", rc != 0, out)

    # b. folders others could write
    pub = os.path.join(TMP, "pub")  # a folder anyone may create in, as /tmp
    os.mkdir(pub)
    os.chmod(pub, 0o1777)
    evil = os.path.join(pub, "pagoda-kv")
    rc, out = nobody("mkdir", "-m", "700", evil)
    check("(b) nobody pre-creates a kv folder", rc == 0, out)
    w = Worker("w_evil", evil)
    if w.ok:
        w.term()
    check("(b) a --kv-cache-dir owned by nobody is refused at start-up, naming the path and the fix",
          not w.ok and w.p.wait() != 0 and evil in w.text() and "chown" in w.text(), w.text()[-1500:])
    ww = os.path.join(TMP, "ww-kv")
    os.mkdir(ww)
    os.chmod(ww, 0o777)
    w = Worker("w_ww", ww)
    if w.ok:
        w.term()
    check("(b) a world-writable --kv-cache-dir is refused, naming `chmod 700`",
          not w.ok and w.p.wait() != 0 and "chmod 700 " + ww in w.text(), w.text()[-1500:])
    rc, out = nobody("ln", "-s", "/etc/passwd", os.path.join(sub, ".tmp-planted"))
    check("(b) nobody cannot plant a symlink at a temporary's name in our folder", rc != 0, out)
    victim = os.path.join(TMP, "victim.txt")
    with open(victim, "w") as f:
        f.write("precious\n")
    for b in blocks:  # as one who could write there: every block a link to the victim
        os.unlink(b)
        os.symlink(victim, b)
    for p in glob.glob(os.path.join(d, "packed", "*.pack")):
        os.unlink(p)
        os.symlink(victim, p)
    w = Worker("w_links", d)
    texts = [post(p)[0] for p in PROMPTS]
    w.term()
    check("(b) symlinks planted at every block's and the pack file's name: never followed, the target unchanged, "
          "same texts", open(victim).read() == "precious\n" and texts == ref and w.ok, w.text()[-1500:])

    # c. forged blocks
    w = Worker("w2", d)
    [post(p) for p in PROMPTS]
    w.term()
    blocks = kd.block_files(d)
    for b in blocks:  # the payload edited, the MAC kept (a forger cannot make a new one)
        x = bytearray(open(b, "rb").read())
        x[96 + 4 * 32 + 8] ^= 0x55
        open(b, "wb").write(x)
    w = Worker("w3", d)
    rej0 = metric(kd.metrics(), "pagoda_kv_disk_rejected_total")
    texts = [post(p)[0] for p in PROMPTS]
    m = settled(lambda m: metric(m, "pagoda_kv_disk_rejected_total") - rej0 >= 1)
    w.term()
    check("(c) edited blocks: rejected and counted (pagoda_kv_disk_rejected_total +%d), same texts" %
          (metric(m, "pagoda_kv_disk_rejected_total") - rej0),
          texts == ref and metric(m, "pagoda_kv_disk_rejected_total") - rej0 >= 1)
    other = os.path.join(TMP, "other-kv")  # another installation, another key
    w = Worker("w_other", other)
    [post(p) for p in PROMPTS]
    w.term()
    n_copied = 0
    for b in kd.block_files(other):
        dst = os.path.join(sub, os.path.basename(b))
        shutil.copyfile(b, dst)
        os.chmod(dst, 0o600)
        n_copied += 1
    w = Worker("w4", d)
    rej0 = metric(kd.metrics(), "pagoda_kv_disk_rejected_total")
    res = [post(p) for p in PROMPTS]
    m = settled(lambda m: metric(m, "pagoda_kv_disk_rejected_total") - rej0 >= 1)
    w.term()
    check("(c) %d blocks copied in from a folder with another key: rejected (%d), none served, same texts" %
          (n_copied, metric(m, "pagoda_kv_disk_rejected_total") - rej0),
          [r[0] for r in res] == ref and all(r[1] == 0 for r in res) and
          metric(m, "pagoda_kv_disk_rejected_total") - rej0 >= 1 and "another key" in w.text(),
          [r[1] for r in res])

    # the gateway's state dir: pre-created by nobody → refused
    st = os.path.join(pub, "pagoda-state")
    nobody("mkdir", "-m", "700", st)
    p = subprocess.run([BUILD + "/pagoda-gateway", "--listen", "127.0.0.1:%d" % kd.free_port(), "--worker-endpoint",
                        "tcp://127.0.0.1:%d" % kd.free_port(), "--model", "m=" + kd.MODEL, "--replicas", "0",
                        "--state-dir", st], capture_output=True, text=True, timeout=30)
    check("a --state-dir owned by nobody: the gateway does not start, naming the path",
          p.returncode != 0 and st in p.stderr + p.stdout, (p.stderr + p.stdout)[-800:])
    state = os.path.join(TMP, "xdg-state", "pagoda")
    dbs = glob.glob(os.path.join(state, "*.sqlite3*"))
    check("the test gateway's state dir is 0700 and its database files 0600",
          os.path.isdir(state) and mode(state) == 0o700 and dbs and all(mode(f) == 0o600 for f in dbs),
          ["%s %o" % (f, mode(f)) for f in [state] + dbs])


if __name__ == "__main__":
    kd.main(run)
    sys.exit(1 if kd.tap.n_failed() else 0)
