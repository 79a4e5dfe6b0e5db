"""TTFT of a long shared prefix: cold, warm, after kill -9 + restart, after an
on-demand idle stop + start (issue #27). Prints numbers; asserts nothing.

Usage (tests/bench/kv_restart_bench.sh starts the gateway):
  kv_restart_bench.py URL MODE [PREFIX_TOKENS]
    MODE kill9: the gateway supervises one worker; it is killed with -9 and
                restarted by the gateway's supervisor
    MODE idle:  the model is --on-demand with a short --idle-timeout; the
                bench waits for the idle stop, then asks again
TTFT = time from sending a streamed /v1/completions (max_tokens 1) to its
first token chunk; cached = usage.prompt_tokens_details.cached_tokens.
"""
import calendar
import json
import os
import random
import signal
import statistics
import sys
import time
import urllib.request

URL, MODE = sys.argv[1], sys.argv[2]
TARGET = int(sys.argv[3]) if len(sys.argv) > 3 else 1800
WORDS = ("the a little girl boy dog cat tree park ball sun moon happy sad big small red blue green played ran "
         "jumped saw went said looked found friend mom dad house garden river sky bird fish cake toy day night "
         "and but so then when very with to of in on at her his they she he it was were is are").split()


def stream(prompt):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    t0 = time.time()
    r = urllib.request.urlopen(urllib.request.Request(URL + "/v1/completions", body,
                                                      {"Content-Type": "application/json"}), timeout=1800)
    ttft, usage = None, None
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        j = json.loads(line[5:])
        if ttft is None and j.get("choices"):
            ttft = time.time() - t0
        if j.get("usage"):
            usage = j["usage"]
    cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return ttft, cached, (usage or {}).get("prompt_tokens", 0)


def workers():
    try:
        return json.load(urllib.request.urlopen(URL + "/health", timeout=10)).get("workers", [])
    except Exception:
        return []


def registered_after(t0):
    """Seconds from t0 to the first 'registered' line after it in the gateway's log ($GWLOG),
    or None. Read from the log, not by polling /health: a poll every few ms is load on the
    two cores the starting worker needs."""
    try:
        lines = open(os.environ["GWLOG"]).read().splitlines()
    except (KeyError, OSError):
        return None
    for line in lines:
        if "registered: model" not in line:
            continue
        ts = calendar.timegm(time.strptime(line[:19], "%Y-%m-%dT%H:%M:%S")) + float(line[19:23])
        if ts >= t0 - 0.001:
            return ts - t0
    return None


def wait(pred, secs, step=0.2):
    end = time.time() + secs
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return False


rng = random.Random(7)
sample = " ".join(rng.choice(WORDS) for _ in range(200))
_, _, n200 = stream(sample)  # tokens per word of this vocabulary
n_words = int(TARGET * 200 / max(1, n200))
prefix = " ".join(rng.choice(WORDS) for _ in range(n_words))
suffix = lambda i: " question %d: what did the %s do?" % (i, WORDS[i % len(WORDS)])

cold, c0, n0 = stream(prefix + suffix(0))
print("prompt %d tokens (prefix ~%d words)" % (n0, n_words), flush=True)
print("cold (full prefill)         TTFT %7.3f s  cached %d" % (cold, c0), flush=True)
warm = []
for i in range(1, 4):
    t, c, _ = stream(prefix + suffix(i))
    warm.append(t)
    print("warm %d                      TTFT %7.3f s  cached %d" % (i, t, c), flush=True)
w = statistics.median(warm)
after = []
for rep in range(int(os.environ.get("REPEAT", "1"))):
    if MODE == "kill9":
        old = {x["pid"] for x in workers()}
        for pid in old:
            os.kill(pid, signal.SIGKILL)
        t_kill = time.time()
        ok = wait(lambda: any(x["pid"] not in old for x in workers()), 600)
        print("worker restarted by the supervisor in %.1f s (registered: %s; kill to registration, incl. the"
              " supervisor's backoff and the worker's start-up)" % (time.time() - t_kill, ok), flush=True)
        label = "after kill -9 + restart"
    else:
        ok = wait(lambda: not workers(), 600)
        print("on-demand worker stopped after idle: %s" % ok, flush=True)
        label = "after idle stop (start incl.)"
        t_req = time.time()
    t, c, _ = stream(prefix + suffix(9 + rep))
    if MODE != "kill9":
        reg = registered_after(t_req)
        print("  (request sent at %s.%03dZ; the worker registered %s after it (gateway log); TTFT after that %s)"
              % (time.strftime("%H:%M:%S", time.gmtime(t_req)), int(t_req * 1000) % 1000,
                 "%.3f s" % reg if reg is not None else "?", "%.3f s" % (t - reg) if reg is not None else "?"),
              flush=True)
    after.append(t)
    print("%-27s TTFT %7.3f s  cached %d" % (label, t, c), flush=True)
    t2, c2, _ = stream(prefix + suffix(20 + rep))
    print("%-27s TTFT %7.3f s  cached %d" % ("  next request (warm again)", t2, c2), flush=True)
print("ratio %s / warm median: %s   (cold / warm: %.1f)" % (MODE, " ".join("%.2f" % (a / w) for a in after),
                                                          cold / w), flush=True)
