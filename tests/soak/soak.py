#!/usr/bin/env python3
"""soak.py — the traffic generator and client-side bookkeeping of tests/soak/soak.sh.

  soak.py run SECONDS   mixed traffic from CLIENTS threads for SECONDS, then a summary

Traffic (each request drawn at random, seeded with SOAK_SEED so a run can be repeated):
  - /v1/chat/completions, /v1/completions and the /v1/batch/ variants; streaming (SSE,
    sometimes with stream_options.include_usage) and not
  - all three tiers, through three API keys (KEY_HIGH, KEY_NORMAL, KEY_LOW)
  - client aborts: a stream closed (RST) after a few events, or a non-streaming
    request whose connection is dropped before the answer
  - stop strings: the returned text must not contain them
  - seeded sampling probes: a few fixed (prompt, seed, temperature 0.9) requests, sent
    again and again while the batch around them changes; every answer to one probe
    must be identical
  - short and long prompts (prefix-cache hits, KV pressure), max_tokens 1..64

Every request ends in exactly one bucket, with its reason:
  completed  200 and a complete answer (finish_reason stop/length; a stream ends with a
             finish chunk then [DONE])
  cancelled  we aborted it on purpose
  refused    an OpenAI-shaped error we accept under load: 429 rate_limit_exceeded
  failed     anything else: wrong status, malformed body, stream cut short, timeout,
             connection reset, stop string in the output, a probe that changed

Output: "measure KEY VALUE" lines (soak.sh judges them), "# ..." details, and a JSON
summary line starting with "summary ".

Environment: PAGODA_URL, PAGODA_MODEL, KEY_HIGH, KEY_NORMAL, KEY_LOW, CLIENTS (default 6),
SOAK_SEED (default 1), SOAK_TIMEOUT (per request, default 120 s).
"""
import collections
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import httpc  # noqa: E402

URL = os.environ.get("PAGODA_URL", "http://127.0.0.1:8080")
HOST, PORT = URL.split("//", 1)[1].rsplit(":", 1)
PORT = int(PORT)
MODEL = os.environ.get("PAGODA_MODEL", "m")
KEYS = {"high": os.environ.get("KEY_HIGH"), "normal": os.environ.get("KEY_NORMAL"),
        "low": os.environ.get("KEY_LOW")}
CLIENTS = int(os.environ.get("CLIENTS", "6"))
SEED = int(os.environ.get("SOAK_SEED", "1"))
TIMEOUT = float(os.environ.get("SOAK_TIMEOUT", "120"))

OPENINGS = [
    "Once upon a time", "One day, a little girl named Lily", "The sun was shining and",
    "Tom and his dog went to the park.", "There was a big red ball", "Mom said",
    "In a small house lived a cat", "The bird sang a happy song",
]
LONG = " ".join(OPENINGS) + " " + " ".join(OPENINGS[::-1])   # ~100 tokens, shared prefix
STOPS = [[" the"], ["."], [" and", "!"], ["Lily"]]
PROBES = [  # (prompt, seed): answered at temperature 0.9, top_p 0.95, 24 tokens
    ("Once upon a time", 11), ("The cat and the dog", 22), (LONG, 33), ("Mom said", 44)]


class Book:
    """Thread-safe tallies."""

    def __init__(self):
        self.lock = threading.Lock()
        self.buckets = collections.Counter()
        self.reasons = collections.Counter()
        self.kinds = collections.Counter()
        self.tiers = collections.Counter()
        self.failures = []
        self.probes = collections.defaultdict(list)
        self.tokens = 0
        self.stop_checked = 0

    def add(self, bucket, reason, kind, tier):
        with self.lock:
            self.buckets[bucket] += 1
            self.reasons["%s:%s" % (bucket, reason)] += 1
            self.kinds[kind] += 1
            self.tiers[tier] += 1
            if bucket == "failed" and len(self.failures) < 20:
                self.failures.append("%s %s: %s" % (kind, tier, reason))


BOOK = Book()


def request_body(rng, chat, stream, probe=None):
    if probe is not None:
        prompt, seed = PROBES[probe]
        b = {"temperature": 0.9, "top_p": 0.95, "seed": seed, "max_tokens": 24}
    else:
        prompt = LONG + " " + rng.choice(OPENINGS) if rng.random() < 0.25 else rng.choice(OPENINGS)
        b = {"max_tokens": rng.randint(1, 64), "temperature": rng.choice([0, 0.7, 1.0])}
        if rng.random() < 0.5:
            b["seed"] = rng.randint(0, 1 << 31)
    b["model"] = MODEL
    if chat:
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    if stream:
        b["stream"] = True
        if rng.random() < 0.5:
            b["stream_options"] = {"include_usage": True}
    return b


def text_of(j, chat):
    c = j["choices"][0]
    return (c["message"]["content"] or "") if chat else c["text"], c["finish_reason"]


def classify_error(status, body):
    """(bucket, reason) for a non-200 answer."""
    try:
        j = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "failed", "status %d, body not JSON: %r" % (status, body[:80])
    bad = httpc.oai_error_shape(j)
    if bad:
        return "failed", "status %d, %s" % (status, bad)
    code = j["error"]["code"]
    if status == 429 and code == "rate_limit_exceeded":
        return "refused", "429 %s" % code
    return "failed", "status %d %s: %s" % (status, code, j["error"]["message"][:100])


