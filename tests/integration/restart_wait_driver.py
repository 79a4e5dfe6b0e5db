#!/usr/bin/env python3
"""restart_wait_driver.py — requests wait while a local worker restarts
(issue #15), for tests/integration/restart_wait.sh.

Real processes: one pagoda-gateway with --replica-grace 1 (s) and
  - model "m": one supervised stories260K worker whose model load is made slow
    by the TEST ONLY env PAGODA_TEST_LOAD_SLEEP_MS (like a 1.1B model that
    needs tens of seconds to load and repack), and steps slowed by
    PAGODA_TEST_STEP_SLEEP_MS so that generations are mid-way when it dies;
  - model "bad": a supervised worker whose GGUF file is garbage: it can never
    start, crash-loops and is given up (FAILED) after --max-restarts 2;
  - model "solo": a worker started by hand (remote to the supervisor).

Checks:
  1. kill -9 the only worker of "m" mid-generation: its restart takes longer
     than the grace, yet every request — streams with output (resumed),
     queued ones, and new ones sent after the grace while it restarts —
     completes and equals its uninterrupted reference; 0 errors.
  2. "bad": a request sent while its worker crash-loops waits (no 503 after
     the 1 s grace while a restart is pending) and gets 503 model_failed once
     the worker is given up; a later one gets it at once.
  3. "solo" (no local worker): its requests still get the clear 503 of the
     grace ("No worker came up ...") about 1 s after its only worker died.

Reuses chaos_driver.py's request/reference helpers. Standard library only.
Environment: BUILD, TMP, MODEL_FILE, HP, ZP.
"""
import os
import signal
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos_driver as cd  # noqa: E402  (reads BUILD, TMP, MODEL_FILE, HP, ZP)

GRACE_S = 1.0
LOAD_SLEEP_MS = 3000
STEP_SLEEP_MS = 10
MAX_TOKENS = 80


def spawn_env(name, args, env_extra):
    env = dict(os.environ)
    env.update(env_extra)
    f = open(os.path.join(cd.TMP, name + ".log"), "ab")
    p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env)
    cd.PROCS.append(p)
    return p


def start_gateway(bad_file):
    # the env reaches the supervised workers (they inherit it)
    return spawn_env("gateway", [
        cd.BUILD + "/pagoda-gateway", "--listen", "127.0.0.1:%d" % cd.HP,
        "--worker-endpoint", "tcp://127.0.0.1:%d" % cd.ZP, "--heartbeat-ms", str(cd.HB_MS),
        "--worker-arg=--heartbeat-ms=%d" % cd.HB_MS, "--model", "m=" + cd.MODEL,
        "--model", "bad=" + bad_file, "--max-seqs", "3", "--threads", "1",
        "--replica-grace", str(GRACE_S), "--max-restarts", "2", "--restart-window", "60",
        "--request-timeout", "60", "--log-level", "debug", "--admin-open"],
        {"PAGODA_TEST_LOAD_SLEEP_MS": str(LOAD_SLEEP_MS),
         "PAGODA_TEST_STEP_SLEEP_MS": str(STEP_SLEEP_MS)})


def start_solo():
    return spawn_env("solo", [
        cd.BUILD + "/pagoda-worker", "--gateway", "tcp://127.0.0.1:%d" % cd.ZP,
        "--model", "solo=" + cd.MODEL, "--heartbeat-ms", str(cd.HB_MS), "--max-seqs", "4",
        "--threads", "1"], {"PAGODA_TEST_STEP_SLEEP_MS": str(STEP_SLEEP_MS)})


class Plain(threading.Thread):
    """One non-streaming request for `model`: status, error code, seconds taken."""

    def __init__(self, model):
        super().__init__(daemon=True)
        self.model, self.status, self.code, self.msg, self.dt = model, None, None, "", None

    def run(self):
        t0 = time.time()
        try:
            self.status, j = cd.post("/v1/completions", {"model": self.model, "prompt": "Hi",
                                                         "max_tokens": 4}, timeout=90)
            if self.status != 200:
                self.code, self.msg = j["error"]["code"], j["error"]["message"]
        except Exception as e:  # noqa: BLE001 — reported by the checks
            self.msg = repr(e)
        self.dt = time.time() - t0


