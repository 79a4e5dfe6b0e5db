"""Stored responses under faults (driven by store_faults.sh). TAP-like lines.

A gateway (keys a and b, a worker on MODEL_FILE) whose --state-dir is
  1. a 256 KiB tmpfs that fills up: every POST /v1/responses answered
     "store": true is readable afterwards (GET 200, byte for byte), every
     other one says "store": false with warning.code store_full (GET 404) —
     and after room is made, stores work again;
  2. locked by another process (python sqlite3, BEGIN EXCLUSIVE): a streamed
     response's last event waits for its store while /health, a GET of a
     stored response and a store-less POST all answer — before the lock
     holder lets go (no clock involved); a non-streamed store gives up after
     --responses-store-wait-ms with "store": false, warning store_busy, and
     is not there afterwards; after the release stores work again;
  3. over the key's byte quota (metadata making one response bigger than
     it): "store": false, warning store_quota, GET 404;
  4. key a storing far more than its quota never evicts key b's response,
     and a's newest are readable.
"""
import http.client
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tap import check, free_port  # noqa: E402
import tap  # noqa: E402

BUILD, TMP, MODEL, KEYS = os.environ["BUILD"], os.environ["TMP"], os.environ["MODEL_FILE"], os.environ["KEYS"]


class Gateway:
    def __init__(self, name, state, *extra):
        self.port = free_port()
        self.log = open(os.path.join(TMP, name + ".log"), "w")
        self.p = subprocess.Popen([BUILD + "/pagoda-gateway", "--listen", "127.0.0.1:%d" % self.port,
                                   "--worker-endpoint", "tcp://127.0.0.1:%d" % free_port(), "--keys", KEYS,
                                   "--state-dir", state, "--model", "m=" + MODEL, "--max-seqs", "4",
                                   "--http-threads", "2"] + list(extra),
                                  stdout=self.log, stderr=subprocess.STDOUT)
        end = time.time() + 60
        self.ok = False
        while time.time() < end and self.p.poll() is None:
            try:
                h = json.loads(self.get("/health", None)[1])
                if h.get("models", {}).get("m", {}).get("replicas", 0) >= 1:
                    self.ok = True
                    break
            except Exception:
                pass
            time.sleep(0.1)

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def get(self, path, key="secret-a"):
        c = self.conn()
        c.request("GET", path, headers={"Authorization": "Bearer " + key} if key else {})
        r = c.getresponse()
        return r.status, r.read().decode()

    def post(self, body, key="secret-a"):
        c = self.conn()
        c.request("POST", "/v1/responses", json.dumps(body),
                  {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read().decode()

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def ask(gw, i, key="secret-a", **kw):
    body = {"model": "m", "input": "Once upon a time %d" % i, "max_output_tokens": 4}
    body.update(kw)
    st, text = gw.post(body, key)
    try:
        return st, json.loads(text)
    except ValueError:
        return st, {"raw": text}


def honest(gw, answers, key="secret-a"):
    """Every answer with store true reads back byte for byte; every other
    one says why and is not there. Returns (n stored, n refused, bad)."""
    stored = refused = 0
    bad = []
    for st, j in answers:
        if st != 200:
            bad.append((st, j))
            continue
        gst, gtext = gw.get("/v1/responses/" + j["id"], key)
        if j.get("store") is True and "warning" not in j:
            stored += 1
            if gst != 200 or json.loads(gtext)["output"] != j["output"]:
                bad.append(("lost", j["id"], gst))
        elif j.get("store") is False and j.get("warning", {}).get("code", "").startswith("store_"):
            refused += 1
            if gst != 404:
                bad.append(("refused but there", j["id"], gst))
        else:
            bad.append(("neither", j))
    return stored, refused, bad


def full_disk():
    mnt = os.path.join(TMP, "small")
    os.mkdir(mnt, 0o700)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", mnt], capture_output=True,
                       text=True)
    if r.returncode != 0:
        print("skip - a full disk: mount -t tmpfs refused (%s)" % r.stderr.strip(), flush=True)
        return
    try:
        state = os.path.join(mnt, "state")
        gw = Gateway("gw_full", state)
        check("1. a gateway on a 256 KiB tmpfs starts", gw.ok)
        if not gw.ok:
            return
        answers = [ask(gw, i) for i in range(3)]
        filler = os.path.join(mnt, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)  # fill it: the next stores run out of room
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        os.close(fd)
        answers += [ask(gw, 10 + i) for i in range(12)]
        os.unlink(filler)  # reads (and the checks' GETs) need no room; later stores find it again
        stored, refused, bad = honest(gw, answers)
        check("1. disk full: every store:true answer reads back, every other says store_full (%d stored, %d "
              "refused)" % (stored, refused), not bad and refused >= 1 and stored >= 3, bad[:3])
        codes = {j.get("warning", {}).get("code") for _, j in answers if j.get("store") is False}
        check("1. the refusals say store_full", codes <= {"store_full"}, codes)
        after = [ask(gw, 100 + i) for i in range(2)]
        s2, r2, bad2 = honest(gw, after)
        check("1. with room again, stores work", s2 == 2 and not bad2, after)
        gw.stop()
    finally:
        subprocess.run(["umount", "-l", mnt])


def held_lock():
    state = os.path.join(TMP, "state-lock")
    gw = Gateway("gw_lock", state, "--responses-store-wait-ms", "1500")
    check("2. gateway starts", gw.ok)
    if not gw.ok:
        return
    st, first = ask(gw, 1)
    check("2. a response stored before the lock", st == 200 and first.get("store") is True)
    db = sqlite3.connect(os.path.join(state, "responses.sqlite3"), isolation_level=None, timeout=10)
    db.execute("BEGIN EXCLUSIVE")  # held by this process until COMMIT below
    # a streamed store: its response.completed waits for the lock; meanwhile others are answered
    c = gw.conn()
    c.request("POST", "/v1/responses", json.dumps({"model": "m", "input": "Once", "max_output_tokens": 4,
                                                   "stream": True}),
              {"Authorization": "Bearer secret-a", "Content-Type": "application/json"})
    r = c.getresponse()
    events = []
    while True:
        line = r.readline().decode()
        if not line:
            break
        if line.startswith("event: "):
            events.append(line[7:].strip())
            if events[-1] == "response.output_item.done":
                break
    # the answer is complete; its last event waits for the store (held by our lock)
    t0 = time.time()
    hst, _ = gw.get("/health", None)
    gst, _ = gw.get("/v1/responses/" + first["id"])
    nst, nostore = ask(gw, 2, store=False)
    check("2. while a store waits for another process's lock: /health, a GET and a store:false POST answer "
          "(%d, %d, %d) before the lock is released" % (hst, gst, nst),
          hst == 200 and gst == 200 and nst == 200 and nostore.get("store") is False)
    # a non-streamed store gives up after the wait, honestly
    st, busy = ask(gw, 3)
    check("2. a store beyond --responses-store-wait-ms: store false, warning store_busy (lock still held)",
          st == 200 and busy.get("store") is False and busy.get("warning", {}).get("code") == "store_busy", busy)
    rest = r.read().decode()
    done = [l[7:].strip() for l in rest.splitlines() if l.startswith("event: ")]
    final = [json.loads(l[6:]) for l in rest.splitlines()
             if l.startswith("data: ") and ('"response.completed"' in l or '"response.incomplete"' in l)]
    streamed = final[0]["response"] if final else {}
    check("2. the streamed store gave up too: its last event (response.incomplete: 4 tokens) says store false, "
          "store_busy", done[-1:] == ["response.incomplete"] and streamed.get("store") is False and
          streamed.get("warning", {}).get("code") == "store_busy", done)
    db.execute("COMMIT")
    db.close()
    s, refused, bad = honest(gw, [(200, busy), (200, streamed)])
    check("2. the refused ones are not there (GET 404)", refused == 2 and not bad, bad)
    after = [ask(gw, 4), ask(gw, 5, stream=False)]
    s2, _, bad2 = honest(gw, after)
    check("2. after the release, stores work", s2 == 2 and not bad2, after)
    gw.stop()


def quotas():
    state = os.path.join(TMP, "state-quota")
    gw = Gateway("gw_quota", state, "--responses-key-max-bytes", "8192")
    check("3. gateway starts", gw.ok)
    if not gw.ok:
        return
    st, b = ask(gw, 0, key="secret-b")
    check("4. key b stores one response", st == 200 and b.get("store") is True)
    md = {"k%02d" % i: "v" * 500 for i in range(16)}
    st, big = ask(gw, 1, metadata=md)
    check("3. a response larger than the key's quota: store false, warning store_quota",
          st == 200 and big.get("store") is False and big.get("warning", {}).get("code") == "store_quota", big)
    answers = [ask(gw, 10 + i, metadata={"k%d" % k: "x" * 400 for k in range(4)}) for i in range(30)]
    stored, refused, bad = honest(gw, answers[-2:])
    check("4. key a's newest responses are readable", stored == 2 and not bad, bad)
    gone = sum(1 for _, j in answers[:10] if gw.get("/v1/responses/" + j["id"])[0] == 404)
    check("4. key a's oldest were evicted to keep a within its quota (%d of 10)" % gone, gone >= 5)
    gst, _ = gw.get("/v1/responses/" + b["id"], "secret-b")
    check("4. key a storing %d responses over its quota never evicted key b's" % len(answers), gst == 200)
    gw.stop()


if __name__ == "__main__":
    full_disk()
    held_lock()
    quotas()
    sys.exit(1 if tap.n_failed() else 0)
