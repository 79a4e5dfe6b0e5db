"""Seeded property test of /v1/chat/completions (driven by combos.sh, #22 item 4).

Every random combination of valid and invalid request features must answer
within a bound with 200 and a well-formed body, or with a 4xx OpenAI error:
never a 5xx, never a hang, never an error inside a 200 stream.

argv: URL MODEL[,MODEL...]   env: COMBO_SEED (default: random), COMBO_N (400),
COMBO_CONC (4), COMBO_TIMEOUT_S (30). The seed is printed first, so
`COMBO_SEED=<seed> bash tests/integration/combos.sh` replays a failing run
(the requests are the same; what the model writes may differ where the
machine's batching differs, the answers' shape must not).

Features drawn per request: stream, n (1..3), tools (0..3 with small JSON
Schemas) x tool_choice (absent, auto, none, required, a named tool, an unknown
name), response_format (absent, text, json_object, json_schema), grammar
(GBNF), logprobs/top_logprobs, stop, seed, temperature, max_tokens (1..120),
parallel_tool_calls, stream_options. Some draws are invalid on purpose
(tool_choice without tools, an unknown tool, top_logprobs without logprobs,
stream_options without stream, grammar with a json response_format): those
must be 400. Checked on 200:
  - non-streamed: n choices with indexes 0..n-1, a finish_reason each
    (stop/length/tool_calls), usage adding up, completion tokens within n x
    max_tokens; content null only beside tool_calls;
  - streamed: every line a chunk or [DONE], [DONE] last, no error object,
    each choice index < n finished exactly once, usage only (and then
    exactly once, last, with empty choices) with include_usage;
  - tool_calls (reassembled from deltas when streamed): id, type function, a
    name from `tools`, arguments a JSON object, or, for a call cut short by a
    stop string or max_tokens, not JSON and then finish_reason stop/length,
    never tool_calls (docs/API.md "Calls cut short"); none with tool_choice
    none; with a forced choice and no stop string, calls are present (only
    the named function when named) and validate against that tool's schema;
  - a json_object / json_schema answer without tools that ended with "stop"
    (no stop string) parses as JSON and (json_schema) validates;
  - logprobs: one entry per token, logprob <= 0, top_logprobs of the size
    asked.
Then, one request at a time, COMBO_PAIRS (40) forced tool calls drawn to be
cut short (a tool with an array argument and stop "]", or max_tokens a little
above the least the call's grammar needs), greedy: each is sent non-streamed,
streamed and non-streamed again, and the stream assembled must equal the last
non-streamed body: content (trailing white space aside), call names,
concatenated arguments, finish_reason. The first request fills the prefix
cache so the two compared ones compute the same rows (docs/FORWARD.md: a float
batch over 64 rows may change the last bits). Some must be cut by the stop
string. A forced call is never cut by max_tokens (its grammar steers it closed
within the limit, docs/API.md "Length"), and a random-weight model does not
write unforced calls, so cuts by max_tokens are checked by
tests/gateway/test_answer.c and counted here only if they occur.
"""
import http.client
import json
import os
import random
import re
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

URL = sys.argv[1]
MODELS = sys.argv[2].split(",")
SEED = int(os.environ.get("COMBO_SEED") or random.SystemRandom().randrange(1 << 31))
N = int(os.environ.get("COMBO_N", "400"))
CONC = int(os.environ.get("COMBO_CONC", "4"))
TIMEOUT_S = float(os.environ.get("COMBO_TIMEOUT_S", "30"))
PAIRS = int(os.environ.get("COMBO_PAIRS", "40"))
HOST = urllib.parse.urlparse(URL)

print("# combos: seed %d, %d requests, %d at a time, models %s (replay: COMBO_SEED=%d)"
      % (SEED, N, CONC, ",".join(MODELS), SEED), flush=True)

# ---- schemas and a validator for the subset they use -------------------------

SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                      "days": {"type": "integer", "minimum": 1, "maximum": 7}},
     "required": ["city", "days"], "additionalProperties": False},
    {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "ok": {"type": "boolean"}},
     "required": ["unit"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                                               "maxItems": 3}},
     "required": ["tags"]},
    {"type": "object", "properties": {}},
]
GRAMMARS = ['root ::= "yes" | "no"', 'root ::= [a-z]+ " " [0-9]{1,3}', 'root ::= ("ab" | "cd")+']


