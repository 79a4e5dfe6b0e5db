#!/usr/bin/env bash
# Remote http(s) image URLs (issue #40; gateway/image_fetch.h), against real
# gateways, their local workers and a local Python HTTP server on 127.0.0.1
# that serves a test PNG and the hostile cases and logs every request it gets:
#   * gateway D (no --image-url-allow): an http(s) URL is refused (400 naming
#     --image-url-allow) in the chat, Anthropic and Responses shapes, and the
#     server sees no request;
#   * gateway B (a text model; allow 127.0.0.1:P literally and localhost:P2 by
#     name; --image-url-timeout-ms 1500, --image-max-bytes 100000): a slow
#     body (a byte a second) times out, a body over the limit with and without
#     Content-Length, a redirect to a host off the list, a 404, a text body,
#     a host off the list, a listed name that resolves to loopback, user
#     names, file:// and gopher:// each get a 400 naming the reason in the
#     three shapes; the paths that must not be reached never appear in the
#     server's log (no connection was made); the PNG itself is fetched and
#     decoded (then "does not accept images": a text model); /metrics counts
#     the results; the gateway keeps serving text;
#   * gateway A (a generated gemma3 text + mmproj pair, as images.sh makes it;
#     timeout 60 s): the PNG by URL gives the same greedy text as the same
#     PNG as a data: URL on the three surfaces, a redirect to an allowed host
#     is followed, a repeated URL image is a prefix-cache hit
#     (cached_tokens); while three fetches wait on a server that holds them
#     until told (more than the gateway's 2 HTTP threads), a text-only request
#     is answered, then the held fetches complete.
# Nothing here depends on speed beyond generous timeouts: the held fetches
# cannot finish before the test releases them.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
HERE=$(cd "$(dirname "$0")" && pwd)
[[ -x $GW && -x $MK ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
SMALL=$(small_model)
mkdir -p "$TMP/img"

check "gemma3 pair written" "$MK" -o "$TMP/vt.gguf" --arch gemma3 --dim 64 --layers 2 --heads 4 --kv-heads 2 \
  --ffn 128 --ctx 512 --vocab 512 --type f32 --seed 40 --untied --mute-special --logit-scale 8 \
  --chat-template "$HERE/../compare/gemma_turns.jinja" --mmproj "$TMP/vp.gguf" --vis-size 112 --vis-patch 7 \
  --vis-dim 64 --vis-layers 2 --vis-heads 4 --vis-ffn 128
PYTHONPATH="$HERE/../compare" python3 - "$TMP/img" <<'PY'
import struct, sys, zlib
from vision_images import images
d = sys.argv[1]
def chunk(t, b):
    return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
for name, px in images(112).items():
    raw = b"".join(b"\0" + bytes(px[y * 336:(y + 1) * 336]) for y in range(112))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 112, 112, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    open(f"{d}/{name}.png", "wb").write(png)
PY
[[ $? -eq 0 ]] || fail "test PNGs written"

# --- the image server: two ports (P: listed as 127.0.0.1:P; P2: listed as
# localhost:P2, a name that resolves to loopback, so never connected to)
P=$(free_port); P2=$(free_port)
cat >"$TMP/srv.py" <<'PY'
import http.server, socketserver, sys, threading, time
p, p2, d, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
png = open(f"{d}/gradient.png", "rb").read()
MAX = 100000
release = threading.Event()
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def send(self, code, body, ctype="application/octet-stream", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        with lock:
            open(log, "a").write(f"{self.server.server_address[1]} {self.path}\n")
        path = self.path.split("?")[0]
        try:
            if path == "/img.png":
                self.send(200, png, "text/plain")  # a wrong Content-Type: the bytes decide
            elif path == "/slow.png":  # a byte a second for two minutes
                self.send_response(200)
                self.send_header("Content-Length", "120")
                self.end_headers()
                for _ in range(120):
                    self.wfile.write(b"\x89")
                    self.wfile.flush()
                    time.sleep(1)
            elif path == "/huge-cl.png":  # declares more than the limit
                self.send_response(200)
                self.send_header("Content-Length", str(MAX + 1))
                self.end_headers()
                self.wfile.write(png + b"\0" * (MAX + 1 - len(png)))
            elif path == "/huge-close.png":  # no Content-Length: ends when the connection closes
                self.protocol_version = "HTTP/1.0"
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                self.wfile.write(png + b"\0" * (3 * MAX))
            elif path == "/redirect-out.png":
                self.send(302, b"", extra=[("Location", f"http://localhost:{p}/never-redirect.png")])
            elif path == "/redirect-in.png":
                self.send(302, b"", extra=[("Location", f"http://127.0.0.1:{p}/img.png")])
            elif path == "/text.png":
                self.send(200, b"hello, I am not an image\n", "image/png")
            elif path == "/hold.png":  # held until /release
                release.wait(120)
                self.send(200, png, "image/png")
            elif path == "/release":
                release.set()
                self.send(200, b"ok")
            else:
                self.send(404, b"not found", "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
for port in (p, p2):
    s = S(("127.0.0.1", port), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
open(log + ".ready", "w").close()
threading.Event().wait()
PY
spawn "$TMP/srv.out" python3 "$TMP/srv.py" $P $P2 "$TMP/img" "$TMP/srv.log"
check "image server up" wait_for 30 test -e "$TMP/srv.log.ready"
touch "$TMP/srv.log"

# --- gateway D: no allow list; gateway B: the hostile cases (a text model)
hpd=$(free_port); zpd=$(free_port); hpb=$(free_port); zpb=$(free_port)
spawn "$TMP/gwd.log" "$GW" --listen 127.0.0.1:$hpd --worker-endpoint tcp://127.0.0.1:$zpd \
  --model "tiny=$SMALL" --max-seqs 2 --log-level debug
spawn "$TMP/gwb.log" "$GW" --listen 127.0.0.1:$hpb --worker-endpoint tcp://127.0.0.1:$zpb \
  --model "tiny=$SMALL" --max-seqs 2 --log-level debug --image-url-allow 127.0.0.1:$P \
  --image-url-allow localhost:$P2 --image-url-timeout-ms 1500 --image-max-bytes 100000
GWB_PID=$SPAWNED

python3 - "http://127.0.0.1:$hpd" "http://127.0.0.1:$hpb" $P $P2 "$TMP/srv.log" "$HERE/../support" <<'PY'
import json, sys, time, urllib.request, urllib.error
ud, ub, p, p2, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
sys.path.insert(0, sys.argv[6])
import prom
n_fail = 0
def report(ok, what, extra=""):
    global n_fail
    print(("ok - " if ok else "not ok - ") + what + (("  # " + extra) if extra and not ok else ""))
    n_fail += not ok
def post(url, path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
def up(url):
    t = time.time() + 60
    while time.time() < t:
        try:
            h = json.load(urllib.request.urlopen(url + "/health", timeout=5))
            if h["models"]["tiny"]["replicas"] == 1:
                return True
        except (OSError, KeyError):
            pass
        time.sleep(0.2)
    return False
def three(url, u):
    """the URL as an image on the three surfaces: [(surface, code, json)]"""
    out = []
    c, j = post(url, "/v1/chat/completions", {"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": u}}]}]})
    out.append(("chat", c, j))
    c, j = post(url, "/v1/messages", {"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "x"},
                                     {"type": "image", "source": {"type": "url", "url": u}}]}]})
    out.append(("anthropic", c, j))
    c, j = post(url, "/v1/responses", {"model": "tiny", "max_output_tokens": 2, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "x"}, {"type": "input_image", "image_url": u}]}]})
    out.append(("responses", c, j))
    return out
