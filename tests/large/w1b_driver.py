#!/usr/bin/env python3
"""w1b_driver.py — load and chaos at real model size, for tests/large/w1b.sh.

A gateway started with DEFAULT flags serves a 1.1B-parameter model (TinyLlama
shape, Q4_K_M, made by pagoda-mkmodel). Two phases, real processes, real HTTP:

  1. load: STREAMS concurrent streaming completions (greedy, ignore_eos,
     MAX_TOKENS each): every one completes with all its tokens, no error, no
     worker lost or restarted. Prints tokens/s.
  2. chaos: the same STREAMS prompts again with 2 x MAX_TOKENS, half started
     later, so that when the worker is killed with -9 some streams have output
     and some none. Nothing is lost silently: every stream either
     completes — and then starts with its phase-1 text (greedy: a resumed
     stream continues exactly) — or ends with an SSE error event and [DONE]; none
     hangs. Streams that had no output yet are re-dispatched and complete. The
     supervisor restarts the worker once.

Prints "ok - ..." / "not ok - ..." lines (tests/lib.sh style). Standard
library only. Environment: HP (HTTP port), STREAMS, MAX_TOKENS.
"""
import http.client
import json
import os
import signal
import sys
import threading
import time

HP = int(os.environ["HP"])
STREAMS = int(os.environ.get("STREAMS", "32"))
MAX_TOKENS = int(os.environ.get("MAX_TOKENS", "8"))
N_FAIL = 0


def ok(cond, what):
    global N_FAIL
    print(("ok - " if cond else "not ok - ") + what, flush=True)
    if not cond:
        N_FAIL += 1
    return cond


def log(msg):
    print("# " + msg, flush=True)