def validate(v, s):
    """True when v matches schema s (only the keywords SCHEMAS use)."""
    if "enum" in s:
        return v in s["enum"]
    t = s.get("type")
    if t == "object":
        if not isinstance(v, dict):
            return False
        props = s.get("properties", {})
        if any(k not in v for k in s.get("required", [])):
            return False
        if s.get("additionalProperties") is False and any(k not in props for k in v):
            return False
        return all(validate(v[k], props[k]) for k in v if k in props)
    if t == "string":
        return isinstance(v, str) and len(v) <= s.get("maxLength", 1 << 30)
    if t == "integer":
        return (type(v) is int and s.get("minimum", -(1 << 60)) <= v <= s.get("maximum", 1 << 60))
    if t == "boolean":
        return isinstance(v, bool)
    if t == "array":
        return (isinstance(v, list) and len(v) <= s.get("maxItems", 1 << 30)
                and all(validate(x, s["items"]) for x in v))
    return True


# ---- drawing a request ----------------------------------------------------------

WORDS = "once upon a time the weather in paris tomorrow call a tool please answer json".split()


def draw(rng, i):
    """(body, expect) where expect is 'ok' (200 or 4xx) or '400' (must be 400)."""
    body = {"model": rng.choice(MODELS), "max_tokens": rng.randint(1, 120)}
    msgs = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": "You are terse."})
    msgs.append({"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))})
    body["messages"] = msgs
    bad = []
    stream = rng.random() < 0.5
    if stream:
        body["stream"] = True
    if rng.random() < 0.3:
        body["n"] = rng.randint(2, 3)
    n_tools = rng.choice([0, 0, 1, 2, 3])
    tools = []
    for k in range(n_tools):
        f = {"name": "tool_%d" % k, "description": "tool number %d" % k}
        if rng.random() < 0.85:
            f["parameters"] = SCHEMAS[rng.randrange(len(SCHEMAS))]
        tools.append({"type": "function", "function": f})
    if tools:
        body["tools"] = tools
    tc = rng.choices([None, "auto", "none", "required", "named", "unknown"], [3, 2, 1, 2, 2, 0.5])[0]
    if not tools and tc in ("required", "named") and rng.random() < 0.8:
        tc = None  # mostly valid draws: the invalid ones are a minority on purpose
    if tc == "named":
        body["tool_choice"] = {"type": "function", "function": {"name": "tool_%d" % rng.randrange(max(1, n_tools))}}
        if not tools:
            bad.append("named tool_choice without tools")
    elif tc == "unknown":
        body["tool_choice"] = {"type": "function", "function": {"name": "no_such_tool"}}
        bad.append("unknown tool name")
    elif tc is not None:
        body["tool_choice"] = tc
        if tc == "required" and not tools:
            bad.append("required without tools")
    if tools and rng.random() < 0.4:
        body["parallel_tool_calls"] = rng.random() < 0.5
    rf = rng.choice([None, None, "text", "json_object", "json_schema"])
    if rf == "json_schema":
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "out", "schema": SCHEMAS[rng.randrange(len(SCHEMAS))]}}
    elif rf:
        body["response_format"] = {"type": rf}
    if rng.random() < 0.15:
        body["grammar"] = rng.choice(GRAMMARS)
        if rf in ("json_object", "json_schema"):
            bad.append("grammar with a json response_format")
        elif tools and body.get("tool_choice") in ("required",) or isinstance(body.get("tool_choice"), dict):
            bad.append("grammar with a forced tool call")
    r = rng.random()
    if r < 0.3:
        body["logprobs"] = True
        if rng.random() < 0.6:
            body["top_logprobs"] = rng.randint(0, 5)
    elif r < 0.33:
        body["top_logprobs"] = rng.randint(1, 5)
        bad.append("top_logprobs without logprobs")
    if rng.random() < 0.25:
        body["stop"] = rng.choice(["\n", "the", ["}", "x"], ["</tool_call>"]])
    if rng.random() < 0.5:
        body["seed"] = rng.randrange(1 << 31)
    if rng.random() < 0.6:
        body["temperature"] = round(rng.uniform(0, 1.5), 2)
    if rng.random() < (0.5 if stream else 0.05):
        body["stream_options"] = {"include_usage": rng.random() < 0.7}
        if not stream:
            bad.append("stream_options without stream")
    return body, bad