def refused(url, u, words, what, status=400, named=True):
    for surface, c, j in three(url, u):
        if surface == "anthropic":
            shaped = isinstance(j, dict) and j.get("type") == "error" and isinstance(j.get("error"), dict)
        else:
            shaped = isinstance(j, dict) and isinstance(j.get("error"), dict) and \
                set(j["error"]) == {"message", "type", "param", "code"}
        msg = j["error"].get("message", "") if shaped else ""
        # the refusal names the part in the client's own request
        field = {"chat": "messages[0].content[1]", "anthropic": "messages.0.content.1",
                 "responses": "input[0].content[1]"}[surface]
        report(c == status and shaped and all(w.lower() in msg.lower() for w in words) and (field in msg or not named),
               f"{surface}: {what} → {status}", f"{c} {json.dumps(j)[:300]}")
def seen(path):
    return any(l.split()[1].split("?")[0] == path for l in open(log).read().splitlines())

report(up(ud) and up(ub), "gateways D (no allow list) and B (allow list) up")

# D: refused without a connection
refused(ud, f"http://127.0.0.1:{p}/never-disabled.png", ["remote image URLs", "--image-url-allow"],
        "http URL, no allow list")
refused(ud, f"https://127.0.0.1:{p}/never-disabled.png", ["--image-url-allow"], "https URL, no allow list")
report(not seen("/never-disabled.png"), "no allow list: the server got no request")