def get_json(path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", HP, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return json.loads(r.read() or b"null")
    finally:
        c.close()


def metric(name):
    c = http.client.HTTPConnection("127.0.0.1", HP, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            k, _, v = line.rpartition(" ")
            if k == name or k.startswith(name + "{"):
                return float(v)
    return 0.0


def worker_pids():
    return [w["pid"] for w in get_json("/health")["workers"] if w["model"] == "m"]


class Stream(threading.Thread):
    """One streaming completion. kind: complete | error | broken | hang."""

    def __init__(self, i, timeout, max_tokens=MAX_TOKENS):
        super().__init__(daemon=True)
        self.i, self.timeout, self.max_tokens = i, timeout, max_tokens
        self.kind, self.text, self.detail = None, "", ""
        self.n_deltas, self.t_first, self.t_end = 0, None, None

    def run(self):
        b = {"model": "m", "prompt": "Once upon a time, story %d:" % self.i,
             "max_tokens": self.max_tokens, "ignore_eos": True, "temperature": 0, "stream": True}
        try:
            c = http.client.HTTPConnection("127.0.0.1", HP, timeout=self.timeout)
            c.request("POST", "/v1/completions", body=json.dumps(b),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                self.kind, self.detail = "error", "HTTP %d %s" % (r.status, r.read()[:200])
                return
            finish, err, done = None, None, False
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    done = True
                    break
                ev = json.loads(data)
                if "error" in ev:
                    err = ev["error"].get("message", "?")
                    continue
                ch = ev["choices"][0]
                if ch.get("text"):
                    if self.t_first is None:
                        self.t_first = time.time()
                    self.n_deltas += 1
                    self.text += ch["text"]
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
            self.t_end = time.time()
            if err is not None and done:
                self.kind, self.detail = "error", err
            elif finish == "length" and done:
                self.kind = "complete"
            else:
                self.kind, self.detail = "broken", "finish %s, [DONE] %s, error %s" % (finish, done, err)
        except Exception as e:  # timeout = hang
            self.kind, self.detail = "hang" if "timed out" in str(e) else "broken", repr(e)


def run_streams(timeout, during=None, max_tokens=MAX_TOKENS):
    """STREAMS streams; `during(ss)` (if any) starts them itself, else all start at once."""
    ss = [Stream(i, timeout, max_tokens) for i in range(STREAMS)]
    t0 = time.time()
    if during:
        during(ss)
    else:
        for s in ss:
            s.start()
    for s in ss:
        s.join(timeout + 30)
    for s in ss:
        if s.kind is None:
            s.kind = "hang"
    return ss, time.time() - t0


def counts(ss):
    c = {}
    for s in ss:
        c[s.kind] = c.get(s.kind, 0) + 1
    return c


def main():
    pids = worker_pids()
    ok(len(pids) == 1, "one local worker registered (pid %s)" % pids)
    restarts0 = metric("pagoda_worker_restarts_total")
    lost0 = metric("pagoda_workers_lost_total")

    # --- 1. load ----------------------------------------------------------------
    ss, dt = run_streams(1800)
    c = counts(ss)
    n_tok = sum(s.n_deltas for s in ss)
    log("load: %d streams x %d tokens in %.1f s: %s; %.2f output tok/s (%d deltas)" % (
        STREAMS, MAX_TOKENS, dt, c, n_tok / dt, n_tok))
    for s in ss:
        if s.kind != "complete":
            log("stream %d: %s %s" % (s.i, s.kind, s.detail))
    ok(c.get("complete", 0) == STREAMS,
       "load: %d concurrent streams with default flags: %d complete, 0 errors (%s)" % (
           STREAMS, c.get("complete", 0), c))
    ok(metric("pagoda_worker_restarts_total") == restarts0 and
       metric("pagoda_workers_lost_total") == lost0 and worker_pids() == pids,
       "load: the worker was neither lost nor restarted")
    ref = {s.i: s.text for s in ss if s.kind == "complete"}

    # --- 2. chaos: kill -9 mid-run -------------------------------------------------
    killed = {}

    def kill_mid(streams):
        # the first half starts; once half of those have output, the second
        # half starts and, 0.1 s later (dispatched or queued, no token yet: at 1 s an
        # idle machine had already streamed to all 32 and the check failed), the
        # worker is killed: some streams have output, some none
        half = STREAMS // 2
        for st in streams[:half]:
            st.start()
        t_end = time.time() + 1500
        while time.time() < t_end and sum(1 for st in streams[:half] if st.n_deltas) < max(1, half // 2):
            time.sleep(0.1)
        for st in streams[half:]:
            st.start()
        time.sleep(0.1)
        killed["started"] = sum(1 for st in streams if st.n_deltas > 0)
        killed["unstarted"] = [st.i for st in streams if st.n_deltas == 0]
        killed["done"] = sum(1 for st in streams if st.kind is not None)
        os.kill(pids[0], signal.SIGKILL)
        killed["t"] = time.time()
        log("kill -9 worker %d: %d streams had output, %d none, %d finished" % (
            pids[0], killed["started"], len(killed["unstarted"]), killed["done"]))

    # twice as many tokens as phase 1, so streams are mid-way at the kill;
    # greedy, so each phase-1 text is a prefix of its phase-2 text
    ss, dt = run_streams(1800, kill_mid, 2 * MAX_TOKENS)
    c = counts(ss)
    log("chaos: %d streams in %.1f s: %s" % (STREAMS, dt, c))
    for s in ss:
        if s.kind != "complete":
            log("stream %d: %s %s" % (s.i, s.kind, s.detail))
    ok(c.get("hang", 0) == 0 and c.get("broken", 0) == 0,
       "chaos: nothing lost silently: every stream completed or ended with an error event "
       "and [DONE] (%s)" % c)
    unstarted_ok = [i for i in killed.get("unstarted", []) if ss[i].kind == "complete"]
    ok(len(unstarted_ok) == len(killed.get("unstarted", [])),
       "chaos: the %d streams without output at the kill were re-dispatched and completed (%d)" % (
           len(killed.get("unstarted", [])), len(unstarted_ok)))
    same = [s.i for s in ss if s.kind == "complete" and s.i in ref and s.text.startswith(ref[s.i])]
    differ = [s.i for s in ss if s.kind == "complete" and s.i in ref and not s.text.startswith(ref[s.i])]
    for i in differ[:3]:
        log("stream %d differs: %r vs %r" % (i, ss[i].text, ref[i]))
    ok(not differ, "chaos: every completed stream continues its uninterrupted phase-1 text "
       "(%d agree, %d differ), resumed ones included" % (len(same), len(differ)))
    ok(killed.get("started", 0) > 0 and killed.get("unstarted"),
       "chaos: the kill hit streams with output (%d) and without (%d)" % (
           killed.get("started", 0), len(killed.get("unstarted", []))))
    ok(c.get("complete", 0) == STREAMS,
       "chaos: all %d streams completed across the kill (resumed), %d" % (
           STREAMS, c.get("complete", 0)))
    new = worker_pids()
    ok(metric("pagoda_worker_restarts_total") == restarts0 + 1 and new and new != pids,
       "chaos: the worker was restarted once (pid %s -> %s)" % (pids, new))
    log("redispatched: %g" % metric("pagoda_requests_redispatched_total"))
    return 1 if N_FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