# ---- checking an answer ------------------------------------------------------------


def err_shape(j):
    e = j.get("error") if isinstance(j, dict) else None
    return (isinstance(e, dict) and set(e) == {"message", "type", "param", "code"}
            and isinstance(e["message"], str) and e["message"])


def forced(body):
    tc = body.get("tool_choice")
    if tc == "required":
        return "required"
    if isinstance(tc, dict):
        return tc["function"]["name"]
    return None


def tool_schema(body, name):
    for t in body.get("tools", []):
        if t["function"]["name"] == name:
            return t["function"].get("parameters")
    return None


COVER = {}  # what the checks saw (printed: a run that checks nothing shows it)
COVER_LOCK = threading.Lock()


def cover(what):
    with COVER_LOCK:
        COVER[what] = COVER.get(what, 0) + 1


def check_choice(body, c, problems, tool_calls, content, finish):
    """Checks one assembled choice; appends what is wrong to problems."""
    names = {t["function"]["name"] for t in body.get("tools", [])}
    cover("choices finished %s" % finish)
    if finish not in ("stop", "length", "tool_calls"):
        problems.append("finish_reason %r" % finish)
    if tool_calls:
        if finish not in ("tool_calls", "stop", "length"):
            problems.append("tool_calls with finish_reason %r" % finish)
        if body.get("tool_choice") == "none":
            problems.append("tool_calls with tool_choice none")
        for t in tool_calls:
            if not (isinstance(t.get("id"), str) and t["id"] and t.get("type") == "function"):
                problems.append("tool call id/type %r" % t)
                continue
            fn = t.get("function", {})
            if fn.get("name") not in names:
                problems.append("tool call of unknown function %r" % fn.get("name"))
            try:
                args = json.loads(fn.get("arguments", ""))
            except ValueError:
                # cut short by a stop string or max_tokens (docs/API.md "Calls cut short"):
                # the arguments written so far, and the real finish, never tool_calls
                if finish == "tool_calls":
                    problems.append("arguments not JSON with finish tool_calls: %r" % fn.get("arguments"))
                elif finish == "stop" and "stop" not in body:
                    problems.append("arguments not JSON, finish stop without a stop string: %r"
                                    % fn.get("arguments"))
                else:
                    cover("tool calls cut short (finish %s)" % finish)
                continue
            if not isinstance(args, dict):
                problems.append("arguments not an object: %r" % args)
            f = forced(body)
            if f and f != "required" and fn.get("name") != f:
                problems.append("named %s but called %s" % (f, fn.get("name")))
            s = tool_schema(body, fn.get("name"))
            cover("tool calls" + (" (forced, arguments validated)" if f and s is not None else ""))
            # a call cut by max_tokens may stop anywhere (finish length): only a
            # complete one must match its schema
            if f and s is not None and isinstance(args, dict) and finish != "length" and not validate(args, s):
                problems.append("forced call's arguments %r do not match %s" % (args, json.dumps(s)))
        if body.get("parallel_tool_calls") is False and forced(body) and len(tool_calls) > 1:
            problems.append("%d calls with parallel_tool_calls false" % len(tool_calls))
    else:
        if finish == "tool_calls":
            problems.append("finish_reason tool_calls without tool_calls")
        if content is None:
            problems.append("content null without tool_calls")
        # a forced call cut by max_tokens before its name was complete is content
        # (docs/API.md "Structured outputs": a max_tokens too small is the caller's)
        if forced(body) and "stop" not in body and finish != "length":
            problems.append("forced tool_choice %s answered without a call (finish %s): %r"
                            % (forced(body), finish, (content or "")[:80]))
    rf = (body.get("response_format") or {}).get("type")
    no_tools = not body.get("tools") or body.get("tool_choice") == "none"
    if rf in ("json_object", "json_schema") and no_tools and finish == "stop" and "stop" not in body:
        cover("%s answers parsed%s" % (rf, " and validated" if rf == "json_schema" else ""))
        try:
            v = json.loads(content or "")
        except ValueError:
            problems.append("%s answer is not JSON: %r" % (rf, (content or "")[:120]))
        else:
            if not isinstance(v, dict):
                problems.append("%s answer is not an object" % rf)
            elif rf == "json_schema" and not validate(v, body["response_format"]["json_schema"]["schema"]):
                problems.append("json_schema answer does not validate: %r" % v)


