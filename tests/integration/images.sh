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
# Then end to end with a vision model (a generated gemma3 pair served with
# --mmproj): the three surfaces give pagoda-run --image's greedy text, two
# images two texts, and a repeated image is a prefix-cache hit; then the same
# through the openai, Anthropic, AI SDK and LangChain JS clients
# (images_sdk.mjs, skipped without node or tests/js's packages). Last, an
# idefics3 (SmolVLM) pair, whose pictures the gateway cuts into tiles: the
# three surfaces against pagoda-run for three pictures, the cache, a 400.
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

# --- end to end (issue #40): a gemma3 text model + mmproj pair (random weights, 112 px,
# dim 64) served with --mmproj; the same PNG through the three surfaces gives
# pagoda-run --mmproj --image's greedy text on the same pixels (a PPM of the
# same RGB; the server joins a message's parts with "\n", so pagoda-run's
# prompt is "\n" + the text); different images give different text; a
# repeated request reports cached tokens past the image.
MK=$BUILD/pagoda-mkmodel
RUN=$BUILD/pagoda-run
HERE=$(cd "$(dirname "$0")" && pwd)
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
    open(f"{d}/{name}.ppm", "wb").write(b"P6\n112 112\n255\n" + bytes(px))
PY
[[ $? -eq 0 ]] || fail "PNG and PPM of the same pixels written"
PROMPT="What is in this picture?"
N=12
for img in gradient checker; do
  "$RUN" -m "$TMP/vt.gguf" --mmproj "$TMP/vp.gguf" --image "$TMP/img/$img.ppm" -p $'\n'"$PROMPT" -n $N --temp 0 \
    --threads 2 >"$TMP/run-$img.txt" 2>"$TMP/run-$img.err" || fail "pagoda-run on $img: $(tail -3 "$TMP/run-$img.err")"
done
hp2=$(free_port); zp2=$(free_port)
spawn "$TMP/gw2.log" "$GW" --listen 127.0.0.1:$hp2 --worker-endpoint tcp://127.0.0.1:$zp2 \
  --model "vis=$TMP/vt.gguf" --mmproj "vis=$TMP/vp.gguf" --max-seqs 2 --log-level debug
URL2=http://127.0.0.1:$hp2
ready2() { curl -sf "$URL2/health" | python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['models']['vis']['replicas']==1 else 1)"; }
check "gateway with --mmproj up, its worker registered" wait_for 60 ready2
python3 - "$URL2" "$TMP" "$PROMPT" $N "$HERE/../support" <<'PY'
import base64, json, sys
url, d, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, sys.argv[5])
from image_surfaces import Surfaces
S = Surfaces(url, "vis", n)
n_fail = 0
def report(ok, what, extra=""):
    global n_fail
    print(("ok - " if ok else "not ok - ") + what + (("  # " + extra) if extra and not ok else ""))
    n_fail += not ok
def b64(img):
    return base64.b64encode(open(f"{d}/img/{img}.png", "rb").read()).decode()
chat = lambda img: S.chat(b64(img), prompt)
anth = lambda img: S.anth(b64(img), prompt)
texts = {}
for img in ["gradient", "checker"]:
    want = open(f"{d}/run-{img}.txt", "rb").read().decode("utf-8", "replace").strip()
    for surface, (c, got, j) in S.texts(b64(img), prompt).items():
        report(c == 200 and got == want, f"{surface} {img}: pagoda-run's text", f"{c} {got!r} vs {want!r} {json.dumps(j)[:300]}")
        texts.setdefault(img, got)
report(texts["gradient"] != texts["checker"], "different images give different text", json.dumps(texts))
# repeated: the prefix cache covers the image
c, j = chat("gradient")
u = j.get("usage", {}) if c == 200 else {}
cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
pt = u.get("prompt_tokens", 0)
# the image is the message's first part: its run (begin, 16 rows, end) follows
# the turn header (BOS, <start_of_turn>, "user" in at most 4 tokens, "\n"), so
# it ends before position 26; 40 cached tokens cover it
report(c == 200 and cached >= 40, "chat: a repeated image is a prefix-cache hit covering it",
       f"cached {cached} of {pt}")
c, j = anth("gradient")
u = j.get("usage", {}) if c == 200 else {}
cr = u.get("cache_read_input_tokens", 0)
report(c == 200 and cr >= 40, "anthropic: cache_read_input_tokens covers the image", json.dumps(u))
sys.exit(1 if n_fail else 0)
PY
[[ $? -eq 0 ]] || N_FAIL=$((N_FAIL + 1))