def scenario_restart_wait(refs):
    m0 = cd.metrics()
    victim = cd.workers("m")[0]
    reqs = [cd.Req(cd.body("m", i, i % 2 == 0, MAX_TOKENS), timeout=60) for i in range(8)]
    cd.run_batch(reqs)
    cd.wait_until(lambda: sum(r.n_deltas >= 10 for r in reqs if r.b["stream"]) >= 1, 30, 0.01)
    n_out = sum(r.n_deltas > 0 for r in reqs)
    os.kill(victim["pid"], signal.SIGKILL)
    t_kill = time.time()
    cd.log("kill -9 the only worker of m (pid %d): %d of 8 requests had output" % (
        victim["pid"], n_out))
    # after the grace, while the worker is still loading: new requests must wait too
    time.sleep(GRACE_S + 0.5)
    down = not cd.workers("m")
    late = [cd.Req(cd.body("m", i, i % 2 == 0, MAX_TOKENS), timeout=60) for i in range(2)]
    cd.run_batch(late)
    back = cd.wait_until(lambda: len(cd.workers("m")) == 1, 60)
    t_back = time.time() - t_kill
    cd.ok(back and down and t_back > GRACE_S + 0.5,
          "the restarted worker registered %.1f s after the kill, longer than --replica-grace "
          "%.0f s (it was still down when 2 new requests came %.1f s after the kill)" % (
              t_back, GRACE_S, GRACE_S + 0.5))
    cd.join_all(reqs + late, 60)
    c = cd.counts(reqs + late)
    cd.log("kill -9 with a slow restart: %s; errors: %s" % (
        c, sorted(set(r.detail[:100] for r in reqs + late if r.kind != "complete"))))
    cd.ok(n_out >= 1 and n_out < 8, "the kill hit requests with output (%d) and without (%d)" % (
        n_out, 8 - n_out))
    cd.ok(c.get("complete", 0) == 10,
          "all 10 requests (8 in flight or queued at the kill, 2 sent during the restart) "
          "complete after the restart, 0 errors (%s)" % c)
    cd.check_against_refs(reqs + late, refs, "slow restart")
    m1 = cd.metrics()
    key = 'pagoda_worker_restarts_total{model_name="m"}'
    cd.ok(m1.get(key, 0) - m0.get(key, 0) == 1, "the supervisor restarted m once (%s)" % (
        m1.get(key, 0) - m0.get(key, 0)))


def scenario_solo_grace(solo):
    reqs = [cd.Req(cd.body("solo", i, i % 2 == 0, 300), timeout=60) for i in range(4)]
    cd.run_batch(reqs)
    cd.wait_until(lambda: sum(r.n_deltas >= 5 for r in reqs if r.b["stream"]) >= 1, 30, 0.01)
    solo.kill()
    solo.wait()
    t0 = time.time()
    cd.join_all(reqs, 30)
    dt = time.time() - t0
    c = cd.counts(reqs)
    msgs = sorted(set(r.detail[:100] for r in reqs if r.kind == "error"))
    cd.log("solo (hand-started) killed: %s after %.1f s: %s" % (c, dt, msgs))
    cd.ok(c.get("error", 0) == 4 and
          all("No worker came up for model 'solo' within 1 s" in r.detail for r in reqs),
          "a model with no local worker: every request gets the grace's clear 503 (%s)" % c)
    cd.ok(GRACE_S * 0.9 <= dt < 10, "... once the grace is over (all ended %.1f s after the kill)" % dt)


def main():
    bad_file = os.path.join(cd.TMP, "bad.gguf")
    with open(bad_file, "wb") as f:
        f.write(b"this is not a GGUF file\n" * 10)
    t_start = time.time()
    gw = start_gateway(bad_file)
    early_bad = Plain("bad")  # queued from the start: its worker crash-loops
    cd.wait_until(lambda: cd.get_json("/health")[1] is not None, 20)
    early_bad.start()
    solo = start_solo()
    cd.ok(cd.wait_until(lambda: len(cd.workers("m")) == 1 and len(cd.workers("solo")) == 1, 60),
          "gateway up: m registered after its slow load (%.1f s), solo registered" % (
              time.time() - t_start))
    refs = cd.references("m", MAX_TOKENS)
    cd.log("references: %d texts" % len(refs))

    early_bad.join(90)
    failed = cd.get_json("/health")[1]["models"]["bad"]["state"] == "failed"
    cd.log("bad: %s %s after %.1f s: %s" % (early_bad.status, early_bad.code,
                                            early_bad.dt or -1, early_bad.msg[:120]))
    cd.ok(early_bad.status == 503 and early_bad.code == "model_failed" and failed and
          early_bad.dt > GRACE_S,
          "a worker that can never start: its request waits while restarts are pending (not 503 "
          "at the 1 s grace) and gets 503 model_failed once it is given up (%.1f s)" % (
              early_bad.dt or -1))
    again = Plain("bad")
    again.run()
    cd.ok(again.status == 503 and again.code == "model_failed" and again.dt < 2,
          "a FAILED model's next request gets 503 model_failed at once (%.2f s)" % (again.dt or -1))

    scenario_restart_wait(refs)
    scenario_solo_grace(solo)
    cd.ok(gw.poll() is None, "the gateway kept running (pid %d)" % gw.pid)
    gw.send_signal(signal.SIGTERM)
    try:
        rc = gw.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    cd.ok(rc == 0, "gateway exits 0 on SIGTERM (%s)" % rc)
    return 1 if cd.N_FAIL else 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        for p in cd.PROCS:
            if p.poll() is None:
                p.kill()
    sys.exit(rc)