def check_logprobs(body, lp, problems, n_tokens=None):
    if not body.get("logprobs"):
        if lp not in (None, {}):
            problems.append("logprobs without asking")
        return
    if lp is None:
        return  # a choice that produced only tool calls may carry none
    items = lp.get("content") or []
    k = body.get("top_logprobs", 0)
    if items:
        cover("choices with logprobs checked")
    for it in items:
        if not (isinstance(it.get("token"), str) and it.get("logprob", 1) <= 0):
            problems.append("logprob entry %r" % it)
            break
        if len(it.get("top_logprobs", [])) != k:
            problems.append("top_logprobs has %d entries, asked %d" % (len(it.get("top_logprobs", [])), k))
            break


def post(body):
    conn = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=TIMEOUT_S)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def check_plain(body, j, problems):
    n = body.get("n", 1)
    if j.get("object") != "chat.completion":
        problems.append("object %r" % j.get("object"))
    ch = j.get("choices") or []
    if sorted(c.get("index") for c in ch) != list(range(n)):
        problems.append("choice indexes %r for n=%d" % ([c.get("index") for c in ch], n))
    for c in ch:
        m = c.get("message") or {}
        if m.get("role") != "assistant":
            problems.append("role %r" % m.get("role"))
        check_choice(body, c, problems, m.get("tool_calls"), m.get("content"), c.get("finish_reason"))
        check_logprobs(body, c.get("logprobs"), problems)
    u = j.get("usage") or {}
    if u.get("total_tokens") != u.get("prompt_tokens", -1) + u.get("completion_tokens", -1):
        problems.append("usage %r" % u)
    elif u["completion_tokens"] > n * body["max_tokens"]:
        problems.append("%d completion tokens > n x max_tokens" % u["completion_tokens"])


def check_stream(body, raw, problems):
    """Checks a stream; returns its choices assembled [(content, tool_calls, finish)]."""
    n = body.get("n", 1)
    lines = [l for l in raw.decode("utf-8", "replace").split("\n") if l.strip()]
    data = []
    for l in lines:
        if l.startswith(":"):
            continue  # SSE comment
        if not l.startswith("data: "):
            problems.append("non-data SSE line %r" % l[:80])
            return
        data.append(l[6:])
    if not data or data[-1] != "[DONE]":
        problems.append("stream does not end with [DONE]: %r" % (data[-1:] if data else "empty"))
        return None
    if data.count("[DONE]") != 1:
        problems.append("[DONE] %d times" % data.count("[DONE]"))
    content = {i: "" for i in range(n)}
    had_content = {i: False for i in range(n)}
    finish = {}
    calls = {i: {} for i in range(n)}
    lps = {i: None for i in range(n)}
    usage_chunks = []
    for k, d in enumerate(data[:-1]):
        try:
            c = json.loads(d)
        except ValueError:
            problems.append("chunk is not JSON: %r" % d[:80])
            return None
        if "error" in c:
            problems.append("error object inside a 200 stream: %r" % c["error"])
            return None
        if c.get("object") != "chat.completion.chunk":
            problems.append("chunk object %r" % c.get("object"))
        if c.get("usage"):
            usage_chunks.append((k, c))
        for ch in c.get("choices") or []:
            i = ch.get("index")
            if i not in content:
                problems.append("chunk for choice %r with n=%d" % (i, n))
                continue
            if i in finish:
                problems.append("choice %d continues after its finish_reason" % i)
            dl = ch.get("delta") or {}
            if dl.get("content") is not None:
                content[i] += dl["content"]
                had_content[i] = True
            for t in dl.get("tool_calls") or []:
                slot = calls[i].setdefault(t.get("index"), {"function": {"arguments": ""}})
                for key in ("id", "type"):
                    if t.get(key):
                        slot[key] = t[key]
                fn = t.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] = fn["name"]
                slot["function"]["arguments"] += fn.get("arguments") or ""
            if ch.get("logprobs"):
                lp = lps[i] or {"content": []}
                lp["content"] += ch["logprobs"].get("content") or []
                lps[i] = lp
            if ch.get("finish_reason"):
                finish[i] = ch["finish_reason"]
    assembled = []
    for i in range(n):
        if i not in finish:
            problems.append("choice %d never finished" % i)
            continue
        tc = [calls[i][k] for k in sorted(calls[i], key=lambda x: (x is None, x))]
        check_choice(body, None, problems, tc, content[i] if had_content[i] or not tc else None, finish[i])
        check_logprobs(body, lps[i], problems)
        assembled.append((content[i], tc, finish[i]))
    cover("streams ended with [DONE]")
    want_usage = (body.get("stream_options") or {}).get("include_usage")
    if want_usage:
        if len(usage_chunks) != 1 or usage_chunks[0][0] != len(data) - 2 or usage_chunks[0][1].get("choices"):
            problems.append("include_usage: %d usage chunks, want one last with no choices" % len(usage_chunks))
    elif usage_chunks:
        problems.append("usage chunks without include_usage")
    return assembled


