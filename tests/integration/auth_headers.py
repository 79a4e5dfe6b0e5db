#!/usr/bin/env python3
"""auth_headers.py — the driver of tests/integration/auth_headers.sh (see there): the HTTP
edge attacked as a client without a key, or a web page, would attack it, over real sockets.

  auth_headers.py early      refusals decided by the headers come before any body byte
  auth_headers.py hold N     N keyless connections each declaring 15 MiB and pushing body
                             bytes; prints the gateway's RSS growth (PAGODA_PID)
  auth_headers.py slow       a dripping body is cut by the rate floor, a steady but too
                             slow one by the total deadline (gateway with a 1 s window,
                             1000 B/s floor, 3 s deadline)
  auth_headers.py limits     upload slots: per address, then for all (gateway with
                             --max-uploads 3 --max-uploads-per-ip 2, no rate floor)
  auth_headers.py host       Host: DNS rebinding names refused, IPs and localhost served
  auth_headers.py allowed    --allowed-host pagoda.svc --allowed-host '*.cluster.local'
  auth_headers.py path       control bytes in the path, long URLs
  auth_headers.py types      wrong JSON types on the three API surfaces

Environment: PAGODA_URL (http://127.0.0.1:PORT), PAGODA_KEY (a valid key), PAGODA_PID.
Prints "ok - " / "not ok - " lines (tests/run.sh counts them).
"""
import json
import os
import resource
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import httpc  # noqa: E402

URL = os.environ.get("PAGODA_URL", "http://127.0.0.1:8080")
HOST, PORT = URL.split("//", 1)[1].rsplit(":", 1)
PORT = int(PORT)
KEY = os.environ.get("PAGODA_KEY", "")
N_FAIL = 0
MIB15 = 15 << 20


def check(ok, what):
    global N_FAIL
    print(("ok - " if ok else "not ok - ") + what)
    sys.stdout.flush()
    if not ok:
        N_FAIL += 1


def head(method, path, headers, host=None):
    """Request headers only (no body), as bytes."""
    hs = [("Host", host or "%s:%d" % (HOST, PORT))] + list(headers)
    return ("%s %s HTTP/1.1\r\n" % (method, path) + "".join("%s: %s\r\n" % kv for kv in hs) +
            "\r\n").encode("latin-1")


def read_response(s, deadline):
    """One response from socket s: Response, with .closed = the server closed after it."""
    rd = httpc._Reader(s, deadline)
    try:
        status, reason, headers = httpc._read_head(rd)
        body = httpc._read_body(rd, "POST", status, headers)
    except (OSError, ValueError, ConnectionError) as e:
        r = httpc.Response(error="%s: %s" % (type(e).__name__, e))
        r.closed = True
        return r
    r = httpc.Response(status, reason, headers, body)
    try:
        r.closed = rd.buf == b"" and not rd._fill()
    except OSError:
        r.closed = True
    return r


def send_head_only(raw, timeout=3.0, src=None):
    """Sends the headers of a request whose body never follows; returns (response, seconds)."""
    s = socket.socket(socket.AF_INET6 if HOST.startswith("[") else socket.AF_INET)
    if src:
        s.bind((src, 0))
    s.settimeout(timeout)
    s.connect((HOST, PORT))
    t0 = time.monotonic()
    s.sendall(raw)
    r = read_response(s, t0 + timeout)
    s.close()
    return r, time.monotonic() - t0


def shape(r, api):
    """None when r's body is the API's error shape, else what is wrong."""
    j = r.json()
    if api == "anthropic":
        if not (isinstance(j, dict) and j.get("type") == "error" and isinstance(j.get("error"), dict) and
                isinstance(j["error"].get("type"), str) and isinstance(j["error"].get("message"), str)):
            return "not Anthropic's error shape: %r" % r.body[:160]
        return None
    bad = httpc.oai_error_shape(j)
    return None if bad is None else "%s: %r" % (bad, r.body[:160])


def code_of(r):
    j = r.json() or {}
    e = j.get("error") if isinstance(j, dict) else None
    return (e or {}).get("code") if isinstance(e, dict) else None


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n)) if hard != resource.RLIM_INFINITY else max(soft, n)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


