"""TTFT of Claude Code's first request, per conversation, on pagoda's
/v1/messages: does a new conversation reuse the previous one's prefix?
Prints numbers; asserts nothing. tests/bench/agent_ttft.sh starts the gateway.

  agent_ttft.py URL BODY.json MODE
    MODE drop: the gateway drops volatile blocks (the default). Runs
               (a) conversation 1's first request (cold: full prefill),
               (b) the same body again x REPEAT (warm),
               (c) conversations 2.. x REPEAT, each a new Claude Code run,
               (d) KILLS x: kill -9 of the worker, wait for the supervisor's
                   restart to register, a new conversation, then one more.
    MODE keep: the gateway runs with --keep-volatile-blocks. Runs
               (e0) conversation 1 (cold; only with KEEP_COLD=1) and
               (e) a new conversation (new hash).
BODY.json is {"path", "headers", "body"} as captured from the claude CLI.

A new conversation is what a new `claude` run sends: the billing header's
hash (cc_version=X.Y.Z.<3 hex>) and the session id (metadata.user_id's
session_id, and the x-claude-code-session-id header) change; the rest is
byte for byte the recorded body, with max_tokens MAX_TOKENS (8) and stream.

TTFT = send -> the first content_block_delta event (the first generated
text); "start" = send -> message_start, which pagoda sends when the worker's
first token arrives (so the two differ only by what the answer parser holds
back). prompt = usage.input_tokens + usage.cache_read_input_tokens of the
final message_delta; cached = cache_read_input_tokens (RAM and disk tier).
"""
import json
import os
import random
import re
import signal
import statistics
import sys
import time
import urllib.request
import uuid

URL, BODY, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
REPEAT = int(os.environ.get("REPEAT", "3"))
KILLS = int(os.environ.get("KILLS", "2"))
MAX_TOKENS = int(os.environ.get("MAX_TOKENS", "8"))
rng = random.Random(int(os.environ.get("SEED", "0")) or None)

with open(BODY, encoding="utf-8") as f:
    REC = json.load(f)
BILLING = re.compile(r"(cc_version=\d+\.\d+\.\d+\.)([0-9a-f]{3})")


def conversation():
    """A new Claude Code run's first request: (headers, body bytes)."""
    body = json.loads(json.dumps(REC["body"]))
    h = "%03x" % rng.randrange(4096)
    blk = body["system"][0]
    assert BILLING.search(blk["text"]), "first system block is not the billing header: %.80s" % blk["text"]
    blk["text"] = BILLING.sub(lambda m: m.group(1) + h, blk["text"])
    sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    uid = json.loads(body["metadata"]["user_id"])
    uid["session_id"] = sid
    body["metadata"]["user_id"] = json.dumps(uid, separators=(",", ":"))
    body["max_tokens"] = MAX_TOKENS
    body["stream"] = True
    headers = {k: v for k, v in REC["headers"].items() if k.lower() not in ("content-length", "host")}
    headers["x-claude-code-session-id"] = sid
    headers["content-type"] = "application/json"
    return h, headers, json.dumps(body).encode()


def send(conv):
    _, headers, data = conv
    t0 = time.monotonic()
    req = urllib.request.Request(URL + REC["path"], data, headers)
    r = urllib.request.urlopen(req, timeout=3600)
    start = delta = None
    usage = {}
    event = None
    for line in r:
        line = line.decode("utf-8").rstrip("\r\n")
        if line.startswith("event:"):
            event = line[6:].strip()
            continue
        if not line.startswith("data:"):
            continue
        j = json.loads(line[5:])
        now = time.monotonic() - t0
        if event == "message_start" and start is None:
            start = now
        elif event == "content_block_delta" and delta is None:
            delta = now
        elif event == "message_delta":
            usage = j.get("usage", {})
        elif event == "error":
            raise RuntimeError("stream error: %s" % line)
    cached = usage.get("cache_read_input_tokens", 0)
    return {"ttft": delta, "start": start, "prompt": usage.get("input_tokens", 0) + cached, "cached": cached,
            "out": usage.get("output_tokens", 0)}