LOCK = threading.Lock()
RESULTS = []


def run_one(i, body, bad):
    t0 = time.monotonic()
    problems = []
    try:
        status, raw = post(body)
    except Exception as e:  # timeout, reset: the request did not answer
        status, raw = 0, b""
        problems.append("no answer within %.0f s: %s" % (TIMEOUT_S, e))
    dt = time.monotonic() - t0
    if status == 200:
        if bad:
            problems.append("200 for an invalid request (%s)" % "; ".join(bad))
        elif body.get("stream"):
            check_stream(body, raw, problems)
        else:
            try:
                check_plain(body, json.loads(raw), problems)
            except ValueError:
                problems.append("200 body is not JSON: %r" % raw[:120])
    elif 400 <= status < 500:
        try:
            j = json.loads(raw)
        except ValueError:
            j = None
        if not err_shape(j):
            problems.append("%d body is not an OpenAI error: %r" % (status, raw[:200]))
        if bad and status != 400:
            problems.append("invalid request (%s) got %d, want 400" % ("; ".join(bad), status))
    elif status:
        problems.append("status %d: %r" % (status, raw[:300]))
    msg = None
    if status and 400 <= status < 500 and not bad:
        try:
            msg = json.loads(raw)["error"]["message"][:100]
        except Exception:
            msg = None
    with LOCK:
        RESULTS.append((i, status, dt, problems, body, msg))


# ---- streamed == non-streamed for calls cut short ----------------------------------

ARRAY_TOOL = {"type": "function", "function": {"name": "tag", "description": "tags things",
                                               "parameters": SCHEMAS[2]}}


def draw_pair(rng):
    """A greedy forced call likely to be cut: stop "]" inside the array argument, or a
    small max_tokens (then no stop string)."""
    tools = [ARRAY_TOOL] + [{"type": "function", "function": {"name": "tool_%d" % k,
                                                               "parameters": SCHEMAS[k]}}
                            for k in range(rng.randint(0, 2))]
    body = {"model": rng.choice(MODELS), "temperature": 0, "tools": tools,
            "messages": [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))}],
            "tool_choice": rng.choice(["required", {"type": "function", "function": {"name": "tag"}}])}
    if rng.random() < 0.5:
        body["stop"] = ["]"]
        body["max_tokens"] = 120
    else:
        body["max_tokens"] = rng.randint(1, 40)
    if rng.random() < 0.3:
        body["parallel_tool_calls"] = False
    return body


def answer_of(c):
    """(content, [(name, arguments)], finish) of one assembled choice, for comparing."""
    content, calls, finish = c
    return ((content or "").rstrip(" \n"),
            [((t.get("function") or {}).get("name"), (t.get("function") or {}).get("arguments", ""))
             for t in calls or []], finish)


