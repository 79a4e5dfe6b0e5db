"""The KV disk tier under fault (driven by kv_disk.sh). Prints TAP-like lines.

Env: BUILD, TMP, MODEL_FILE (stories260K or a generated model).
A gateway with no local worker; pagoda-worker processes started here, with
small KV pools, connect to it. Every text is compared with the text a worker
WITHOUT a disk tier gives (greedy), so "correct" means "the same tokens".
  1. restart: a worker with --kv-cache-dir serves P0..P3 (write-through puts
     their blocks on disk), is killed with -9 and started again: before any
     request the gateway's routing index already lists its disk blocks (KV
     events), and each prompt's first request after the restart is served
     from disk (usage cached_tokens = every full block but the last token's,
     vllm:external_prefix_cache_hits_total grows by as much), same text;
  1b. warm start: killed with -9 again and started with --kv-warm-percent
     100; once its log says the warm start ended (no timing assumed), each
     prompt's first request is served from RAM: cached = every full block
     but the last token's, same text, the worker's log says "0 loaded from
     the disk tier" for each prefix, and
     vllm:external_prefix_cache_hits_total does not move (step 1 runs with
     --kv-warm-percent 0: the disk path);
  2. clean stop: SIGTERM logs the hot set kept on disk and exits 0;
  3. corrupt and truncated files: every block file damaged (a flipped byte
     in half of them, truncated to half in the others); a new worker serves
     the same texts with no disk hit, pagoda_kv_disk_rejected_total > 0;
  4. two workers on one folder: both serve P0..P5 concurrently (and write
     the same blocks), then a third alone serves every prompt from disk,
     same texts, nothing rejected;
  q8_0 KV: a q8_0 worker finds none of the f32 blocks (another folder),
     and after kill -9 + restart serves its own from disk, same texts;
  5. a read-only folder (a read-only bind mount in a private mount
     namespace, `unshare -m`) and 6. a full one (a 64 KiB tmpfs): the worker
     serves the same texts, says once that it continues without a disk
     tier, and pagoda_kv_disk_enabled is 0. Skipped with a message where
     `unshare -m` is not allowed.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tap import check, free_port  # noqa: E402
import tap  # noqa: E402
import prom  # noqa: E402

BUILD, TMP, MODEL = os.environ["BUILD"], os.environ["TMP"], os.environ["MODEL_FILE"]
WORKER_ARGS = ["--kv-blocks", "20", "--max-seqs", "2", "--threads", "1", "--heartbeat-ms", "200"]
PROMPTS = [
    "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her "
    "friends. One day she saw a big red ball in the grass and she ran to get it. The ball was very shiny "
    "and she was happy. Her mom called her to come home but Lily wanted to play more.",
    "Tom had a small dog called Max. Every morning they walked to the river and looked at the fish. One "
    "day Max saw a frog and jumped into the water. Tom laughed and laughed. Then Max came out all wet and "
    "shook himself next to Tom, and Tom was wet too. They both went home to dry in the warm sun.",
    "There was a big tree in the middle of the town. The tree was very old and very tall. Birds lived in "
    "its branches and children played under it. One day a strong wind came and the tree was scared. The "
    "children held hands around the tree and sang a song, and the wind went away.",
    "Sue wanted to bake a cake for her friend Ben. She got flour, eggs and sugar from the kitchen. She "
    "mixed them in a bowl and put the bowl in the oven. The cake was big and brown and it smelled good. "
    "Ben came to her house and they ate the cake together and smiled.",
    "A little bunny lived in a hole under the garden. He liked to eat carrots and to hop in the grass. One "
    "night he saw the moon and wanted to touch it. He hopped and hopped but the moon was too high. His "
    "mom told him the moon was his friend and would watch over him while he slept.",
    "The red car and the blue car were friends. They raced on the road every day after school. The red "
    "car was fast but the blue car was kind. One day the red car got stuck in the mud and the blue car "
    "pulled him out. After that the red car was kind too, and they raced just for fun.",
]


HP, ZP = free_port(), free_port()
URL = "http://127.0.0.1:%d" % HP


def post(prompt, max_tokens=24):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    r = urllib.request.urlopen(urllib.request.Request(URL + "/v1/completions", body,
                                                      {"Content-Type": "application/json"}), timeout=120)
    j = json.load(r)
    u = j["usage"]
    return j["choices"][0]["text"], (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0), u


def metrics():
    return prom.metrics(URL)


metric = prom.metric


def settled(pred, secs=10):
    """Metrics arrive with heartbeats (200 ms): poll until pred(metrics()) holds."""
    end = time.time() + secs
    while True:
        m = metrics()
        if pred(m) or time.time() > end:
            return m
        time.sleep(0.1)


def health_workers():
    try:
        return json.load(urllib.request.urlopen(URL + "/health", timeout=10)).get("workers", [])
    except Exception:
        return []


def wait_until(pred, secs):
    end = time.time() + secs
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


class Worker:
    def __init__(self, name, kv_dir=None, wrap=None, extra=()):
        args = [BUILD + "/pagoda-worker", "--gateway", "tcp://127.0.0.1:%d" % ZP, "--model", "m=" + MODEL] + \
            WORKER_ARGS + list(extra)
        if kv_dir:
            args += ["--kv-cache-dir", kv_dir]
        self.log = os.path.join(TMP, name + ".log")
        self.logf = open(self.log, "w")
        if wrap:  # a shell script that ends with: exec "$@"
            args = ["unshare", "-m", "sh", "-c", wrap, "sh"] + args
        self.p = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT)
        self.ok = wait_until(lambda: self.replica() is not None or self.p.poll() is not None, 60) and \
            self.p.poll() is None

    def replica(self):
        for w in health_workers():
            if w.get("pid") == self.p.pid:
                return w.get("id")
        return None

    def kill9(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()
        self.logf.close()
        gone = wait_until(lambda: all(w.get("pid") != self.p.pid for w in health_workers()), 30)
        return gone

    def term(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = -9
        self.logf.close()
        wait_until(lambda: all(w.get("pid") != self.p.pid for w in health_workers()), 30)
        return rc

    def text(self):
        with open(self.log) as f:
            return f.read()


def full_blocks(u):
    return (u["prompt_tokens"] - 1) // 32 * 32


def block_files(d):
    return sorted(glob.glob(os.path.join(d, "*", "*.kvb")))


def main(body=None):
    """Starts the gateway (model MODEL, no local worker), runs body (run) against it."""
    gw_log = open(os.path.join(TMP, "gateway.log"), "w")
    gw = subprocess.Popen([BUILD + "/pagoda-gateway", "--listen", "127.0.0.1:%d" % HP, "--worker-endpoint",
                           "tcp://127.0.0.1:%d" % ZP, "--model", "m=" + MODEL, "--replicas", "0",
                           "--heartbeat-ms", "200"], stdout=gw_log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: urllib.request.urlopen(URL + "/health", timeout=2).status == 200, 30)
    except Exception:
        pass
    try:
        (body or run)()
    finally:
        gw.send_signal(signal.SIGTERM)
        try:
            gw.wait(timeout=30)
        except subprocess.TimeoutExpired:
            gw.kill()


def run():
    # reference: no disk tier
    w = Worker("ref")
    check("a worker without a disk tier registers", w.ok, w.text()[-2000:])
    if not w.ok:
        return
    ref = [post(p)[0] for p in PROMPTS]
    w.term()

    # 1. kill -9 and restart
    d1 = os.path.join(TMP, "d1")
    w = Worker("w1", d1)
    texts = [post(p)[0] for p in PROMPTS[:4]]
    check("disk tier: P0..P3 served as without it", texts == ref[:4])
    m = settled(lambda m: metric(m, "pagoda_kv_disk_written_bytes_total") > 0)
    check("blocks written through to disk (pagoda_kv_disk_written_bytes_total > 0)",
          metric(m, "pagoda_kv_disk_written_bytes_total") > 0 and len(block_files(d1)) >= 4 * 3,
          "%d files" % len(block_files(d1)))
    check("kill -9 of the worker", w.kill9())
    w = Worker("w1b", d1, extra=("--kv-warm-percent", "0"))
    check("restarted worker registers", w.ok, w.text()[-2000:])
    rid = w.replica()
    announced = wait_until(lambda: metric(metrics(), "pagoda_prefix_index_replica_entries", replica=rid) >= 12, 10)
    check("its disk blocks are in the routing index before any request (KV events)", announced,
          metric(metrics(), "pagoda_prefix_index_replica_entries", replica=rid))
    ext0 = metric(metrics(), "vllm:external_prefix_cache_hits_total")
    good = True
    total = 0
    for i in range(4):
        t, cached, u = post(PROMPTS[i])
        total += cached
        if t != ref[i] or cached != full_blocks(u) or cached == 0:
            good = False
            print("# P%d: cached %d of %d prompt tokens, text %s" % (i, cached, u["prompt_tokens"],
                                                                     "same" if t == ref[i] else "DIFFERENT"))
    check("after kill -9 + restart, each prompt's first request is served from disk, same text", good)
    ext = metric(settled(lambda m: metric(m, "vllm:external_prefix_cache_hits_total") - ext0 >= total),
                 "vllm:external_prefix_cache_hits_total") - ext0
    check("vllm:external_prefix_cache_hits_total grew by the cached tokens (%d)" % total, ext == total, ext)

    # 1b. warm start after kill -9
    check("kill -9 of the worker (again)", w.kill9())
    # a pool that holds every prompt's blocks with room to serve them (the
    # 20-block pool holds fewer than P0..P3's 17-21 full blocks plus a
    # request's own, so warm blocks would be evicted by the next prompt)
    w = Worker("w1w", d1, extra=("--kv-warm-percent", "100", "--kv-blocks", "64"))
    check("restarted worker (warm start on) registers", w.ok, w.text()[-2000:])
    warmed = wait_until(lambda: "loaded from the disk tier in" in w.text() and "kv warm start: " in w.text(), 60)
    check("its warm start ends (log line)", warmed, w.text()[-2000:])
    ext0 = metric(metrics(), "vllm:external_prefix_cache_hits_total")
    good = True
    total = 0
    for i in range(4):
        t, cached, u = post(PROMPTS[i])
        total += cached
        if t != ref[i] or cached != full_blocks(u) or cached == 0:
            good = False
            print("# P%d: cached %d of %d prompt tokens, text %s" % (i, cached, u["prompt_tokens"],
                                                                     "same" if t == ref[i] else "DIFFERENT"))
    check("after kill -9 + a warm start, each prompt's first request is served from RAM, same text", good)
    lines = [ln for ln in w.text().splitlines() if "prefix of" in ln]
    check("the worker's log: 4 prefixes, each with 0 loaded from the disk tier",
          len(lines) == 4 and all(", 0 loaded from the disk tier" in ln for ln in lines), "\n".join(lines))
    time.sleep(0.5)  # two heartbeats
    check("vllm:external_prefix_cache_hits_total did not move",
          metric(metrics(), "vllm:external_prefix_cache_hits_total") == ext0)

    # 2. clean stop
    rc = w.term()
    check("SIGTERM: exits 0 and logs the hot set kept on disk",
          rc == 0 and "cached blocks on disk at stop" in w.text(), "rc %d" % rc)

    # 3. corrupt and truncated files
    files = block_files(d1)
    for i, f in enumerate(files):
        b = bytearray(open(f, "rb").read())
        if i % 2 == 0:
            b[len(b) // 2] ^= 0x40
        else:
            b = b[: len(b) // 2]
        open(f, "wb").write(bytes(b))
    rej0 = metric(metrics(), "pagoda_kv_disk_rejected_total")
    w = Worker("w1c", d1)
    ext0 = metric(metrics(), "vllm:external_prefix_cache_hits_total")
    res = [post(p) for p in PROMPTS[:4]]
    check("corrupt/truncated files: the same texts", [r[0] for r in res] == ref[:4])
    m = settled(lambda m: metric(m, "pagoda_kv_disk_rejected_total") - rej0 >= len(files) // 2)
    check("corrupt/truncated files: nothing served from disk, pagoda_kv_disk_rejected_total > 0",
          metric(m, "vllm:external_prefix_cache_hits_total") == ext0 and all(r[1] == 0 for r in res)
          and metric(m, "pagoda_kv_disk_rejected_total") - rej0 >= len(files) // 2,
          "rejected %s of %d files, cached %s" % (metric(m, "pagoda_kv_disk_rejected_total"), len(files),
                                                  [r[1] for r in res]))
    w.term()

    # 4. two workers, one folder
    d2 = os.path.join(TMP, "d2")
    a, b = Worker("w2a", d2), Worker("w2b", d2)
    check("two workers on one folder register", a.ok and b.ok)
    out = [None] * (2 * len(PROMPTS))

    def one(k):
        out[k] = post(PROMPTS[k % len(PROMPTS)])[0]
    ts = [threading.Thread(target=one, args=(k,)) for k in range(len(out))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check("two workers on one folder: concurrent requests, the same texts",
          out == ref + ref, [i for i in range(len(out)) if out[i] != ref[i % len(ref)]])
    a.term()
    b.term()
    rej0 = metric(metrics(), "pagoda_kv_disk_rejected_total")
    c = Worker("w2c", d2)
    res = [post(p) for p in PROMPTS]
    m = metrics()
    check("a third worker on that folder: every prompt from disk, the same texts, nothing rejected",
          [r[0] for r in res] == ref and all(r[1] == full_blocks(r[2]) > 0 for r in res)
          and metric(m, "pagoda_kv_disk_rejected_total") == rej0,
          "cached %s, rejected %s -> %s" % ([r[1] for r in res], rej0, metric(m, "pagoda_kv_disk_rejected_total")))
    c.term()

    # q8_0 KV: its own folder identity; the same texts from disk as from its RAM
    w = Worker("q8ref", extra=("--kv-type", "q8_0"))
    ref8 = [post(p)[0] for p in PROMPTS[:2]]
    w.term()
    w = Worker("q8a", d2, extra=("--kv-type", "q8_0"))
    res = [post(p) for p in PROMPTS[:2]]
    check("a q8_0 worker on a folder of f32 blocks of the same model loads none of them",
          all(r[1] == 0 for r in res) and [r[0] for r in res] == ref8, [r[1] for r in res])
    w.kill9()
    w = Worker("q8b", d2, extra=("--kv-type", "q8_0"))
    res = [post(p) for p in PROMPTS[:2]]
    check("q8_0 after kill -9 + restart: served from disk, the same texts as q8_0 without a disk tier",
          [r[0] for r in res] == ref8 and all(r[1] == full_blocks(r[2]) > 0 for r in res), [r[1] for r in res])
    w.term()
    check("q8_0 blocks sit in a folder of their own",
          len({os.path.dirname(f) for f in block_files(d2)}) == 2)

    # 5, 6. read-only and full folders, in a private mount namespace
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt && true"],
                           capture_output=True)
    if probe.returncode != 0:
        print("skip - read-only and full folders: unshare -m / mount not allowed here (%s)"
              % probe.stderr.decode().strip()[:120], flush=True)
        return
    ident = os.path.basename(os.path.dirname(block_files(d1)[0]))
    d3 = os.path.join(TMP, "d3")
    os.makedirs(os.path.join(d3, ident))
    ro = 'mount --bind "%s" "%s" && mount -o remount,bind,ro "%s" "%s" && exec "$@"' % (d3, d3, d3, d3)
    d4 = os.path.join(TMP, "d4")
    os.makedirs(d4)
    full = 'mount -t tmpfs -o size=64k,mode=0700 tmpfs "%s" && exec "$@"' % d4  # 0700: a world-writable folder is refused
    for name, kv_dir, wrap in (("read-only", d3, ro), ("full", d4, full)):
        w = Worker("w-" + name, kv_dir, wrap)
        check("%s folder: the worker registers" % name, w.ok, w.text()[-1500:])
        if not w.ok:
            continue
        rid = w.replica()
        res = [post(p)[0] for p in PROMPTS[:3]]
        m = settled(lambda m: any(k.startswith("pagoda_kv_disk_enabled") and rid in k for k in m) and
                    metric(m, "pagoda_kv_disk_enabled", replica=rid) == 0)  # the heartbeat after the tier went off
        check("%s folder: the same texts" % name, res == ref[:3])
        check("%s folder: pagoda_kv_disk_enabled 0" % name,
              metric(m, "pagoda_kv_disk_enabled", replica=rid) == 0 and
              any(k.startswith("pagoda_kv_disk_enabled") and rid in k for k in m))
        rc = w.term()
        n_lines = w.text().count("continuing without a disk tier")
        check("%s folder: one log line, clean exit" % name, n_lines == 1 and rc == 0,
              "%d lines, rc %d\n%s" % (n_lines, rc, w.text()[-1500:]))


if __name__ == "__main__":
    main()
    sys.exit(1 if tap.n_failed() else 0)
