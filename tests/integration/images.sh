#!/usr/bin/env bash
# Image parts on the three surfaces, against a real gateway and its local
# worker (a text model: no REGISTER vis):
#   * Chat Completions image_url (string and {url, detail}), Anthropic image
#     blocks (base64), Responses input_image: a valid PNG, JPEG, WebP, a 16-bit
#     PNG and a two-frame GIF pass decoding and get the 400 "does not accept
#     images" naming the part, in each surface's own error shape;
#   * hostile images give a 400 that names the problem: truncated, wrong
#     magic, bad base64, zip-bomb dimensions (PNG, JPEG, GIF headers), CMYK
#     JPEG, an Anthropic media_type that disagrees with the bytes, a remote
#     http(s) URL, more than 8 images, Responses file_id; a body over the
#     HTTP limit gets 413;
#   * each answer comes within 2 s (a generous bound for a refusal, not a
#     speed target), and text-only requests still work afterwards.
# The images are written by the libraries' own encoders
# (build/tests/common/image/test_image --write-hostile).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
GEN=$BUILD/tests/common/image/test_image
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
[[ -x $GEN ]] || { fail "test_image not built in $BUILD"; finish; }
SMALL=$(small_model)
mkdir -p "$TMP/img"
check "test images written by the libraries' encoders" "$GEN" --write-hostile "$TMP/img"

hp=$(free_port); zp=$(free_port)
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$hp --worker-endpoint tcp://127.0.0.1:$zp \
  --model "tiny=$SMALL" --max-seqs 2 --log-level debug --max-body 4194304
GW_PID=$SPAWNED
URL=http://127.0.0.1:$hp
ready() { curl -sf "$URL/health" | python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['models']['tiny']['replicas']==1 else 1)"; }
check "gateway up, local worker registered" wait_for 60 ready

python3 - "$URL" "$TMP/img" <<'PY'
import base64, json, sys, time, urllib.request, urllib.error
url, d = sys.argv[1], sys.argv[2]
n_fail = 0

def b64(name, cut=None):
    data = open(f"{d}/{name}", "rb").read()
    if cut is not None:
        data = data[:cut]
    return base64.b64encode(data).decode()