# B: each reason
refused(ub, f"http://127.0.0.1:{p}/slow.png", ["not fetched within 1500 ms", "--image-url-timeout-ms"],
        "a body at a byte a second (timeout 1.5 s)")
refused(ub, f"http://127.0.0.1:{p}/huge-cl.png", ["over 100000 bytes", "--image-max-bytes"],
        "Content-Length over --image-max-bytes")
refused(ub, f"http://127.0.0.1:{p}/huge-close.png", ["over 100000 bytes", "--image-max-bytes"],
        "a body without Content-Length past --image-max-bytes")
refused(ub, f"http://127.0.0.1:{p}/redirect-out.png", ["redirected", "localhost", "allow list"],
        "a redirect to a host off the list")
refused(ub, f"http://127.0.0.1:{p}/missing.png", ["HTTP 404"], "a 404")
refused(ub, f"http://127.0.0.1:{p}/text.png", ["not a PNG, JPEG, WebP or GIF"], "a text body sent as image/png")
refused(ub, f"http://localhost:{p}/never-host.png", ["localhost", "not on the server's image URL allow list"],
        "a host off the list")
refused(ub, f"http://127.0.0.1:{p + 1 if p + 1 != p2 else p + 2}/never-port.png", ["not on the server's image URL allow list"],
        "an allowed address on another port")
refused(ub, f"http://localhost:{p2}/never-name.png", ["loopback, private or link-local"],
        "a listed name that resolves to loopback (DNS rebinding model)")
refused(ub, f"http://127.0.0.1:{p}@evil.example/never-user.png", ["user name"], "a user name before the host")
refused(ub, f"http://evil.example#@127.0.0.1:{p}/never-frag.png", ["evil.example", "allow list"],
        "'#@' before an allowed host")
refused(ub, "file:///etc/passwd", ["scheme 'file:'"], "file://")
refused(ub, f"gopher://127.0.0.1:{p}/never-gopher", ["scheme 'gopher:'"], "gopher://")
for path in ["/never-redirect.png", "/never-host.png", "/never-port.png", "/never-name.png", "/never-user.png",
             "/never-frag.png", "/never-gopher"]:
    report(not seen(path), f"the server never got {path}")
report(seen("/redirect-out.png") and seen("/slow.png"), "the server got the allowed requests")
# the PNG itself: fetched (a text/plain Content-Type: the bytes decide) and decoded
refused(ub, f"http://127.0.0.1:{p}/img.png", ["does not accept images"], "the PNG, fetched, for a text model",
        named=False)
c, j = post(ub, "/v1/chat/completions", {"model": "tiny", "max_tokens": 2,
                                         "messages": [{"role": "user", "content": "Once upon a time"}]})
report(c == 200, "B: a text request is still answered", f"{c} {json.dumps(j)[:200]}")
m = prom.metrics(ub)
r = lambda res: prom.metric(m, "pagoda_image_url_fetches_total", result=res)
counts = {k: r(k) for k in ["ok", "refused", "timeout", "too_large", "http_status", "connect"]}
report(counts["timeout"] == 3 and counts["too_large"] == 6 and counts["http_status"] == 3 and counts["ok"] == 6
       and counts["refused"] >= 12 and prom.metric(m, "pagoda_image_url_bytes_total") > 0,
       "B: /metrics counts fetches by result and bytes", json.dumps(counts))
sys.exit(1 if n_fail else 0)
PY
[[ $? -eq 0 ]] || N_FAIL=$((N_FAIL + 1))
check "gateway B still running" kill -0 "$GWB_PID"

# --- gateway A: the vision pair; 2 HTTP threads, a 60 s timeout
hpa=$(free_port); zpa=$(free_port)
spawn "$TMP/gwa.log" "$GW" --listen 127.0.0.1:$hpa --worker-endpoint tcp://127.0.0.1:$zpa \
  --model "vis=$TMP/vt.gguf" --mmproj "vis=$TMP/vp.gguf" --max-seqs 4 --log-level debug --http-threads 2 \
  --image-url-allow 127.0.0.1:$P --image-url-timeout-ms 60000
python3 - "http://127.0.0.1:$hpa" $P "$TMP/img" "$TMP/srv.log" <<'PY'
import base64, json, sys, threading, time, urllib.request, urllib.error
url, p, d, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
n_fail = 0
N = 12
PROMPT = "What is in this picture?"
def report(ok, what, extra=""):
    global n_fail
    print(("ok - " if ok else "not ok - ") + what + (("  # " + extra) if extra and not ok else ""))
    n_fail += not ok