# the same pictures through the real clients (images_sdk.mjs): the openai,
# Anthropic, AI SDK and LangChain JS libraries, streamed and not, cached
# tokens in their usage, their typed 400 for a truncated PNG
if command -v node >/dev/null && bash "$ROOT/tests/js/ensure.sh" >/dev/null 2>&1; then
  URL=$URL2 MODEL=vis DIR=$TMP PROMPT="$PROMPT" N=$N run_node_tap 300 "$ROOT/tests/integration/images_sdk.mjs"
else
  skip "node/npm or the npm packages unavailable: no SDK image checks (images_sdk.mjs)"
fi

# --- routing by cache with images: two replicas of the vision model
# (--replicas 2, routing.mode cache-aware). The gateway keys a request with
# images as the worker does (the images' hashes and positions in the key), so
# a repeated image request is routed "cache" to the replica that served it
# (its prefix-cache hits rise, the other's do not), and the same text with
# another image matches no replica's blocks (routed "load").
hp3=$(free_port); zp3=$(free_port)
spawn "$TMP/gw3.log" "$GW" --listen 127.0.0.1:$hp3 --worker-endpoint tcp://127.0.0.1:$zp3 --heartbeat-ms 200 \
  --worker-arg=--heartbeat-ms=200 --threads 1 --max-seqs 2 --model "vis=$TMP/vt.gguf" --mmproj "vis=$TMP/vp.gguf" \
  --replicas 2 --routing cache-aware --log-level debug
python3 - "http://127.0.0.1:$hp3" "$TMP" "$HERE/../support" <<'PY'
import base64, json, sys, urllib.request
url, d = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from prom import metric, wait
import prom
metrics = lambda: prom.metrics(url)
n_fail = 0
def report(ok, what, extra=""):
    global n_fail
    print(("ok - " if ok else "not ok - ") + what + (("  # " + extra) if extra and not ok else ""))
    n_fail += not ok