JSON_15M = [("Content-Type", "application/json"), ("Content-Length", str(MIB15))]


def run_early():
    """Every refusal the headers decide comes before the body: the client sends headers
    that announce 15 MiB and nothing else, and must read the answer within 2 s."""
    cases = [
        # what, method, path, extra headers, status, code, api
        ("keyless POST /v1/chat/completions", "POST", "/v1/chat/completions", [], 401, "invalid_api_key", "oai"),
        ("wrong key POST /v1/completions", "POST", "/v1/completions",
         [("Authorization", "Bearer sk-wrong")], 401, "invalid_api_key", "oai"),
        ("keyless POST /v1/messages (Anthropic shape)", "POST", "/v1/messages", [], 401, None, "anthropic"),
        ("keyless POST /v1/responses", "POST", "/v1/responses", [], 401, "invalid_api_key", "oai"),
        ("keyless POST /v1/embeddings", "POST", "/v1/embeddings", [], 401, "invalid_api_key", "oai"),
        ("keyless POST /admin/reload-keys", "POST", "/admin/reload-keys", [], 401, "invalid_api_key", "oai"),
        ("unknown path", "POST", "/v1/nothing-here", [], 404, "not_found", "oai"),
        ("GET route posted to", "POST", "/v1/models", [("Authorization", "Bearer " + KEY)], 405,
         "method_not_allowed", "oai"),
        ("keyless GET /health with a body", "GET", "/health", [], 413, "request_too_large", "oai"),
        ("key, 17 MiB declared (over --max-body)", "POST", "/v1/chat/completions",
         [("Authorization", "Bearer " + KEY), ("Content-Length", str(17 << 20))], 413, "request_too_large", "oai"),
        ("key, 17 MiB declared on /v1/messages", "POST", "/v1/messages",
         [("x-api-key", KEY), ("Content-Length", str(17 << 20))], 413, None, "anthropic"),
        ("key, text/plain body", "POST", "/v1/chat/completions",
         [("Authorization", "Bearer " + KEY), ("Content-Type", "text/plain")], 415, "unsupported_media_type", "oai"),
        ("keyless chunked body", "POST", "/v1/chat/completions",
         [("Transfer-Encoding", "chunked")], 401, "invalid_api_key", "oai"),
        ("foreign Origin", "POST", "/v1/chat/completions",
         [("Authorization", "Bearer " + KEY), ("Origin", "http://evil.example")], 403, "origin_not_allowed", "oai"),
    ]
    for what, method, path, extra, status, code, api in cases:
        hs = [kv for kv in JSON_15M if not any(kv[0].lower() == e[0].lower() for e in extra)]
        if any(e[0] == "Transfer-Encoding" for e in extra):
            hs = [kv for kv in hs if kv[0] != "Content-Length"]
        r, dt = send_head_only(head(method, path, hs + extra))
        why = None
        if r.status != status:
            why = "status %s, want %d (%s)" % (r.status or "none", status, r.error or r.body[:120])
        elif shape(r, api):
            why = shape(r, api)
        elif code and code_of(r) != code:
            why = "code %r, want %r" % (code_of(r), code)
        elif not r.closed:
            why = "the connection stayed open (the body would be read)"
        check(why is None, "%s, 15 MiB announced, only headers sent: %d before any body byte, connection "
              "closed (%.2f s)%s" % (what, status, dt, "" if why is None else ": " + why))
    # a bodyless refusal keeps the connection (keep-alive), and a second request on it works
    s = socket.create_connection((HOST, PORT), timeout=5)
    s.sendall(head("GET", "/v1/models", []))
    r1 = read_response_keep(s)
    s.sendall(head("GET", "/v1/models", [("Authorization", "Bearer " + KEY)]))
    r2 = read_response_keep(s)
    s.close()
    check(r1.status == 401 and r2.status == 200,
          "a bodyless 401 keeps the connection: then GET /v1/models with the key on it → %s" % r2.status)


def read_response_keep(s):
    rd = httpc._Reader(s, time.monotonic() + 5)
    try:
        status, reason, headers = httpc._read_head(rd)
        body = httpc._read_body(rd, "GET", status, headers)
        return httpc.Response(status, reason, headers, body)
    except (OSError, ValueError, ConnectionError) as e:
        return httpc.Response(error=str(e))