def post(path, body, timeout=120):
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
def up():
    t = time.time() + 60
    while time.time() < t:
        try:
            h = json.load(urllib.request.urlopen(url + "/health", timeout=5))
            if h["models"]["vis"]["replicas"] == 1:
                return True
        except (OSError, KeyError):
            pass
        time.sleep(0.2)
    return False
def chat(u):
    c, j = post("/v1/chat/completions", {"model": "vis", "max_tokens": N, "temperature": 0, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}}, {"type": "text", "text": PROMPT}]}]})
    return c, j, (j["choices"][0]["message"]["content"].strip() if c == 200 else None)
def anth(src):
    c, j = post("/v1/messages", {"model": "vis", "max_tokens": N, "temperature": 0, "messages": [
        {"role": "user", "content": [{"type": "image", "source": src}, {"type": "text", "text": PROMPT}]}]})
    return c, j, ("".join(b.get("text", "") for b in j["content"]).strip() if c == 200 else None)
def resp(u):
    c, j = post("/v1/responses", {"model": "vis", "max_output_tokens": N, "temperature": 0, "input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": u}, {"type": "input_text", "text": PROMPT}]}]})
    return c, j, ("".join(q.get("text", "") for o in j.get("output", []) if o.get("type") == "message"
                          for q in o.get("content", [])).strip() if c == 200 else None)
def count(path):
    return sum(1 for l in open(log).read().splitlines() if l.split()[1].split("?")[0] == path)

report(up(), "gateway A (vision pair, allow list) up")
b64 = base64.b64encode(open(f"{d}/gradient.png", "rb").read()).decode()
data = "data:image/png;base64," + b64
img = f"http://127.0.0.1:{p}/img.png"
c, j, want = chat(data)
report(c == 200 and want, "chat: the PNG as a data: URL answered", f"{c} {json.dumps(j)[:300]}")
c, j, got = chat(img)
report(c == 200 and got == want, "chat: the PNG by URL gives the data: URL's text", f"{c} {got!r} vs {want!r} {json.dumps(j)[:300]}")
c, j, got = anth({"type": "url", "url": img})
c2, j2, want2 = anth({"type": "base64", "media_type": "image/png", "data": b64})
report(c == 200 and c2 == 200 and got == want2, "anthropic: a url source gives the base64 source's text",
       f"{c} {got!r} vs {c2} {want2!r} {json.dumps(j)[:300]}")
c, j, got = resp(img)
c2, j2, want2 = resp(data)
report(c == 200 and c2 == 200 and got == want2, "responses: input_image by URL gives the data: URL's text",
       f"{c} {got!r} vs {c2} {want2!r} {json.dumps(j)[:300]}")
c, j, got = chat(f"http://127.0.0.1:{p}/redirect-in.png")
report(c == 200 and got == want, "chat: a redirect to an allowed host is followed", f"{c} {got!r} vs {want!r}")
# a repeated URL image: the prefix cache covers it (as images.sh: the image
# run ends before position 26; 40 cached tokens cover it)
c, j, got = chat(img)
u = j.get("usage", {}) if c == 200 else {}
cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
report(c == 200 and cached >= 40, "chat: a repeated URL image is a prefix-cache hit", f"cached {cached}: {json.dumps(u)}")

# the fetches do not hold the HTTP threads: three held fetches (2 HTTP threads),
# then a text-only request is answered while they are still held
held = {}
def hold(i):
    held[i] = chat(f"http://127.0.0.1:{p}/hold.png?{i}")
ts = [threading.Thread(target=hold, args=(i,)) for i in range(3)]
for t in ts:
    t.start()
t_end = time.time() + 60
while count("/hold.png") < 3 and time.time() < t_end:
    time.sleep(0.05)
report(count("/hold.png") == 3, "three fetches held by the server")
c, j = post("/v1/chat/completions", {"model": "vis", "max_tokens": 2,
                                     "messages": [{"role": "user", "content": "Once upon a time"}]}, timeout=50)
report(c == 200 and not held, "a text-only request is answered while three fetches are held",
       f"{c} held finished: {len(held)}")
urllib.request.urlopen(f"http://127.0.0.1:{p}/release", timeout=10).read()
for t in ts:
    t.join(120)
report(len(held) == 3 and all(h[0] == 200 and h[2] == want for h in held.values()),
       "the held fetches complete once released, with the image's text",
       json.dumps({k: [v[0], v[2]] for k, v in held.items()})[:300])
sys.exit(1 if n_fail else 0)
PY
[[ $? -eq 0 ]] || N_FAIL=$((N_FAIL + 1))
finish