def run_pair(i, body):
    problems = []
    got = {}
    for step, stream in (("warm", False), ("streamed", True), ("plain", False)):
        b = dict(body, stream=True) if stream else body
        try:
            status, raw = post(b)
        except Exception as e:
            problems.append("%s: no answer within %.0f s: %s" % (step, TIMEOUT_S, e))
            break
        if status != 200:
            problems.append("%s: status %d: %r" % (step, status, raw[:200]))
            break
        if stream:
            got[step] = check_stream(b, raw, problems)
        else:
            try:
                j = json.loads(raw)
            except ValueError:
                problems.append("%s: 200 body is not JSON" % step)
                break
            check_plain(b, j, problems)
            got[step] = [((c.get("message") or {}).get("content"), (c.get("message") or {}).get("tool_calls"),
                          c.get("finish_reason")) for c in j.get("choices") or []]
    if not problems and got.get("streamed") is not None:
        s, p = [answer_of(c) for c in got["streamed"]], [answer_of(c) for c in got["plain"]]
        if s != p:
            problems.append("streamed %r != non-streamed %r" % (s, p))
        for content, calls, finish in p:
            cut = calls and finish != "tool_calls"
            cover("pairs compared" + (" with a call cut by %s" % ("max_tokens" if finish == "length"
                                                                  else "a stop string") if cut else ""))
            if cut:
                CUT_KINDS.add(finish)
    if problems:
        print("not ok - pair %d: %s\n#   body: %s" % (i, "; ".join(problems[:3]), json.dumps(body)[:1500]),
              flush=True)
    return not problems


CUT_KINDS = set()


def main():
    rng = random.Random(SEED)
    draws = [draw(rng, i) for i in range(N)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(CONC) as ex:
        for i, (body, bad) in enumerate(draws):
            ex.submit(run_one, i, body, bad)
    wall = time.monotonic() - t0
    RESULTS.sort()
    n_fail = 0
    for i, status, dt, problems, body, msg in RESULTS:
        if problems:
            n_fail += 1
            print("not ok - request %d (%d, %.1f s): %s\n#   body: %s"
                  % (i, status, dt, "; ".join(problems[:4]), json.dumps(body)[:1500]), flush=True)
    n200 = sum(1 for r in RESULTS if r[1] == 200)
    n400 = sum(1 for r in RESULTS if r[1] == 400)
    slowest = max(RESULTS, key=lambda r: r[2])
    print("# %d requests in %.1f s: %d answered 200, %d 400, %d other; slowest %.1f s (request %d)"
          % (len(RESULTS), wall, n200, n400, len(RESULTS) - n200 - n400, slowest[2], slowest[0]))
    for k in sorted(COVER):
        print("#   checked: %d %s" % (COVER[k], k))
    # why valid-looking requests were refused: listed for the reader, each must be a 4xx anyway
    why = {}
    for r in RESULTS:
        if r[5]:
            key = "".join("N" if ch.isdigit() else ch for ch in r[5].split(":")[0])[:70]
            why[key] = why.get(key, 0) + 1
    for k, v in sorted(why.items(), key=lambda kv: -kv[1])[:8]:
        print("#   4xx x%d: %s" % (v, k))
    ok = n_fail == 0
    prng = random.Random(SEED ^ 0x5EED)
    t1 = time.monotonic()
    pairs_ok = True
    for k in range(PAIRS):
        body = draw_pair(prng)
        pairs_ok = run_pair(k, body) and pairs_ok
    print("%s - %d greedy forced calls drawn to be cut short: streamed == non-streamed (content, names, "
          "arguments, finish_reason) in %.1f s" % ("ok" if pairs_ok else "not ok", PAIRS, time.monotonic() - t1))
    both = PAIRS == 0 or "stop" in CUT_KINDS
    print("%s - the pairs include calls cut by a stop string (finishes of cut calls: %s)"
          % ("ok" if both else "not ok", sorted(CUT_KINDS)))
    for k in sorted(COVER):
        if k.startswith("pairs"):
            print("#   checked: %d %s" % (COVER[k], k))
    print("%s - %d seeded combinations (seed %d): each answered within %.0f s with a well-formed 200 or a "
          "4xx OpenAI error (%d failed)" % ("ok" if ok else "not ok", len(RESULTS), SEED, TIMEOUT_S, n_fail))
    enough = n200 >= len(RESULTS) * 2 // 5
    print("%s - most combinations are served, not refused (%d of %d answered 200)"
          % ("ok" if enough else "not ok", n200, len(RESULTS)))
    return 0 if ok and enough and pairs_ok and both else 1


sys.exit(main())
