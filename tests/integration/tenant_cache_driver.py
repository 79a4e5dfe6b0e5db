"""Tenants and the prefix cache, as an attacker would probe it (driven by
tenant_cache.sh; the checks are listed there and in docs/SECURITY.md).

argv: URL KEYS_FILE. Prints ok / not ok lines; exit status 1 when any failed.
Every number a check compares is printed in its line.
"""
import json
import re
import sys
import time
import urllib.error
import urllib.request
import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tap import check  # noqa: E402
import tap  # noqa: E402

URL, KEYS_FILE = sys.argv[1], sys.argv[2]
KEY = {n: "tenant-secret-" + n for n in ("alice", "bob", "ops", "carol", "dave")}
BLOCK = 32
T_LAST = 0.0  # when the last request was answered (monotonic)


def http(method, path, key=None, body=None):
    """(status, parsed JSON or text)"""
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data, h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw, code = r.read().decode(), r.status
    except urllib.error.HTTPError as e:
        raw, code = e.read().decode(), e.code
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, raw


# ---- the three surfaces: (path, body, usage → (prompt tokens, cached tokens)) ----

def chat_body(text, salt):
    b = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0}
    if salt is not None:
        b["cache_salt"] = salt
    return b


def messages_body(text, salt):
    b = {"model": "m", "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": text}]}
    if salt is not None:
        b["cache_salt"] = salt
    return b


def responses_body(text, salt):
    b = {"model": "m", "input": text, "max_output_tokens": 1, "temperature": 0, "store": False}
    if salt is not None:
        b["cache_salt"] = salt
    return b