def one_plain(rng, path, body, key, chat, abort):
    hs = [("Content-Type", "application/json"), ("Authorization", "Bearer " + key)]
    raw = httpc.build("POST", path, json.dumps(body).encode(), hs)
    if abort:
        s = httpc.connect(HOST, PORT)
        s.sendall(raw)
        time.sleep(rng.uniform(0, 0.05))
        s.close()
        return "cancelled", "dropped before the answer", None
    r = httpc.exchange(HOST, PORT, raw, TIMEOUT)
    if r.status == 0:
        return "failed", "no response: %s" % r.error, None
    if r.status != 200:
        return classify_error(r.status, r.body)
    j = r.json()
    try:
        text, fin = text_of(j, chat)
        usage = j["usage"]
    except (KeyError, IndexError, TypeError):
        return "failed", "200 but not a completion: %r" % r.body[:100], None
    if fin not in ("stop", "length"):
        return "failed", "finish_reason %r" % fin, None
    return "completed", fin, (text, usage)


def one_stream(rng, path, body, key, chat, abort):
    st = httpc.Stream(HOST, PORT, path, body, key, TIMEOUT)
    try:
        st.open()
        if st.status != 200:
            return classify_error(st.status, st.error_body)
        abort_after = rng.randint(1, 3) if abort else -1
        parts, fin, usage, done, n = [], None, None, False, 0
        for data in st.events():
            n += 1
            if abort_after >= 0 and n >= abort_after:
                st.close()
                return "cancelled", "stream closed after %d events" % n, None
            if data == "[DONE]":
                done = True
                break
            j = json.loads(data)
            if "error" in j:
                return classify_error(500, data.encode())
            if j.get("usage"):
                usage = j["usage"]
            for c in j.get("choices", []):
                if chat:
                    parts.append(c.get("delta", {}).get("content") or "")
                else:
                    parts.append(c.get("text") or "")
                if c.get("finish_reason"):
                    fin = c["finish_reason"]
        if not done:
            return "failed", "stream ended without [DONE] after %d events" % n, None
        if fin not in ("stop", "length"):
            return "failed", "stream finish_reason %r" % fin, None
        if body.get("stream_options", {}).get("include_usage") and not usage:
            return "failed", "include_usage stream without a usage chunk", None
        return "completed", fin, ("".join(parts), usage)
    except (OSError, ValueError, ConnectionError) as e:
        return "failed", "stream: %s: %s" % (type(e).__name__, e), None
    finally:
        st.close()


def client(idx, deadline):
    rng = random.Random(SEED * 1000 + idx)
    while time.monotonic() < deadline:
        chat = rng.random() < 0.6
        stream = rng.random() < 0.5
        batch = rng.random() < 0.1
        tier = "low" if batch else rng.choice(["high", "normal", "low"])
        path = ("/v1/batch" if batch else "/v1") + ("/chat/completions" if chat else "/completions")
        probe = rng.randrange(len(PROBES)) if rng.random() < 0.12 else None
        abort = probe is None and rng.random() < 0.1
        body = request_body(rng, chat, stream, probe)
        stop = None
        if probe is None and not abort and rng.random() < 0.15:
            stop = rng.choice(STOPS)
            body["stop"] = stop
        kind = "%s%s%s" % ("batch-" if batch else "", "chat" if chat else "cmpl", "-stream" if stream else "")
        try:
            if stream:
                bucket, reason, out = one_stream(rng, path, body, KEYS[tier], chat, abort)
            else:
                bucket, reason, out = one_plain(rng, path, body, KEYS[tier], chat, abort)
        except OSError as e:
            bucket, reason, out = "failed", "%s: %s" % (type(e).__name__, e), None
        if bucket == "completed" and out:
            text, usage = out
            if stop and any(s in text for s in stop):
                bucket, reason = "failed", "stop string %r in the output %r" % (stop, text[:80])
            elif stop:
                with BOOK.lock:
                    BOOK.stop_checked += 1
            if usage:
                with BOOK.lock:
                    BOOK.tokens += usage.get("completion_tokens", 0)
            if probe is not None:
                with BOOK.lock:
                    # chat and completions render the prompt differently: key by both
                    BOOK.probes[(probe, chat)].append(text)
        BOOK.add(bucket, reason, kind, tier)


def run(seconds):
    t0 = time.monotonic()
    deadline = t0 + seconds
    ths = [threading.Thread(target=client, args=(i, deadline), daemon=True) for i in range(CLIENTS)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(seconds + TIMEOUT + 30)
    hung = sum(t.is_alive() for t in ths)
    dt = time.monotonic() - t0
    b = BOOK
    n = sum(b.buckets.values())
    n_probe = sum(len(v) for v in b.probes.values())
    diverged = []
    for (p, chat), outs in sorted(b.probes.items()):
        distinct = collections.Counter(outs)
        if len(distinct) > 1:
            diverged.append("probe %d (%s): %d answers, %d distinct: %s" % (
                p, "chat" if chat else "cmpl", len(outs), len(distinct),
                " | ".join(repr(t[:40]) for t in list(distinct)[:3])))
    print("measure requests %d" % n)
    print("measure seconds %.1f" % dt)
    for k in ("completed", "cancelled", "refused", "failed"):
        print("measure %s %d" % (k, b.buckets[k]))
    print("measure hung_clients %d" % hung)
    print("measure tokens %d" % b.tokens)
    print("measure probes %d %d %d" % (n_probe, len(b.probes), len(diverged)))
    print("measure stop_checked %d" % b.stop_checked)
    print("# by kind: %s" % dict(sorted(b.kinds.items())))
    print("# by tier: %s" % dict(sorted(b.tiers.items())))
    print("# by outcome: %s" % dict(sorted(b.reasons.items(), key=lambda kv: -kv[1])[:12]))
    for f in b.failures:
        print("# failed: %s" % f)
    for d in diverged:
        print("# diverged: %s" % d)
    print("summary " + json.dumps({"requests": n, "seconds": round(dt, 1), "buckets": dict(b.buckets),
                                   "tokens": b.tokens, "probes": n_probe, "diverged": len(diverged)}))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        return run(float(sys.argv[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