def run_hold(n):
    """The attack of issue #37: keyless connections announce 15 MiB and push body bytes.
    Every one is answered 401 at its headers and closed; the gateway holds nothing."""
    pid = int(os.environ["PAGODA_PID"])
    raise_nofile(n + 256)
    before = rss_kb(pid)
    socks, n401, chunk = [], 0, b" " * 65536
    raw = head("POST", "/v1/chat/completions", JSON_15M)
    for _ in range(n):
        s = socket.create_connection((HOST, PORT), timeout=5)
        s.sendall(raw)
        try:
            s.send(chunk)  # what the attacker can push before it learns it was refused
        except OSError:
            pass
        socks.append(s)
    peak = rss_kb(pid)
    for s in socks:
        r = read_response(s, time.monotonic() + 5)
        n401 += r.status == 401
        s.close()
    time.sleep(0.5)
    after = rss_kb(pid)
    print("measure hold %d %d %d %d %d" % (n, n401, before, peak, after))
    check(n401 == n, "%d keyless connections announcing 15 MiB: %d answered 401" % (n, n401))
    check(peak - before < 64 * 1024,
          "gateway RSS while %d keyless 15 MiB uploads were attempted: %d → %d KiB (+%d KiB; buffering "
          "them would be %d MiB)" % (n, before, peak, peak - before, n * 15))


def watch_close(s, t0, rate=0, limit=15.0):
    """Seconds until the server closed s (None: still open after limit); sends `rate`
    body bytes per second meanwhile."""
    s.setblocking(False)
    sent_at = time.monotonic()
    while time.monotonic() - t0 < limit:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - t0
        except BlockingIOError:
            pass
        except OSError:
            return time.monotonic() - t0
        now = time.monotonic()
        if rate and now - sent_at >= 0.1:
            try:
                s.send(b" " * int(rate * (now - sent_at)))
            except BlockingIOError:
                pass
            except OSError:
                return time.monotonic() - t0
            sent_at = now
        time.sleep(0.02)
    return None


def run_slow():
    raw = head("POST", "/v1/chat/completions",
               [("Authorization", "Bearer " + KEY), ("Content-Type", "application/json"), ("Content-Length", "100000")])
    # 1. a drip (one byte a second, under the 1000 B/s floor): cut after the first 1 s window
    s = socket.create_connection((HOST, PORT), timeout=5)
    t0 = time.monotonic()
    s.sendall(raw + b"{")
    dt = watch_close(s, t0, rate=1)
    s.close()
    check(dt is not None and dt <= 3.0,
          "a body dripping 1 B/s (floor 1000 B/s per 1 s window) is cut: closed after %s s (limit 3)" %
          ("%.1f" % dt if dt else "never"))
    # 2. steady 2000 B/s, above the floor, but 100000 bytes need 50 s: the 3 s deadline cuts it
    s = socket.create_connection((HOST, PORT), timeout=5)
    t0 = time.monotonic()
    s.sendall(raw)
    dt = watch_close(s, t0, rate=2000)
    s.close()
    check(dt is not None and 2.5 <= dt <= 5.0,
          "a body at 2000 B/s that needs 50 s is cut by the 3 s body deadline: closed after %s s (want 2.5..5)" %
          ("%.1f" % dt if dt else "never"))
    # 3. meanwhile a body that arrives at once is served (its 400: the parser read all of it)
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":"yes"}'
    r = httpc.request(HOST, PORT, "POST", "/v1/chat/completions", body,
                      [("Authorization", "Bearer " + KEY), ("Content-Type", "application/json")], 5)
    check(r.status == 400, "a whole body sent at once is read and parsed (400 for stream:\"yes\"): %s" % r.status)