def post(path, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json",
                                 "anthropic-version": "2023-06-01"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            code, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, text = e.code, e.read()
    dt = time.monotonic() - t0
    try:
        j = json.loads(text)
    except Exception:
        j = None
    return code, j, dt

def report(ok, what, extra=""):
    global n_fail
    print(("ok - " if ok else "not ok - ") + what + (("  # " + extra) if extra and not ok else ""))
    if not ok:
        n_fail += 1

def chat(parts):
    return {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": parts}]}

def anth(blocks):
    return {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": blocks}]}

def resp(parts):
    return {"model": "tiny", "max_output_tokens": 4, "input": [{"role": "user", "content": parts}]}

def expect(surface, what, code, j, dt, status, words, param=None):
    """status and the surface's error shape; the message contains each of words."""
    if surface == "anthropic":
        shaped = isinstance(j, dict) and j.get("type") == "error" and isinstance(j.get("error"), dict) \
            and set(j["error"]) >= {"type", "message"}
        msg = j["error"]["message"] if shaped else ""
    else:
        shaped = isinstance(j, dict) and isinstance(j.get("error"), dict) and \
            set(j["error"]) == {"message", "type", "param", "code"}
        msg = j["error"]["message"] if shaped else ""
        if shaped and param is not None and j["error"]["param"] != param:
            shaped = False
    good = code == status and shaped and all(w.lower() in msg.lower() for w in words) and dt < 2.0
    report(good, f"{surface}: {what} → {status}", f"got {code} in {dt:.2f}s: {json.dumps(j)[:300]}")

P = "messages[0].content[1].image_url"
def data_url(name, mt="image/png", cut=None):
    return f"data:{mt};base64,{b64(name, cut)}"

# --- valid images: decoded, then refused because the model has no vision encoder
for name, mt in [("ok.png", "image/png"), ("ok.jpg", "image/jpeg"), ("ok.webp", "image/webp"),
                 ("rgb16.png", "image/png"), ("animated.gif", "image/gif")]:
    u = data_url(name, mt)
    c, j, dt = post("/v1/chat/completions", chat([{"type": "text", "text": "What is this?"},
                                                  {"type": "image_url", "image_url": {"url": u, "detail": "low"}}]))
    expect("chat", f"{name} for a text model", c, j, dt, 400, ["does not accept images"], P + ".url")
    c, j, dt = post("/v1/chat/completions", chat([{"type": "text", "text": "What is this?"},
                                                  {"type": "image_url", "image_url": u}]))
    expect("chat", f"{name} (image_url as a string) for a text model", c, j, dt, 400, ["does not accept images"], P)
    c, j, dt = post("/v1/messages", anth([{"type": "text", "text": "What is this?"},
                                          {"type": "image", "source": {"type": "base64", "media_type": mt,
                                                                       "data": b64(name)}}]))
    expect("anthropic", f"{name} for a text model", c, j, dt, 400, ["does not accept images"])
    c, j, dt = post("/v1/responses", resp([{"type": "input_text", "text": "What is this?"},
                                           {"type": "input_image", "image_url": u}]))
    expect("responses", f"{name} for a text model", c, j, dt, 400, ["does not accept images"])

# --- hostile images
hostile = [
    ("truncated PNG", data_url("ok.png", cut=60), ["bad PNG"]),
    ("truncated JPEG", data_url("ok.jpg", "image/jpeg", cut=300), ["bad JPEG"]),
    ("wrong magic", "data:image/png;base64," + base64.b64encode(b"GIF? no, just some text").decode(), ["not a PNG"]),
    ("bad base64", "data:image/png;base64,iVBORw0KG*go!!", ["base64"]),
    ("zip-bomb PNG header", data_url("bomb.png"), ["60000x60000", "limit"]),
    ("zip-bomb JPEG header", data_url("bomb.jpg", "image/jpeg"), ["60000x60000", "limit"]),
    ("zip-bomb GIF screen", data_url("bomb.gif", "image/gif"), ["65535x65535", "limit"]),
    ("CMYK JPEG", data_url("cmyk.jpg", "image/jpeg"), ["CMYK"]),
    ("remote https URL", "https://example.com/cat.png", ["remote image URLs are not fetched"]),
    ("remote http URL", "http://169.254.169.254/latest/meta-data", ["remote image URLs are not fetched"]),
    ("not base64 data URL", "data:image/png,rawbytes", ["base64"]),
]
for what, u, words in hostile:
    c, j, dt = post("/v1/chat/completions", chat([{"type": "text", "text": "x"},
                                                  {"type": "image_url", "image_url": {"url": u}}]))
    expect("chat", what, c, j, dt, 400, words, P + ".url")
    c, j, dt = post("/v1/responses", resp([{"type": "input_text", "text": "x"},
                                           {"type": "input_image", "image_url": u}]))
    expect("responses", what, c, j, dt, 400, words)

for what, src, words in [
    ("truncated JPEG", {"type": "base64", "media_type": "image/jpeg", "data": b64("ok.jpg", 300)}, ["bad JPEG"]),
    ("media_type disagrees with the bytes", {"type": "base64", "media_type": "image/jpeg", "data": b64("ok.png")},
     ["image/jpeg", "png"]),
    ("unsupported media_type", {"type": "base64", "media_type": "image/tiff", "data": b64("ok.png")}, ["media_type"]),
    ("bad base64", {"type": "base64", "media_type": "image/png", "data": "iVBORw0KG*go"}, ["base64"]),
    ("zip-bomb PNG header", {"type": "base64", "media_type": "image/png", "data": b64("bomb.png")}, ["limit"]),
    ("CMYK JPEG", {"type": "base64", "media_type": "image/jpeg", "data": b64("cmyk.jpg")}, ["CMYK"]),
    ("remote URL source", {"type": "url", "url": "https://example.com/cat.png"}, ["remote"]),
]:
    c, j, dt = post("/v1/messages", anth([{"type": "text", "text": "x"}, {"type": "image", "source": src}]))
    expect("anthropic", what, c, j, dt, 400, words)

many = [{"type": "text", "text": "x"}] + [{"type": "image_url", "image_url": data_url("ok.png")}] * 9
c, j, dt = post("/v1/chat/completions", chat(many))
expect("chat", "9 images (limit 8)", c, j, dt, 400, ["more than 8 images"], "messages[0].content[9].image_url")
c, j, dt = post("/v1/responses", resp([{"type": "input_image", "file_id": "file-abc"}]))
expect("responses", "input_image with file_id", c, j, dt, 400, ["file_id", "not supported"])
c, j, dt = post("/v1/chat/completions", {"model": "tiny", "messages": [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": [{"type": "image_url", "image_url": data_url("ok.png")}]}]})
expect("chat", "an image in an assistant message", c, j, dt, 400, ["user messages only"])

# huge base64: over the gateway's body limit (4 MiB here) → 413 before parsing
big = b'{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url","image_url":"data:image/png;base64,' + \
    b"A" * (5 << 20) + b'"}]}]}'
# (curl: it sends Expect: 100-continue, so the early 413 is read, not a broken pipe)
import subprocess
open(f"{d}/big.json", "wb").write(big)
t0 = time.monotonic()
c = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", url + "/v1/chat/completions",
                    "-H", "Content-Type: application/json", "--data-binary", f"@{d}/big.json"],
                   capture_output=True, text=True).stdout
dt = time.monotonic() - t0
report(c == "413" and dt < 5.0, "chat: 5 MiB of base64 over the body limit → 413", f"got {c} in {dt:.2f}s")

# text still works
c, j, dt = post("/v1/chat/completions", chat([{"type": "text", "text": "Once upon a time"}]))
report(c == 200 and j["choices"][0]["message"]["content"] is not None, "chat: text-only request still answered",
       f"got {c}: {json.dumps(j)[:200]}")
sys.exit(1 if n_fail else 0)
PY
[[ $? -eq 0 ]] || N_FAIL=$((N_FAIL + 1))
check "gateway still running" kill -0 "$GW_PID"
finish