def fmt(s):
    return "%8.3f" % s if s is not None else "       -"


ROWS = []


def row(label, r, note=""):
    ROWS.append((label, r))
    print("%-44s TTFT %s s  start %s s  prompt %6d  cached %6d  out %d%s"
          % (label, fmt(r["ttft"]), fmt(r["start"]), r["prompt"], r["cached"], r["out"], note), flush=True)


def health():
    try:
        return json.load(urllib.request.urlopen(URL + "/health", timeout=10))
    except Exception:
        return {}


def worker_pids():
    h = health()
    pids = {w.get("pid") for w in h.get("local_workers", []) if w.get("pid")}
    pids |= {w.get("pid") for w in h.get("workers", []) if w.get("pid")}
    return pids


def registered_pids():
    return {w.get("pid") for w in health().get("workers", []) if w.get("pid")}


def wait(pred, secs, step=0.5):
    end = time.time() + secs
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def med(rs, key="ttft"):
    v = [r[key] for r in rs if r[key] is not None]
    return statistics.median(v) if v else None


if MODE == "drop":
    c1 = conversation()
    a = send(c1)
    row("(a) conv 1, first request (cold)", a, "   [hash %s]" % c1[0])
    bs = []
    for i in range(REPEAT):
        bs.append(send(c1))
        row("(b) conv 1, same body again #%d" % (i + 1), bs[-1])
    cs = []
    for i in range(REPEAT):
        c = conversation()
        cs.append(send(c))
        row("(c) conv %d, first request (new run)" % (i + 2), cs[-1], "   [hash %s]" % c[0])
    ds, d2 = [], []
    for k in range(KILLS):
        old = worker_pids()
        for pid in old:
            os.kill(pid, signal.SIGKILL)
        t_kill = time.time()
        ok = wait(lambda: bool(registered_pids()) and not (registered_pids() & old), 900)
        print("    kill -9 of worker pid %s; restarted pid %s registered after %.1f s (%s)"
              % (",".join(map(str, sorted(old))), ",".join(map(str, sorted(registered_pids()))),
                 time.time() - t_kill, "ok" if ok else "TIMEOUT"), flush=True)
        c = conversation()
        ds.append(send(c))
        row("(d) after kill -9 #%d: new conversation" % (k + 1), ds[-1], "   [hash %s]" % c[0])
        d2.append(send(conversation()))
        row("    then another new conversation", d2[-1])
    b = med(bs)
    print("SUMMARY drop: prompt %d tokens; (a) cold %s s; (b) warm median %s s; (c) new conversation median %s s"
          " = %.2f x (b); (d) after kill -9 median %s s = %.2f x (b)   [bar: (c), (d) <= 1.5 x (b)]"
          % (a["prompt"], fmt(a["ttft"]).strip(), fmt(b).strip(), fmt(med(cs)).strip(), med(cs) / b,
             fmt(med(ds)).strip(), med(ds) / b), flush=True)
    print("SUMMARY cached: (a) %d, (b) %s, (c) %s, (d) %s"
          % (a["cached"], [r["cached"] for r in bs], [r["cached"] for r in cs], [r["cached"] for r in ds]),
          flush=True)
elif MODE == "keep":
    if os.environ.get("KEEP_COLD") == "1":
        c1 = conversation()
        e0 = send(c1)
        row("(e0) keep: conv 1, first request (cold)", e0, "   [hash %s]" % c1[0])
    c2 = conversation()
    e = send(c2)
    row("(e) keep: a new conversation (new run)", e, "   [hash %s]" % c2[0])
    print("SUMMARY keep: prompt %d tokens; (e) %s s, cached %d" % (e["prompt"], fmt(e["ttft"]).strip(), e["cached"]),
          flush=True)
else:
    sys.exit("MODE is drop or keep")