def run_limits():
    raw = head("POST", "/v1/chat/completions",
               [("Authorization", "Bearer " + KEY), ("Content-Type", "application/json"), ("Content-Length", "1000")])

    def open_upload(src):
        s = socket.socket()
        s.bind((src, 0))
        s.settimeout(5)
        s.connect((HOST, PORT))
        s.sendall(raw + b"{")
        return s

    def answer(s, wait=0.5):
        s.settimeout(wait)
        try:
            r = read_response(s, time.monotonic() + wait)
        except socket.timeout:
            return None
        return None if r.status == 0 and "timeout" in (r.error or "").lower() else r

    held = [open_upload("127.0.0.1"), open_upload("127.0.0.1")]
    check(all(answer(s) is None for s in held), "upload limits: 2 uploads from 127.0.0.1 are held (per-IP limit 2)")
    s3 = open_upload("127.0.0.1")
    r = answer(s3, 3)
    check(r is not None and r.status == 429 and code_of(r) == "rate_limit_exceeded" and shape(r, "oai") is None and
          r.headers.get("retry-after", "").isdigit(),
          "upload limits: a 3rd upload from 127.0.0.1 → 429 rate_limit_exceeded + Retry-After before its body (%s)"
          % (r.status if r else "no answer"))
    s3.close()
    held.append(open_upload("127.0.0.2"))
    check(answer(held[-1]) is None, "upload limits: an upload from 127.0.0.2 is held (3 of 3 in all)")
    s4 = open_upload("127.0.0.3")
    r = answer(s4, 3)
    check(r is not None and r.status == 503 and shape(r, "oai") is None,
          "upload limits: a 4th upload (from 127.0.0.3) → 503 (global limit 3): %s" % (r.status if r else "no answer"))
    s4.close()
    # a completed body frees its slot: finish one held upload, a new one is held again
    held[0].sendall(b" " * 999)
    r = answer(held[0], 5)
    check(r is not None and r.status == 400, "upload limits: a held upload completes (its 400 from the parser): %s"
          % (r.status if r else "no answer"))
    s5 = open_upload("127.0.0.1")
    check(answer(s5) is None, "upload limits: its slot is free again (a new upload from 127.0.0.1 is held)")
    for s in held + [s5]:
        s.close()


def get(path, host, key=True):
    hs = [("Authorization", "Bearer " + KEY)] if key else []
    return httpc.exchange(HOST, PORT, httpc.build("GET", path, b"", hs, host=host), 5, "GET")


def run_host():
    for path in ("/health", "/metrics", "/v1/models", "/ui/"):
        for host in ("rebind.evil.example:%d" % PORT, "attacker.example", "localhost.evil.example:%d" % PORT):
            r = get(path, host)
            check(r.status == 421 and code_of(r) == "host_not_allowed" and shape(r, "oai") is None,
                  "Host %s: GET %s → 421 host_not_allowed (got %s)" % (host, path, r.status))
    for host in ("127.0.0.1:%d" % PORT, "localhost:%d" % PORT, "localhost", "[::1]:%d" % PORT, "127.0.0.1:9999"):
        r = get("/v1/models", host)
        check(r.status == 200, "Host %s: GET /v1/models served (%s)" % (host, r.status))
    r = httpc.exchange(HOST, PORT, httpc.build("POST", "/v1/messages", b'{}', [("x-api-key", KEY),
                       ("Content-Type", "application/json")], host="rebind.evil.example"), 5)
    check(r.status == 421 and shape(r, "anthropic") is None,
          "Host rebind.evil.example: POST /v1/messages → 421 in Anthropic's shape (%s)" % r.status)


def run_allowed():
    for host, want in (("pagoda.svc:8080", 200), ("PAGODA.SVC", 200), ("pagoda.ns.svc.cluster.local:80", 200),
                       ("cluster.local", 421), ("pagoda.svc.evil.example", 421), ("127.0.0.1", 200)):
        r = get("/v1/models", host)
        check(r.status == want, "--allowed-host pagoda.svc, *.cluster.local: Host %s → %d (got %s)" %
              (host, want, r.status))


