"""httpc.py — a minimal HTTP/1.1 client over raw sockets for pagoda's test drivers.

Why not http.client: the hostile-input tests must send bytes no well-behaved client
sends (broken request lines, lying Content-Length, invalid UTF-8, 17 MB bodies that the
server may refuse before reading them all), hold sockets open without sending, and
abort streams mid-way. Python 3 standard library only (the `python3` on PATH has no
third-party packages).

  exchange(host, port, raw, timeout)      send raw request bytes, read one response
  request(host, port, method, path, ...)  build a request, then exchange()
  stream(host, port, path, body, ...)     POST and read an SSE stream event by event

Responses come back as Response(status, reason, headers, body, error): `status` is 0 and
`error` says why when no complete response arrived (connection reset, timeout, garbage).
Header names are lower-cased; a repeated header keeps its last value.
"""
import json
import socket
import struct
import time


class Response:
    def __init__(self, status=0, reason="", headers=None, body=b"", error=None):
        self.status = status
        self.reason = reason
        self.headers = headers or {}
        self.body = body
        self.error = error

    def json(self):
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None

    def __repr__(self):
        b = self.body[:200]
        return "Response(%d %s, %r%s)" % (self.status, self.reason, b,
                                          ", error=%s" % self.error if self.error else "")


class _Reader:
    """Buffered reads from a socket with a deadline (absolute, time.monotonic)."""

    def __init__(self, sock, deadline):
        self.sock = sock
        self.buf = b""
        self.deadline = deadline
        self.eof = False

    def _fill(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("deadline")
        self.sock.settimeout(left)
        d = self.sock.recv(65536)
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def line(self):
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError("connection closed mid-line")
        i = self.buf.index(b"\r\n")
        out, self.buf = self.buf[:i], self.buf[i + 2:]
        return out

    def exact(self, n):
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError("connection closed after %d of %d body bytes" % (len(self.buf), n))
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def rest(self):
        while self._fill():
            pass
        out, self.buf = self.buf, b""
        return out


def _read_head(rd):
    status_line = rd.line().decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError("bad status line %r" % status_line)
    headers = {}
    while True:
        h = rd.line().decode("latin-1")
        if not h:
            break
        k, _, v = h.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), (parts[2] if len(parts) > 2 else ""), headers


def _chunks(rd):
    """Yields the chunks of a chunked body as they arrive."""
    while True:
        size_line = rd.line().split(b";")[0].strip()
        n = int(size_line, 16)
        if n == 0:
            while rd.line():  # trailers
                pass
            return
        yield rd.exact(n)
        rd.exact(2)


def _read_body(rd, method, status, headers):
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return b"".join(_chunks(rd))
    if "content-length" in headers:
        return rd.exact(int(headers["content-length"]))
    return rd.rest()


def connect(host, port, timeout=10):
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def exchange(host, port, raw, timeout=30, method="POST"):
    """Sends `raw` (a whole request, bytes) on a new connection and reads one response."""
    deadline = time.monotonic() + timeout
    try:
        s = connect(host, port, timeout)
    except OSError as e:
        return Response(error="connect: %s" % e)
    try:
        send_error = None
        try:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            s.sendall(raw)
        except OSError as e:
            # The server may answer (413) and close before reading a huge body:
            # what it said still counts, so read on.
            send_error = e
        rd = _Reader(s, deadline)
        try:
            status, reason, headers = _read_head(rd)
            body = _read_body(rd, method, status, headers)
        except (OSError, ValueError, ConnectionError) as e:
            why = "%s: %s" % (type(e).__name__, e)
            if send_error:
                why += " (send failed first: %s)" % send_error
            return Response(error=why)
        return Response(status, reason, headers, body)
    finally:
        s.close()


def build(method, path, body=b"", headers=None, host="127.0.0.1"):
    """A request as bytes. `headers` is a list of (name, value); Host, Content-Length and
    Connection: close are added unless present (name compared case-insensitively)."""
    hs = list(headers or [])
    names = {k.lower() for k, _ in hs}
    if "host" not in names:
        hs.insert(0, ("Host", host))
    if body and "content-length" not in names and "transfer-encoding" not in names:
        hs.append(("Content-Length", str(len(body))))
    if "connection" not in names:
        hs.append(("Connection", "close"))
    head = "%s %s HTTP/1.1\r\n" % (method, path)
    head += "".join("%s: %s\r\n" % (k, v) for k, v in hs)
    return head.encode("latin-1") + b"\r\n" + body


def request(host, port, method, path, body=b"", headers=None, timeout=30):
    if isinstance(body, str):
        body = body.encode("utf-8")
    return exchange(host, port, build(method, path, body, headers), timeout, method)


def post_json(host, port, path, obj, key=None, timeout=30):
    hs = [("Content-Type", "application/json")]
    if key:
        hs.append(("Authorization", "Bearer " + key))
    return request(host, port, "POST", path, json.dumps(obj).encode(), hs, timeout)


class Stream:
    """An SSE response read event by event: for ev in st.events(): ... (ev is the text after
    'data: '). st.status/headers are set after open(); st.close() aborts the connection."""

    def __init__(self, host, port, path, body, key=None, timeout=60):
        self.host, self.port, self.path = host, port, path
        self.body = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.key = key
        self.deadline = time.monotonic() + timeout
        self.sock = None
        self.status = 0
        self.headers = {}
        self.error_body = b""

    def open(self):
        hs = [("Content-Type", "application/json"), ("Accept", "text/event-stream")]
        if self.key:
            hs.append(("Authorization", "Bearer " + self.key))
        self.sock = connect(self.host, self.port, max(0.1, self.deadline - time.monotonic()))
        self.sock.sendall(build("POST", self.path, self.body, hs))
        self.rd = _Reader(self.sock, self.deadline)
        self.status, _, self.headers = _read_head(self.rd)
        if self.status != 200 or "text/event-stream" not in self.headers.get("content-type", ""):
            self.error_body = _read_body(self.rd, "POST", self.status, self.headers)
        return self

    def events(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            src = _chunks(self.rd)
        else:
            def raw():
                while self.rd._fill():
                    d, self.rd.buf = self.rd.buf, b""
                    yield d
                if self.rd.buf:
                    yield self.rd.buf
            src = raw()
        pending = b""
        for chunk in src:
            pending += chunk
            while b"\n\n" in pending:
                ev, pending = pending.split(b"\n\n", 1)
                for line in ev.split(b"\n"):
                    if line.startswith(b"data: "):
                        yield line[6:].decode("utf-8")
        if pending.strip():
            raise ConnectionError("stream ended inside an event: %r" % pending[:100])

    def close(self):
        if self.sock:
            try:
                # RST rather than FIN: the hardest way for a client to leave
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            self.sock.close()
            self.sock = None


def oai_error_shape(j):
    """None when j is {"error":{"message":str,"type":str,"param":str|null,"code":str|null}}
    (exactly those four keys), else what is wrong."""
    if not isinstance(j, dict) or set(j) != {"error"}:
        return "body is not {\"error\": ...}: %r" % (str(j)[:120],)
    e = j["error"]
    if not isinstance(e, dict) or set(e) != {"message", "type", "param", "code"}:
        return "error keys are %r" % (sorted(e) if isinstance(e, dict) else e,)
    if not isinstance(e["message"], str) or not e["message"]:
        return "message is not a non-empty string"
    if not isinstance(e["type"], str) or not e["type"]:
        return "type is not a non-empty string"
    for k in ("param", "code"):
        if e[k] is not None and not isinstance(e[k], str):
            return "%s is neither a string nor null" % k
    return None
