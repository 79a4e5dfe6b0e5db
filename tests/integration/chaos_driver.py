#!/usr/bin/env python3
"""chaos_driver.py — fault-injection driver for tests/integration/chaos.sh.

Runs real processes (pagoda-gateway with supervised local workers, plus a
worker started by hand) and breaks them while requests are in flight:

  1. kill -9 one of two local replicas mid-generation under a queue:
     every request completes and equals its uninterrupted reference (greedy
     and seeded, streaming and not), streams are one unbroken SSE stream,
     the gateway keeps its pid, the worker is restarted and serves again,
     the metrics count the restart and the resumed requests;
  2. SIGSTOP a local replica: declared dead by heartbeats, killed and
     restarted by the supervisor, its requests finish elsewhere;
  3. kill -9 the only worker of a model (started by hand):
     a) it is started again: the requests resume on it and complete;
     b) it is not: every request ends with a clear error (SSE error event +
        [DONE], or 503) within the replica grace period — none hangs;
  4. SIGTERM the gateway under load: in-flight requests finish, new ones
     get 503, exit status 0; a new gateway on the same ports gets the
     hand-started worker back (it re-registers) and serves;
  5. kill -9 that gateway under load: clients get connection errors, the
     worker re-registers with the next gateway, new requests succeed.

Prints one "ok - ..." / "not ok - ..." line per check (tests/lib.sh style)
and the counts of each outcome. Uses only the standard library.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

BUILD = os.environ["BUILD"]
MODEL = os.environ["MODEL_FILE"]
TMP = os.environ["TMP"]
HP = int(os.environ["HP"])
ZP = int(os.environ["ZP"])
HB_MS = 200
N_FAIL = 0
PROCS = []


def ok(cond, what):
    global N_FAIL
    print(("ok - " if cond else "not ok - ") + what, flush=True)
    if not cond:
        N_FAIL += 1
    return cond


def log(msg):
    print("# " + msg, flush=True)


# --- processes ------------------------------------------------------------------

def spawn(name, args, env=None):
    f = open(os.path.join(TMP, name + ".log"), "ab")
    p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env)
    PROCS.append(p)
    return p


def start_gateway(tag, extra=()):
    return spawn("gateway-" + tag, [
        BUILD + "/pagoda-gateway", "--listen", "127.0.0.1:%d" % HP,
        "--worker-endpoint", "tcp://127.0.0.1:%d" % ZP, "--heartbeat-ms", str(HB_MS),
        "--model", "stories=" + MODEL, "--replicas", "2", "--max-seqs", "3", "--threads", "1",
        "--worker-arg=--heartbeat-ms=%d" % HB_MS, "--replica-grace", "3",
        "--request-timeout", "60", "--drain-timeout", "20", "--log-level", "debug",
        "--admin-open", *extra])  # /admin/workers without --keys


def start_solo(tag, step_sleep_ms=0):
    # step_sleep_ms: every step sleeps first (test hook), so a drain is still
    # under way a given time after the signal however fast the machine is
    env = dict(os.environ, PAGODA_TEST_STEP_SLEEP_MS=str(step_sleep_ms)) if step_sleep_ms else None
    return spawn("solo-" + tag, [
        BUILD + "/pagoda-worker", "--gateway", "tcp://127.0.0.1:%d" % ZP, "--model", "solo=" + MODEL,
        "--heartbeat-ms", str(HB_MS), "--max-seqs", "4", "--threads", "1"], env)


# --- HTTP ---------------------------------------------------------------------

def get_json(path, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", HP, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


def post(path, body=None, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", HP, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


def metrics():
    c = http.client.HTTPConnection("127.0.0.1", HP, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def wait_until(pred, timeout, step=0.1):
    t_end = time.time() + timeout
    while time.time() < t_end:
        try:
            if pred():
                return True
        except Exception:
            pass
        time.sleep(step)
    return False


def workers(model):
    return [w for w in get_json("/admin/workers")[1]["workers"]
            if w["model"] == model and w["id"] is not None]


PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a bird"]


def body(model, i, stream, max_tokens):
    b = {"model": model, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
         "ignore_eos": True, "stream": stream}
    if i % 2:  # seeded sampling: resuming must continue the same random stream
        b.update(temperature=0.8, top_p=0.95, seed=1000 + i % len(PROMPTS))
    else:
        b["temperature"] = 0
    return b


def ref_key(b):
    return (b["model"], b["prompt"], b.get("seed"), b["max_tokens"])


class Req(threading.Thread):
    """One request; outcome in self.kind: complete | error | conn_error | hang."""

    def __init__(self, b, timeout=45):
        super().__init__(daemon=True)
        self.b, self.timeout = b, timeout
        self.kind, self.text, self.detail, self.n_deltas = None, "", "", 0
        self.max_gap, self.t_last = 0.0, None  # longest pause between stream deltas (s)
        self.started = threading.Event()

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", HP, timeout=self.timeout)
            c.request("POST", "/v1/completions", body=json.dumps(self.b),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if not self.b["stream"]:
                j = json.loads(r.read())
                if r.status == 200:
                    self.text = j["choices"][0]["text"]
                    self.kind = "complete" if j["choices"][0]["finish_reason"] == "length" else "error"
                    self.detail = j["choices"][0]["finish_reason"]
                else:
                    self.kind, self.detail = "error", "%d %s" % (r.status, j["error"]["message"])
                return
            if r.status != 200:
                j = json.loads(r.read())
                self.kind, self.detail = "error", "%d %s" % (r.status, j["error"]["message"])
                return
            finish, err, done = None, None, False
            buf = b""
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
                if err is not None or finish is not None:
                    err = err or "event after the end"
                    continue
                ev = json.loads(data)
                if "error" in ev:
                    err = ev["error"]["message"]
                    continue
                ch = ev["choices"][0]
                self.text += ch["text"]
                if ch["text"]:
                    now = time.time()
                    if self.t_last is not None:
                        self.max_gap = max(self.max_gap, now - self.t_last)
                    self.t_last = now
                    self.n_deltas += 1
                    self.started.set()
                if ch["finish_reason"]:
                    finish = ch["finish_reason"]
            if err is not None:
                self.kind, self.detail = "error", err + ("" if done else " (no [DONE])")
            elif finish == "length" and done:
                self.kind = "complete"
            else:
                self.kind, self.detail = "conn_error", "stream cut (finish %s, done %s)" % (finish, done)
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            if isinstance(e, TimeoutError) or "timed out" in str(e):
                self.kind = "hang"
            else:
                self.kind = "conn_error"
            self.detail = repr(e)
        finally:
            self.started.set()


def run_batch(reqs):
    for r in reqs:
        r.start()


def join_all(reqs, limit):
    t_end = time.time() + limit
    for r in reqs:
        r.join(max(0.0, t_end - time.time()))
    for r in reqs:
        if r.is_alive():
            r.kind = "hang"


def counts(reqs):
    c = {}
    for r in reqs:
        c[r.kind] = c.get(r.kind, 0) + 1
    return c


def check_against_refs(reqs, refs, what):
    bad = [r for r in reqs if r.kind == "complete" and r.text != refs[ref_key(r.b)]]
    for r in bad[:3]:
        ref = refs[ref_key(r.b)]
        i = next((k for k in range(min(len(ref), len(r.text))) if ref[k] != r.text[k]),
                 min(len(ref), len(r.text)))
        log("mismatch (%s, stream %s, seed %s) at char %d: %r vs %r" % (
            r.b["prompt"], r.b["stream"], r.b.get("seed"), i, r.text[i:i + 30], ref[i:i + 30]))
    ok(not bad, "%s: every completed request equals its uninterrupted reference (%d compared)" % (
        what, sum(r.kind == "complete" for r in reqs)))


def references(model, max_tokens):
    refs = {}
    for i in range(2 * len(PROMPTS)):
        b = body(model, i, False, max_tokens)
        r = Req(b)
        r.run()
        if r.kind != "complete":
            raise SystemExit("reference request failed: %s %s" % (r.kind, r.detail))
        refs[ref_key(b)] = r.text
    return refs


def pick_busy_worker(model):
    ws = workers(model)
    return max(ws, key=lambda w: w["assigned"]) if ws else None


# --- scenarios --------------------------------------------------------------------

def scenario_kill_replica(gw, refs):
    m0 = metrics()
    reqs = [Req(body("stories", i, i % 2 == 0, 300)) for i in range(24)]
    run_batch(reqs)
    # wait until streams are mid-generation, then kill the busiest replica
    wait_until(lambda: sum(r.n_deltas >= 20 for r in reqs if r.b["stream"]) >= 2, 20, 0.01)
    victim = pick_busy_worker("stories")
    assigned = victim["assigned"]
    os.kill(victim["pid"], signal.SIGKILL)
    t0 = time.time()
    log("kill -9 stories worker pid %d with %d requests assigned" % (victim["pid"], assigned))
    join_all(reqs, 50)
    c = counts(reqs)
    log("kill -9 one of two replicas, 24 requests (12 streams): %s in %.1f s; longest pause "
        "inside a stream %.0f ms" % (c, time.time() - t0, 1000 * max(r.max_gap for r in reqs)))
    ok(c.get("complete", 0) == 24,
       "kill -9 a replica mid-generation: all 24 requests complete (%s)" % c)
    ok(c.get("hang", 0) == 0, "kill -9 a replica: no request hangs")
    check_against_refs(reqs, refs, "kill -9 a replica")
    ok(gw.poll() is None, "the gateway survived (same pid %d)" % gw.pid)
    back = wait_until(lambda: len(workers("stories")) == 2 and
                      all(w["pid"] != victim["pid"] for w in workers("stories")), 15)
    ok(back, "the killed replica was restarted and registered again")
    r = Req(body("stories", 0, True, 20))
    r.run()
    ok(r.kind == "complete", "the restarted replica set serves a new request")
    m1 = metrics()
    restarts = m1.get('pagoda_worker_restarts_total{model_name="stories"}', 0)
    ok(restarts - m0.get('pagoda_worker_restarts_total{model_name="stories"}', 0) == 1,
       "pagoda_worker_restarts_total{stories} counts the restart (%g)" % restarts)
    resumed = m1.get('pagoda_requests_redispatched_total{model_name="stories",phase="resumed"}', 0)
    ok(resumed >= 1, "pagoda_requests_redispatched_total{phase=resumed} = %g (requests continued "
       "after output had started)" % resumed)
    lost = m1.get('pagoda_workers_lost_total{model_name="stories"}', 0)
    ok(lost >= 1, "pagoda_workers_lost_total{stories} = %g" % lost)
    return c


def scenario_sigstop(gw, refs):
    reqs = [Req(body("stories", i, i % 2 == 0, 300)) for i in range(12)]
    run_batch(reqs)
    wait_until(lambda: sum(r.n_deltas >= 10 for r in reqs if r.b["stream"]) >= 1, 20, 0.01)
    victim = pick_busy_worker("stories")
    os.kill(victim["pid"], signal.SIGSTOP)
    t0 = time.time()
    log("SIGSTOP stories worker pid %d with %d requests assigned" % (victim["pid"], victim["assigned"]))
    # how soon is the machine's speed (printed); the 60 s only catches a hang
    gone = wait_until(lambda: all(w["pid"] != victim["pid"] for w in workers("stories")), 60, 0.02)
    dt = time.time() - t0
    ok(gone, "SIGSTOP: declared dead by heartbeats after %.2f s (3 x %d ms)" % (dt, HB_MS))
    killed = wait_until(lambda: not os.path.exists("/proc/%d" % victim["pid"]) or
                        open("/proc/%d/stat" % victim["pid"]).read().split()[2] == "Z", 5)
    ok(killed, "the hung local worker was killed by the supervisor")
    join_all(reqs, 50)
    c = counts(reqs)
    log("SIGSTOP one replica, 12 requests: %s; longest pause inside a stream %.0f ms" % (
        c, 1000 * max(r.max_gap for r in reqs)))
    ok(c.get("complete", 0) == 12, "SIGSTOP: all 12 requests complete elsewhere (%s)" % c)
    check_against_refs(reqs, refs, "SIGSTOP")
    back = wait_until(lambda: len(workers("stories")) == 2, 15)
    ok(back, "the hung replica was replaced by a new process")
    return c


def scenario_only_worker(solo, refs):
    # a) killed and started again by hand: the requests wait and resume
    reqs = [Req(body("solo", i, i % 2 == 0, 300)) for i in range(6)]
    run_batch(reqs)
    wait_until(lambda: sum(r.n_deltas >= 10 for r in reqs if r.b["stream"]) >= 1, 20, 0.01)
    solo.kill()
    solo.wait()
    log("kill -9 the only solo worker (pid %d)" % solo.pid)
    time.sleep(1.0)
    solo = start_solo("b")
    join_all(reqs, 40)
    c = counts(reqs)
    log("kill -9 the only worker, restarted by hand after 1 s, 6 requests: %s" % c)
    ok(c.get("complete", 0) == 6, "only worker killed and restarted: all 6 requests complete (%s)" % c)
    check_against_refs(reqs, refs, "only worker restarted")
    # b) killed for good: every request ends with a clear error within the grace
    reqs = [Req(body("solo", i, i % 2 == 0, 400)) for i in range(6)]
    run_batch(reqs)
    wait_until(lambda: sum(r.n_deltas >= 5 for r in reqs if r.b["stream"]) >= 1, 20, 0.01)
    solo.kill()
    solo.wait()
    t0 = time.time()
    join_all(reqs, 20)
    dt = time.time() - t0
    c = counts(reqs)
    log("kill -9 the only worker for good, 6 requests: %s after %.1f s; errors: %s" % (
        c, dt, sorted(set(r.detail[:90] for r in reqs if r.kind == "error"))))
    clear = all(r.kind == "error" or r.kind == "complete" for r in reqs)
    ok(clear and c.get("error", 0) >= 1,
       "only worker gone: every request ends complete or with a clear error (%s)" % c)
    ok(c.get("hang", 0) == 0 and dt < 10, "only worker gone: none hangs (all ended %.1f s after the kill)" % dt)
    streamed_err = [r for r in reqs if r.b["stream"] and r.kind == "error"]
    ok(all("no [DONE]" not in r.detail for r in streamed_err),
       "streams that fail end with an SSE error event and [DONE] (%d)" % len(streamed_err))
    return c


def scenario_gateway_restart(gw, refs):
    # SIGTERM under load: in-flight finish, new get 503, exit 0. The 6
    # requests still have >= 295 steps of >= 2 ms each when the late one
    # comes 0.1 s after the signal.
    solo = start_solo("c", step_sleep_ms=2)
    ok(wait_until(lambda: len(workers("solo")) == 1, 20), "a new solo worker registers")
    reqs = [Req(body("solo", i, i % 2 == 0, 300)) for i in range(6)]
    run_batch(reqs)

    def all_in():  # every request accepted (queued or running) before the signal
        m = get_json("/health")[1]["models"]["solo"]
        return m["queued"] + m["running"] == 6
    wait_until(lambda: all_in() and any(r.n_deltas >= 5 for r in reqs if r.b["stream"]), 20, 0.01)
    gw.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    late = Req(body("solo", 0, False, 10))
    late.run()
    ok(late.kind == "error" and late.detail.startswith("503"),
       "SIGTERM: a new request during the drain gets 503 (%s %s)" % (late.kind, late.detail[:60]))
    join_all(reqs, 30)
    c = counts(reqs)
    ok(c.get("complete", 0) == 6, "SIGTERM: the 6 requests in flight finish (%s%s)" % (
        c, "".join("; " + r.detail[:80] for r in reqs if r.kind != "complete")))
    check_against_refs(reqs, refs, "SIGTERM drain")
    try:
        rc = gw.wait(15)
    except subprocess.TimeoutExpired:
        rc = None
    ok(rc == 0, "SIGTERM: the gateway exits 0 (%s)" % rc)
    # a new gateway: the hand-started worker comes back
    gw2 = start_gateway("2")
    ok(wait_until(lambda: len(workers("solo")) == 1 and len(workers("stories")) == 2, 30),
       "new gateway: the surviving worker re-registers (and local ones start)")
    r = Req(body("solo", 1, True, 40))
    r.run()
    ok(r.kind == "complete", "new gateway: a request to the re-registered worker succeeds")
    # kill -9 under load: clients get connection errors; the next gateway works
    reqs = [Req(body("solo", i, i % 2 == 0, 400)) for i in range(6)]
    run_batch(reqs)
    wait_until(lambda: any(r.n_deltas >= 5 for r in reqs if r.b["stream"]), 20, 0.01)
    # Hold the worker while its gateway dies, so it is certainly mid-generation
    # when it notices the loss (a fast machine could otherwise finish the work
    # within the 3 heartbeat intervals detection takes, leaving nothing to drop).
    solo.send_signal(signal.SIGSTOP)
    gw2.kill()
    gw2.wait()
    join_all(reqs, 20)
    time.sleep(4 * HB_MS / 1000)
    solo.send_signal(signal.SIGCONT)
    c2 = counts(reqs)
    log("kill -9 the gateway under load, 6 requests: %s" % c2)
    ok(c2.get("hang", 0) == 0 and c2.get("conn_error", 0) >= 1,
       "kill -9 the gateway: in-flight clients get connection errors, none hangs (%s)" % c2)
    gw3 = start_gateway("3")
    ok(wait_until(lambda: len(workers("solo")) == 1, 30),
       "after a gateway kill -9 the worker re-registers with the next one")
    dropped = [l for l in open(os.path.join(TMP, "solo-c.log"), errors="replace")
               if "gateway lost: dropped" in l]
    ok(dropped, "the worker stopped the requests of the dead gateway (%s)" % (
        dropped[-1].split(": ", 1)[-1].strip() if dropped else "no log line"))
    ok(wait_until(lambda: workers("solo")[0]["load"] is not None and
                  workers("solo")[0]["load"]["running"] == 0, 5),
       "its first load report to the new gateway shows nothing running")
    r = Req(body("solo", 2, False, 300))
    r.run()
    ok(r.kind == "complete" and r.text == refs[ref_key(r.b)],
       "next gateway: new requests succeed (and match the reference)")
    return c, c2, gw3, solo


def main():
    gw = start_gateway("1")
    solo = start_solo("a")
    ok(wait_until(lambda: len(workers("stories")) == 2 and len(workers("solo")) == 1, 30),
       "gateway up with 2 local stories replicas and a hand-started solo worker")
    t0 = time.time()
    refs = references("stories", 300)
    refs.update(references("stories", 400))
    refs.update(references("solo", 300))
    refs.update(references("solo", 400))
    log("references: %d texts in %.1f s" % (len(refs), time.time() - t0))
    c1 = scenario_kill_replica(gw, refs)
    c2 = scenario_sigstop(gw, refs)
    c3 = scenario_only_worker(solo, refs)
    ok(gw.poll() is None, "the gateway never restarted through scenarios 1-3 (pid %d)" % gw.pid)
    c4, c5, _, _ = scenario_gateway_restart(gw, refs)
    log("counts: kill-replica %s; sigstop %s; only-worker-gone %s; sigterm %s; gateway-kill %s" % (
        c1, c2, c3, c4, c5))


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for p in PROCS:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    sys.exit(1 if N_FAIL else 0)