def run_path():
    k = [("Authorization", "Bearer " + KEY)]
    for path, hs in (("/ui/index.html%00.js", []), ("/v1/responses/resp_%00x", k), ("/health%00", []),
                     ("/v1/models%0a", k), ("/v1/models%7F", k), ("/v1/models%1f", k), ("/health\x01", [])):
        r = httpc.exchange(HOST, PORT, httpc.build("GET", path, b"", hs), 5, "GET")
        check(r.status == 400 and code_of(r) == "invalid_path" and shape(r, "oai") is None,
              "GET %r → 400 invalid_path before routing (got %s %s)" % (path, r.status, code_of(r)))
    r = httpc.exchange(HOST, PORT, httpc.build("GET", "/v1/responses/resp_%41", b"", k), 5, "GET")
    check(r.status in (404, 503), "a harmless escape (resp_%%41) is routed as before: %s" % r.status)
    r = httpc.exchange(HOST, PORT, httpc.build("POST", "/v1/messages%00", b"{}", [("x-api-key", KEY),
                       ("Content-Type", "application/json")]), 5)
    check(r.status == 400 and shape(r, "anthropic") is None,
          "POST /v1/messages%%00 → 400 in Anthropic's shape (%s)" % r.status)
    for n in (9000, 60000):
        r = httpc.exchange(HOST, PORT, httpc.build("GET", "/v1/models?" + "a" * n, b"", k), 5, "GET")
        check(r.status == 414 and code_of(r) == "uri_too_long" and shape(r, "oai") is None,
              "a %d-byte URL → 414 uri_too_long in JSON (got %s %r)" % (n, r.status, r.body[:80]))
    # past what libmicrohttpd holds for a connection (HTTP_CONN_MEMORY): its own 414, HTML (documented)
    r = httpc.exchange(HOST, PORT, httpc.build("GET", "/v1/models?" + "a" * 100000, b"", k), 5, "GET")
    check(r.status == 414, "a 100000-byte URL → 414 from libmicrohttpd (HTML body, docs/SECURITY.md): %s" % r.status)


def run_types():
    k = [("Authorization", "Bearer " + KEY), ("x-api-key", KEY), ("Content-Type", "application/json")]
    msg = [{"role": "user", "content": "hi"}]
    cases = [
        ("/v1/messages", "anthropic", {"stop_sequences": "x"}),
        ("/v1/messages", "anthropic", {"stop_sequences": ["x", 1]}),
        ("/v1/messages", "anthropic", {"top_k": 1.5}),
        ("/v1/messages", "anthropic", {"top_k": "5"}),
        ("/v1/messages", "anthropic", {"metadata": {"user_id": 5}}),
        ("/v1/messages", "anthropic", {"service_tier": 1}),
        ("/v1/messages", "anthropic", {"stream": "true"}),
        ("/v1/messages", "anthropic", {"temperature": "0.5"}),
        ("/v1/messages", "anthropic", {"max_tokens": "16"}),
        ("/v1/messages", "anthropic", {"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok",
                                          "is_error": "yes"}]}]}),
        ("/v1/responses", "oai", {"background": "true"}),
        ("/v1/responses", "oai", {"background": 0}),
        ("/v1/responses", "oai", {"include": [1]}),
        ("/v1/responses", "oai", {"reasoning": {"summary": 5}}),
        ("/v1/responses", "oai", {"service_tier": 5}),
        ("/v1/responses", "oai", {"max_tool_calls": "3"}),
        ("/v1/responses", "oai", {"store": "false"}),
        ("/v1/chat/completions", "oai", {"stream": "true"}),
        ("/v1/chat/completions", "oai", {"n": "2"}),
    ]
    for path, api, extra in cases:
        if path == "/v1/messages":
            body = {"model": "m", "max_tokens": 16, "messages": msg}
        elif path == "/v1/responses":
            body = {"model": "m", "input": "hi"}
        else:
            body = {"model": "m", "messages": msg}
        body.update(extra)
        r = httpc.request(HOST, PORT, "POST", path, json.dumps(body).encode(), k, 5)
        check(r.status == 400 and shape(r, api) is None,
              "%s %s → 400 in its API's shape (got %s %s)" % (path, json.dumps(extra)[:90], r.status,
                                                               (r.json() or {}).get("error", {}).get("message", "")[:80]
                                                               if isinstance(r.json(), dict) else r.body[:80]))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    fns = {"early": run_early, "slow": run_slow, "limits": run_limits, "host": run_host,
           "allowed": run_allowed, "path": run_path, "types": run_types}
    if mode == "hold":
        run_hold(int(sys.argv[2]))
    elif mode in fns:
        fns[mode]()
    else:
        print(__doc__)
        return 2
    return 1 if N_FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
