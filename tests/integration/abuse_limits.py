#!/usr/bin/env python3
"""abuse_limits.py — floods for tests/integration/abuse_limits.sh (see there).

  abuse_limits.py queue N MAX_TOKENS   N requests at once against a gateway whose queue
                                       is small: each must end 200 or 429; every 429 is
                                       rate_limit_error/rate_limit_exceeded with a
                                       numeric Retry-After; prints "measure queue ..."
  abuse_limits.py burst KEY N          N back-to-back requests with one key; prints the
                                       statuses seen ("measure burst ok=.. 429=.. other=..
                                       retry_after=..")

Environment: PAGODA_URL, PAGODA_MODEL, PAGODA_KEY (queue mode).
"""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import httpc  # noqa: E402

URL = os.environ.get("PAGODA_URL", "http://127.0.0.1:8080")
HOST, PORT = URL.split("//", 1)[1].rsplit(":", 1)
PORT = int(PORT)
MODEL = os.environ.get("PAGODA_MODEL", "m")


def body(max_tokens):
    return {"model": MODEL, "prompt": "Once upon a time", "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True}


def check_429(r):
    """None when r is a well-formed 429, else why not."""
    bad = httpc.oai_error_shape(r.json())
    if bad:
        return bad
    e = r.json()["error"]
    if e["type"] != "rate_limit_error" or e["code"] != "rate_limit_exceeded":
        return "429 with type %s code %s" % (e["type"], e["code"])
    ra = r.headers.get("retry-after", "")
    if not ra.isdigit() or int(ra) < 1:
        return "Retry-After %r, want an integer >= 1" % ra
    return None


def run_queue(n, max_tokens):
    key = os.environ.get("PAGODA_KEY")
    results = [None] * n
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait()
        results[i] = httpc.post_json(HOST, PORT, "/v1/completions", body(max_tokens), key, timeout=120)
    ths = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    n200 = n429 = 0
    bad = []
    for r in results:
        if r.status == 200 and (r.json() or {}).get("choices"):
            n200 += 1
        elif r.status == 429:
            why = check_429(r)
            if why:
                bad.append(why)
            n429 += 1
        else:
            bad.append("status %d %s %r" % (r.status, r.error or "", r.body[:100]))
    print("measure queue %d %d %d %s" % (n200, n429, len(bad), bad[0].replace(" ", "_")[:160] if bad else "-"))
    return 0


def run_burst(key, n):
    counts = {"ok": 0, "429": 0, "other": 0}
    retry = "-"
    for _ in range(n):
        r = httpc.post_json(HOST, PORT, "/v1/completions", body(1), key, timeout=30)
        if r.status == 200:
            counts["ok"] += 1
        elif r.status == 429:
            counts["429"] += 1
            if check_429(r) is None:
                retry = r.headers.get("retry-after")
        else:
            counts["other"] += 1
    print("measure burst %d %d %d %s" % (counts["ok"], counts["429"], counts["other"], retry))
    return 0


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "queue":
        return run_queue(int(sys.argv[2]), int(sys.argv[3]))
    if len(sys.argv) >= 4 and sys.argv[1] == "burst":
        return run_burst(sys.argv[2], int(sys.argv[3]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