TEXT = "What is in this picture? Tell me about its colours, its shapes and its corners, one by one."
def chat(img):
    data = base64.b64encode(open(f"{d}/img/{img}.png", "rb").read()).decode()
    body = {"model": "vis", "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}}, {"type": "text", "text": TEXT}]}]}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["usage"]
def workers():
    try:
        return [w["id"] for w in json.load(urllib.request.urlopen(url + "/health", timeout=10))["workers"]]
    except OSError:
        return []
report(wait(lambda: len(workers()) == 2, 90), "gateway with 2 vision replicas up")
ids = workers()
u = chat("gradient")
report(u["prompt_tokens"] > 2 * 32, f"an image request of {u['prompt_tokens']} tokens (over 2 blocks)")
report(wait(lambda: max(metric(metrics(), "pagoda_prefix_index_replica_entries", replica=r) for r in ids) >= 2),
       "its blocks reach the gateway's index")
m0 = metrics()
R = max(ids, key=lambda r: metric(m0, "pagoda_prefix_index_replica_entries", replica=r))
O = [r for r in ids if r != R][0]
hits = lambda m, r: metric(m, "pagoda_replica_prefix_cache_hits_total", replica=r)
u = chat("gradient")
c = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
m1 = metrics()
report(metric(m1, "pagoda_routed_total", by="cache") - metric(m0, "pagoda_routed_total", by="cache") == 1,
       "the repeated image request was routed by cache")
report(c >= 2 * 32 and wait(lambda: hits(metrics(), R) >= hits(m0, R) + c) and hits(metrics(), O) == hits(m0, O),
       f"to the replica that holds it ({R}): its {c} cached tokens are that replica's hits")
u = chat("checker")
m2 = metrics()
report(metric(m2, "pagoda_routed_total", by="load") - metric(m1, "pagoda_routed_total", by="load") == 1,
       "the same text with another image matches no replica's blocks (routed by load)")
sys.exit(1 if n_fail else 0)
PY
[[ $? -eq 0 ]] || N_FAIL=$((N_FAIL + 1))

# --- the operator's image limits (--image-max-bytes, --image-max-pixels,
# --max-images): ok.png, which the default limits decode (the first gateway
# above answers "does not accept images" for it), is refused by a lowered
# limit with a 400 naming that limit, on the text model.
hp4=$(free_port); zp4=$(free_port); hp5=$(free_port); zp5=$(free_port)
spawn "$TMP/gw4.log" "$GW" --listen 127.0.0.1:$hp4 --worker-endpoint tcp://127.0.0.1:$zp4 \
  --model "tiny=$SMALL" --max-seqs 2 --image-max-bytes 100 --max-images 1
spawn "$TMP/gw5.log" "$GW" --listen 127.0.0.1:$hp5 --worker-endpoint tcp://127.0.0.1:$zp5 \
  --model "tiny=$SMALL" --max-seqs 2 --image-max-pixels 100
python3 - "http://127.0.0.1:$hp4" "http://127.0.0.1:$hp5" "$TMP/img" <<'PY'
import base64, json, sys, time, urllib.request, urllib.error
u4, u5, d = sys.argv[1], sys.argv[2], sys.argv[3]
n_fail = 0
def report(ok, what, extra=""):
    global n_fail
    print(("ok - " if ok else "not ok - ") + what + (("  # " + extra) if extra and not ok else ""))
    n_fail += not ok
def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except OSError:
        return 0, None
def up(url):
    t = time.time() + 60
    while time.time() < t:
        try:
            urllib.request.urlopen(url + "/health", timeout=5)
            return True
        except OSError:
            time.sleep(0.2)
    return False
png = "data:image/png;base64," + base64.b64encode(open(f"{d}/ok.png", "rb").read()).decode()
img = {"type": "image_url", "image_url": {"url": png}}
def chat(parts):
    return {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": parts}]}
def refused(url, parts, words, param, what):
    c, j = post(url, chat(parts))
    e = (j or {}).get("error") or {}
    msg = e.get("message", "")
    report(c == 400 and e.get("param") == param and all(w in msg for w in words), what, f"{c} {json.dumps(j)[:300]}")
report(up(u4) and up(u5), "gateways with lowered image limits up")
refused(u4, [img, {"type": "text", "text": "hi"}], ["limit is 100", "images.max_bytes", "--image-max-bytes"],
        "messages[0].content[0].image_url.url", "--image-max-bytes 100: ok.png refused, the limit named")
refused(u4, [img, img], ["More than 1 images", "--max-images"], "messages[0].content[1].image_url.url",
        "--max-images 1: two images refused, the limit named")
refused(u5, [img], ["the limit is 100 pixels", "images.max_pixels", "--image-max-pixels"],
        "messages[0].content[0].image_url.url", "--image-max-pixels 100: ok.png refused, the limit named")
sys.exit(1 if n_fail else 0)
PY
[[ $? -eq 0 ]] || N_FAIL=$((N_FAIL + 1))

# --- an idefics3 (SmolVLM) pair served end to end: 56 px tiles, pixel
# shuffle 2x2 (16 rows per encoder image), preproc_image_size 112, so each
# 112 px picture is cut by the gateway into 2 x 2 tiles + the global image
# (5 encoder images on the wire, docs/VISION.md "Idefics3"). The three
# surfaces give pagoda-run --mmproj --image's greedy text (pagoda-run tiles
# the same way, with the same common/image function) for three pictures whose
# texts differ; a repeated picture is a prefix-cache hit covering its whole
# run (93 tokens after the turn header: ≥ 128 cached tokens); a picture over the operator's pixel
# limit (--image-max-pixels 20000; a 150 x 150 PNG) is a 400 in each API's
# shape, and a text request after it is answered.
check "idefics3 pair written" "$MK" -o "$TMP/it.gguf" --arch llama --dim 64 --layers 2 --heads 4 --kv-heads 2 \
  --ffn 128 --ctx 512 --vocab 512 --type f32 --seed 40 --untied --mute-special --logit-scale 8 \
  --chat-template "$HERE/../compare/chatml_turns.jinja" --projector idefics3 --mmproj "$TMP/ip.gguf" \
  --vis-size 56 --vis-patch 7 --vis-dim 64 --vis-layers 2 --vis-heads 4 --vis-ffn 128 --vis-merge 2 \
  --vis-preproc 112
for img in gradient checker noise; do
  "$RUN" -m "$TMP/it.gguf" --mmproj "$TMP/ip.gguf" --image "$TMP/img/$img.ppm" -p $'\n'"$PROMPT" -n $N --temp 0 \
    --threads 2 >"$TMP/irun-$img.txt" 2>"$TMP/irun-$img.err" || fail "pagoda-run idefics3 on $img: $(tail -3 "$TMP/irun-$img.err")"
done
hp6=$(free_port); zp6=$(free_port)
spawn "$TMP/gw6.log" "$GW" --listen 127.0.0.1:$hp6 --worker-endpoint tcp://127.0.0.1:$zp6 \
  --model "idf=$TMP/it.gguf" --mmproj "idf=$TMP/ip.gguf" --max-seqs 2 --image-max-pixels 20000
URL6=http://127.0.0.1:$hp6
ready6() { curl -sf "$URL6/health" | python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['models']['idf']['replicas']==1 else 1)"; }
check "gateway with an idefics3 --mmproj up, its worker registered" wait_for 60 ready6
python3 - "$URL6" "$TMP" "$PROMPT" $N "$HERE/../support" "$HERE/../compare" <<'PY'
import base64, json, sys
url, d, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path[:0] = sys.argv[5:7]
from image_surfaces import Surfaces
from vision_images import images
from vision_png import ppm_to_png
S = Surfaces(url, "idf", n)
post = S.post
n_fail = 0
def report(ok, what, extra=""):
    global n_fail
    print(("ok - " if ok else "not ok - ") + what + (("  # " + extra) if extra and not ok else ""))
    n_fail += not ok
# a 150 x 150 picture (22,500 pixels, over --image-max-pixels 20000)
open(f"{d}/big.ppm", "wb").write(b"P6\n150 150\n255\n" + bytes(images(150)["gradient"]))
ppm_to_png(f"{d}/big.ppm", f"{d}/img/big.png")
def b64(img):
    return base64.b64encode(open(f"{d}/img/{img}.png", "rb").read()).decode()
chat = lambda img, text=prompt: S.chat(b64(img), text)
anth = lambda img: S.anth(b64(img), prompt)
resp = lambda img: S.resp(b64(img), prompt)
texts = {}
for img in ["gradient", "checker", "noise"]:
    want = open(f"{d}/irun-{img}.txt", "rb").read().decode("utf-8", "replace").strip()
    for surface, (c, got, j) in S.texts(b64(img), prompt).items():
        report(c == 200 and got == want, f"idefics3 {surface} {img}: pagoda-run's text",
               f"{c} {got!r} vs {want!r} {json.dumps(j)[:300]}")
        texts.setdefault(img, got)
report(len(set(texts.values())) == 3, "idefics3: three pictures give three texts", json.dumps(texts))
# repeated, with a longer text so the prompt's full blocks reach past the
# picture's run (turn header ≤ 17 tokens + 93 < 128): the cache covers it
LONG = "What is in this picture? Tell me about its colours, its shapes and its corners, one by one, slowly."
c, j = chat("gradient", LONG)
c, j = chat("gradient", LONG)
u = j.get("usage", {}) if c == 200 else {}
cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
report(c == 200 and cached >= 128, "idefics3: a repeated picture is a prefix-cache hit covering its tiles",
       f"cached {cached} of {u.get('prompt_tokens')}")
# over the operator's pixel limit: a 400 in each API's shape
c, j = chat("big")
e = (j or {}).get("error") or {}
report(c == 400 and e.get("param") == "messages[0].content[0].image_url.url" and "--image-max-pixels" in
       e.get("message", ""), "idefics3 chat: a picture over --image-max-pixels is a 400", f"{c} {json.dumps(j)[:300]}")
c, j = anth("big")
report(c == 400 and (j or {}).get("type") == "error" and "--image-max-pixels" in
       ((j or {}).get("error") or {}).get("message", ""), "idefics3 anthropic: over the pixel limit is a 400",
       f"{c} {json.dumps(j)[:300]}")
c, j = resp("big")
e = (j or {}).get("error") or {}
report(c == 400 and e.get("param", "").startswith("input[0].content[0]") and "--image-max-pixels" in
       e.get("message", ""), "idefics3 responses: over the pixel limit is a 400", f"{c} {json.dumps(j)[:300]}")
c, j = post("/v1/chat/completions", {"model": "idf", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
report(c == 200, "idefics3 model: a text request after them is answered", f"{c} {json.dumps(j)[:300]}")
sys.exit(1 if n_fail else 0)
PY
[[ $? -eq 0 ]] || N_FAIL=$((N_FAIL + 1))
# the idefics3 pair through the real clients too; the picture's run (93
# tokens) follows the turn header (at most 17 tokens: "<|im_start|>user\n"
# one byte a token), so it ends before position 110 and 128 cached tokens
# (4 blocks; the prompt is about 166) cover it
if command -v node >/dev/null && bash "$ROOT/tests/js/ensure.sh" >/dev/null 2>&1; then
  URL=$URL6 MODEL=idf DIR=$TMP RUN=irun CACHED_MIN=128 PROMPT="$PROMPT" N=$N \
    run_node_tap 300 "$ROOT/tests/integration/images_sdk.mjs"
else
  skip "node/npm or the npm packages unavailable: no SDK image checks for idefics3 (images_sdk.mjs)"
fi
finish
