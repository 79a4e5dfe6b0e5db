#!/usr/bin/env python3
"""slow_bodies.py — what pagoda-gateway holds under many slow request bodies (issue #37).

Opens N connections to the gateway on 127.0.0.1; each announces a 15 MiB JSON body, pushes
up to --push bytes of it as fast as the gateway reads, then drips one byte every --drip
seconds for --hold seconds. Prints the gateway's VmRSS (/proc/PID/status) before, during
(sampled every second; the peak is reported) and after the connections are closed, and what
the connections were answered.

  --mode keyless   no API key (the attack of issue #37: the gateway should answer 401 at
                   the headers and read nothing)
  --mode keyed     a valid key, the connections spread over 127.0.0.1..127.0.0.K
                   (--addrs K) so the global upload limit is reached, not only the
                   per-address one

Without --url the script starts build/pagoda-gateway itself (with a keys file and no
worker; extra gateway flags after --), else give --url and --pid of a running one.

  python3 tests/bench/slow_bodies.py --conns 2000 --mode keyless
  python3 tests/bench/slow_bodies.py --conns 2000 --mode keyed --addrs 100 --push 1048576
"""
import argparse
import errno
import os
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tap import free_port  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BODY = 15 << 20


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1



def start_gateway(key, extra):
    gw = os.path.join(ROOT, os.environ.get("PAGODA_BUILD", "build"), "pagoda-gateway")
    tmp = tempfile.mkdtemp(prefix="slow-bodies.")
    keys = subprocess.run([gw, "--hash-key", "bench:normal", "--secret", key], check=True,
                          capture_output=True, text=True).stdout
    with open(os.path.join(tmp, "keys"), "w") as f:
        f.write("".join(l + "\n" for l in keys.splitlines() if not l.startswith("#")))
    port = free_port()
    log = open(os.path.join(tmp, "gateway.log"), "w")
    p = subprocess.Popen([gw, "--listen", "127.0.0.1:%d" % port, "--worker-endpoint",
                          "tcp://127.0.0.1:%d" % free_port(), "--keys", os.path.join(tmp, "keys"),
                          "--state-dir", ":memory:"] + extra, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return p, port, tmp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conns", type=int, default=2000)
    ap.add_argument("--mode", choices=("keyless", "keyed"), default="keyless")
    ap.add_argument("--addrs", type=int, default=1, help="source addresses 127.0.0.1..K (keyed mode)")
    ap.add_argument("--push", type=int, default=BODY, help="body bytes pushed before the drip")
    ap.add_argument("--drip", type=float, default=8.0, help="seconds between dripped bytes")
    ap.add_argument("--hold", type=float, default=30.0, help="seconds the drip goes on")
    ap.add_argument("--url", help="http://127.0.0.1:PORT of a running gateway (with --pid)")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--key", default="slow-bodies-bench-key")
    ap.add_argument("gateway_flags", nargs="*", help="after --: extra flags of the gateway started here")
    a = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.conns + 256
    if hard != resource.RLIM_INFINITY and hard < want:
        sys.exit("the open-files hard limit %d is below %d" % (hard, want))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))

    proc = None
    if a.url:
        port, pid = int(a.url.rsplit(":", 1)[1]), a.pid
    else:
        proc, port, tmp = start_gateway(a.key, a.gateway_flags)
        pid = proc.pid
        print("# gateway pid %d on 127.0.0.1:%d (log %s/gateway.log)" % (pid, port, tmp))
    auth = "Authorization: Bearer %s\r\n" % a.key if a.mode == "keyed" else ""
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%sContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (port, auth, BODY)).encode()
    chunk = b" " * 65536

    before = rss_kb(pid)
    print("rss before: %d KiB" % before)
    sel = selectors.DefaultSelector()
    conns = {}  # sock -> [pushed, answer bytes, closed]
    t0 = time.monotonic()
    for i in range(a.conns):
        s = socket.socket()
        if a.mode == "keyed" and a.addrs > 1:
            s.bind(("127.0.0.%d" % (1 + i % a.addrs), 0))
        s.connect(("127.0.0.1", port))
        s.sendall(head)
        s.setblocking(False)
        conns[s] = [0, b"", False]
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    print("# %d connections opened in %.1f s" % (a.conns, time.monotonic() - t0))

    peak, samples, t_sample, t_drip = before, [], time.monotonic(), time.monotonic()
    t_end_push = None
    while True:
        now = time.monotonic()
        pushing = any(not c[2] and c[0] < a.push for c in conns.values())
        if not pushing and t_end_push is None:
            t_end_push = now
            print("# push phase over after %.1f s" % (now - t0))
            for s, c in conns.items():
                if not c[2]:
                    sel.modify(s, selectors.EVENT_READ)
        if t_end_push is not None and now - t_end_push >= a.hold:
            break
        for key, ev in sel.select(timeout=0.2):
            s = key.fileobj
            c = conns[s]
            if ev & selectors.EVENT_READ:
                try:
                    d = s.recv(65536)
                except OSError:
                    d = b""
                if d:
                    c[1] += d
                else:
                    c[2] = True
                    sel.unregister(s)
                    continue
            if ev & selectors.EVENT_WRITE and c[0] < a.push:
                try:
                    c[0] += s.send(chunk[:min(len(chunk), a.push - c[0])])
                except BlockingIOError:
                    pass
                except OSError:
                    c[2] = True
                    sel.unregister(s)
                    continue
                if c[0] >= a.push:
                    sel.modify(s, selectors.EVENT_READ)
        if t_end_push is not None and now - t_drip >= a.drip:
            t_drip = now
            for s, c in conns.items():
                if not c[2]:
                    try:
                        s.send(b" ")
                    except OSError:
                        pass
        if now - t_sample >= 1.0:
            t_sample = now
            r = rss_kb(pid)
            peak = max(peak, r)
            samples.append(r)
    open_now = sum(1 for c in conns.values() if not c[2])
    status = {}
    for c in conns.values():
        line = c[1].split(b"\r\n", 1)[0].decode("latin-1") or ("closed without an answer" if c[2] else "still open")
        status[line] = status.get(line, 0) + 1
    during = rss_kb(pid)
    print("rss during: peak %d KiB, at the end of the hold %d KiB (%d samples)" % (peak, during, len(samples)))
    print("# answers: " + "; ".join("%d × %s" % (n, k) for k, n in sorted(status.items(), key=lambda x: -x[1])))
    print("# still open at the end of the hold: %d of %d" % (open_now, a.conns))
    for s in conns:
        s.close()
    time.sleep(2.0)
    after = rss_kb(pid)
    print("rss after: %d KiB (2 s after closing)" % after)
    print("summary mode=%s conns=%d push=%d before=%d peak=%d after=%d" % (a.mode, a.conns, a.push, before, peak, after))
    if proc:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