SURFACES = {
    "chat": ("/v1/chat/completions", chat_body,
             lambda u: (u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"])),
    "messages": ("/v1/messages", messages_body,
                 lambda u: (u["input_tokens"] + u["cache_read_input_tokens"], u["cache_read_input_tokens"])),
    "responses": ("/v1/responses", responses_body,
                  lambda u: (u["input_tokens"], u["input_tokens_details"]["cached_tokens"])),
}


def send(surface, who, text, salt=None):
    """One request; returns (prompt tokens, cached tokens, monotonic time it was answered)."""
    path, body, usage = SURFACES[surface]
    code, j = http("POST", path, KEY[who], body(text, salt))
    if code != 200:
        raise SystemExit(f"not ok - {surface} as {who}: HTTP {code}: {str(j)[:300]}")
    global T_LAST
    p, c = usage(j["usage"])
    T_LAST = time.monotonic()
    return p, c, T_LAST


# ---- the worker's counters, read as the operator ----

def metric(name):
    code, text = http("GET", "/metrics", KEY["ops"])
    assert code == 200, f"/metrics with the admin key: {code}"
    tot = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            tot += float(line.rsplit(" ", 1)[1])
    return tot


def heartbeat_after(t_done):
    """Waits for a worker heartbeat that reached the gateway after t_done (the
    gateway's own 'last_heartbeat_ms_ago', so no speed assumption: the worker
    sent the request's final EVENT before that heartbeat, on the same socket)."""
    for _ in range(300):
        t_ask = time.monotonic()
        _, h = http("GET", "/health", KEY["ops"])
        w = h["workers"][0]
        # the age is whole ms, rounded down, and the gateway reads its clock
        # after t_ask: one ms more makes the estimate of when the heartbeat
        # arrived never late (on a fast machine a heartbeat sent just before
        # the answer's EVENT, at the step's start, arrived within a ms of
        # t_done and passed, with the counters of before the request)
        if t_ask - (w["last_heartbeat_ms_ago"] + 1) / 1000.0 > t_done:
            return True
        time.sleep(0.05)
    return False


def computed():
    return metric("pagoda_prompt_tokens_computed_total")


def send_counted(surface, who, text, salt=None):
    """send, plus the prompt tokens the worker computed for it (-1 when no
    heartbeat came): the counter is read once every earlier request is in it."""
    if not heartbeat_after(T_LAST):
        return 0, 0, -1
    c0 = computed()
    p, c, t = send(surface, who, text, salt)
    hb = heartbeat_after(t)
    return p, c, int(computed() - c0) if hb else -1


# ---- prompts: a secret in the first block, then enough text for >= 6 blocks ----

FILLER = ("Lily and Ben went to the park. They saw a big red ball under a tree. "
          "Ben ran to get it, and Lily laughed. The sun was warm and the birds sang. ")


def count_tokens(text):
    code, j = http("POST", "/tokenize", KEY["alice"], {"model": "m", "messages": [{"role": "user", "content": text}]})
    assert code == 200, f"/tokenize: {code} {j}"
    return j["count"]


def prompt(secret):
    text = secret + " "
    while count_tokens(text) < 7 * BLOCK + 8:
        text += FILLER
    return text


MIN_BLOCKS = 6

# ---- 1. the attack on each surface -----------------------------------------------

for i, surface in enumerate(SURFACES):
    secret = f"Alice's PIN is {4719 + 1111 * i}."
    guess_wrong = f"Alice's PIN is {1234 + 1111 * i}."
    text = prompt(secret)
    wrong = text.replace(secret, guess_wrong, 1)
    assert wrong != text
    pa, ca, _ = send(surface, "alice", text)                  # A's secret, cached in A's partition
    check(f"{surface}: A's prompt is {pa} tokens, >= {MIN_BLOCKS} blocks of {BLOCK}", pa >= MIN_BLOCKS * BLOCK + 1)
    pa2, ca2, _ = send(surface, "alice", text)
    check(f"{surface}: A's repeat is a hit (cached {ca2} of {pa2}): a shared cache would show", ca2 >= MIN_BLOCKS * BLOCK)
    pr, cr, dr = send_counted(surface, "bob", text)           # B's right guess
    pw, cw, dw = send_counted(surface, "bob", wrong)          # B's wrong guess
    check(f"{surface}: B's cached tokens, right guess {cr} == wrong guess {cw} == 0", cr == cw == 0)
    check(f"{surface}: B's right guess was a full prefill (worker computed {dr} of its {pr} prompt tokens)", dr == pr)
    check(f"{surface}: and so was the wrong one ({dw} of {pw})", dw == pw)

# ---- 2. side doors -----------------------------------------------------------------

code, _ = http("GET", "/metrics", KEY["bob"])
check(f"/metrics with B's key → 403 ({code})", code == 403)
code, _ = http("GET", "/metrics")
check(f"/metrics without a key → 401 ({code})", code == 401)
code, h = http("GET", "/health", KEY["bob"])
load = h["workers"][0]["load"]
check(f"/health with B's key shows no cache or token counters ({sorted(load)})",
      code == 200 and not {"prefix_cache_hits", "prefix_cache_queries", "prompt_tokens", "tokens_generated"} & set(load))
code, h = http("GET", "/health", KEY["ops"])
check("/health with the admin key keeps them", "prefix_cache_hits" in h["workers"][0]["load"])

# ---- 3. sharing groups ----------------------------------------------------------------

shared = prompt("Version one. Team system prompt: you are a helpful support agent.")
pc, cc, _ = send("chat", "carol", shared)
pd, cd, dd = send_counted("chat", "dave", shared)
check(f"group team: dave gets carol's prefix (cached {cd} of {pd}, computed {dd})",
      cd >= MIN_BLOCKS * BLOCK and dd == pd - cd)
pb, cb, _ = send("chat", "bob", shared)
check(f"a key outside the group does not (bob cached {cb})", cb == 0)

keys = open(KEYS_FILE).read()
keys = re.sub(r"^(carol .*) group=team$", r"\1 group=red", keys, flags=re.M)
keys = re.sub(r"^(dave .*) group=team$", r"\1 group=blue", keys, flags=re.M)
open(KEYS_FILE, "w").write(keys)
code, _ = http("POST", "/admin/reload-keys", KEY["ops"])
check(f"keys reloaded with carol in group red, dave in blue ({code})", code == 200)
# (the two texts differ from their first word: with a tokenizer of short
# pieces a common opening could fill a whole block of dave's own)
shared2 = prompt("Second version. Team system prompt: you are a careful support agent.")
send("chat", "carol", shared2)
pd, cd, dd = send_counted("chat", "dave", shared2)
check(f"different groups: dave misses carol's prefix (cached {cd}, computed {dd} of {pd})", cd == 0 and dd == pd)
pd, cd, _ = send("chat", "dave", shared)
check(f"and dave's old group's blocks are not his any more (cached {cd})", cd == 0)

# ---- 4. cache_salt -----------------------------------------------------------------------

for surface in SURFACES:
    salted = prompt(f"Salted {surface} conversation, session 77.")
    send(surface, "alice", salted, salt="s1")
    p1, c1, _ = send(surface, "alice", salted, salt="s1")
    p2, c2, d2 = send_counted(surface, "alice", salted, salt="s2")
    check(f"{surface}: same key, same salt: a hit (cached {c1} of {p1}); other salt: none (cached {c2}, computed {d2} of {p2})",
          c1 >= MIN_BLOCKS * BLOCK and c2 == 0 and d2 == p2)
p0, c0, _ = send("chat", "alice", prompt("Salted chat conversation, session 77."))
check(f"the salted prefix is not in the key's unsalted partition (cached {c0})", c0 == 0)
pb, cb, _ = send("chat", "bob", prompt("Salted chat conversation, session 77."), salt="s1")
check(f"nor in another key's partition with the same salt (bob cached {cb})", cb == 0)
for bad, what in (("x" * 257, "257 bytes"), ("", "empty"), (7, "a number")):
    code, j = http("POST", "/v1/chat/completions", KEY["alice"], chat_body("hi", bad))
    check(f"cache_salt {what} → 400 ({code}, param {j.get('error', {}).get('param') if isinstance(j, dict) else '?'})",
          code == 400 and j["error"]["param"] == "cache_salt")
code, _ = http("POST", "/v1/chat/completions", KEY["alice"], chat_body("hi", "y" * 256))
check(f"cache_salt of 256 bytes is accepted ({code})", code == 200)

sys.exit(1 if tap.n_failed() else 0)
