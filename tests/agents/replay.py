#!/usr/bin/env python3
"""replay.py — POST every recorded agent body of tests/agents/corpus/ to a
gateway and check the answer's shape (run by replay.sh; needs no npm and no
agent).

Each corpus file is a record_proxy.py recording: {"path", "headers", "body"}.
The body goes out as recorded — same path (Claude Code's ?beta=true), same
anthropic-*/openai-*/x-* headers — except that its output budget is cut to
MAX_TOKENS (8) so a random model's answer ends quickly (max_tokens for
/v1/messages, max_output_tokens for /v1/responses). Per file:
  /v1/messages   as recorded (stream): 200, SSE message_start first and
                 message_stop last, content_block_start/stop paired, a
                 message_delta with a stop_reason; the same body with stream
                 false: 200, a "message" with content blocks, stop_reason,
                 usage.input_tokens > 0; /v1/messages/count_tokens with the
                 body: 200, input_tokens > 0 (and equal to the message's
                 usage.input_tokens)
  /v1/responses  as recorded (stream): 200, response.created first and
                 response.completed / response.incomplete last, sequence
                 numbers 0, 1, 2, ...; with stream false: 200, an object
                 "response" with status completed / incomplete and output items
Prints ok / not ok lines.

env: URL (the gateway), CORPUS (default: the corpus/ next to this file),
     MAX_TOKENS (default 8)
"""
import glob
import http.client
import json
import os
import sys
import urllib.error
import urllib.request
import time

URL = os.environ["URL"]
CORPUS = os.environ.get("CORPUS") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
MAX_TOKENS = int(os.environ.get("MAX_TOKENS", "8"))
n_fail = 0
times = []  # seconds of each POST of the current file


def check(cond, what, detail=None):
    global n_fail
    print(("ok - " if cond else "not ok - ") + what)
    if not cond:
        n_fail += 1
        if detail is not None:
            print("# " + str(detail)[:800].replace("\n", "\n# "))
    return cond


def post(path, headers, body):
    t0 = time.monotonic()
    try:
        return _post(path, headers, body)
    finally:
        times.append(time.monotonic() - t0)


def _post(path, headers, body):
    hdrs = {k: v for k, v in headers.items() if k not in ("user-agent", "x-stainless-timeout")}
    hdrs["content-type"] = "application/json"
    hdrs.setdefault("anthropic-version", "2023-06-01")
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(), headers=hdrs, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.headers.get("content-type", ""), r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type", ""), e.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out: status 0
        return 0, "", "%s: %s" % (type(e).__name__, e)


def sse(text):
    """[(event, data as JSON or None)] of an SSE stream."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        ev, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                ev = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if ev is None and not data:
            continue
        try:
            d = json.loads("\n".join(data)) if data else None
        except ValueError:
            d = "\n".join(data)
        out.append((ev, d))
    return out


def messages_case(name, rec):
    body = dict(rec["body"], max_tokens=MAX_TOKENS)
    stream = bool(body.get("stream"))
    st, ct, text = post(rec["path"], rec["headers"], body)
    if stream:
        evs = sse(text) if st == 200 else []
        kinds = [e for e, _ in evs]
        starts = sum(1 for k in kinds if k == "content_block_start")
        stops = sum(1 for k in kinds if k == "content_block_stop")
        delta = [d for e, d in evs if e == "message_delta"]
        check(st == 200 and "text/event-stream" in ct and kinds[:1] == ["message_start"] and kinds[-1:] == ["message_stop"]
              and starts == stops and delta and delta[-1]["delta"].get("stop_reason"),
              "%s: streamed as recorded: 200, message_start … message_stop, blocks paired, a stop_reason" % name,
              "%d %s" % (st, text[:600]))
    st, ct, text = post(rec["path"], rec["headers"], dict(body, stream=False))
    try:
        m = json.loads(text)
    except ValueError:
        m = {}
    ok_msg = check(st == 200 and m.get("type") == "message" and m.get("role") == "assistant" and isinstance(m.get("content"), list)
                   and m.get("stop_reason") in ("end_turn", "max_tokens", "tool_use", "stop_sequence")
                   and m.get("usage", {}).get("input_tokens", 0) > 0,
                   "%s: stream false: 200, a message with content, stop_reason, usage" % name, "%d %s" % (st, text[:600]))
    cbody = {k: v for k, v in rec["body"].items() if k not in ("max_tokens", "stream")}
    path = rec["path"].split("?")
    path = path[0] + "/count_tokens" + ("?" + path[1] if len(path) > 1 else "")
    st, ct, text = post(path, rec["headers"], cbody)
    try:
        c = json.loads(text)
    except ValueError:
        c = {}
    n = c.get("input_tokens", 0) if isinstance(c, dict) else 0
    same = not ok_msg or n == m["usage"]["input_tokens"] + m["usage"].get("cache_read_input_tokens", 0) \
        + m["usage"].get("cache_creation_input_tokens", 0)
    check(st == 200 and isinstance(n, int) and n > 0 and same,
          "%s: count_tokens: 200, input_tokens %s (the message's usage: %s)" % (
              name, n, json.dumps(m.get("usage")) if ok_msg else "-"), "%d %s" % (st, text[:600]))


def responses_case(name, rec):
    body = dict(rec["body"], max_output_tokens=MAX_TOKENS)
    if body.get("stream"):
        st, ct, text = post(rec["path"], rec["headers"], body)
        evs = sse(text) if st == 200 else []
        kinds = [e or (d.get("type") if isinstance(d, dict) else None) for e, d in evs]
        seqs = [d.get("sequence_number") for _, d in evs if isinstance(d, dict)]
        check(st == 200 and "text/event-stream" in ct and kinds[:1] == ["response.created"]
              and kinds[-1:] in (["response.completed"], ["response.incomplete"]) and seqs == list(range(len(seqs))),
              "%s: streamed as recorded: 200, response.created … completed/incomplete, sequence numbers 0.." % name,
              "%d %s" % (st, text[:600]))
    st, ct, text = post(rec["path"], rec["headers"], dict(body, stream=False))
    try:
        r = json.loads(text)
    except ValueError:
        r = {}
    check(st == 200 and r.get("object") == "response" and r.get("status") in ("completed", "incomplete")
          and isinstance(r.get("output"), list) and r.get("usage", {}).get("input_tokens", 0) > 0,
          "%s: stream false: 200, a response (completed/incomplete) with output items and usage" % name,
          "%d %s" % (st, text[:600]))


def main():
    files = sorted(glob.glob(os.path.join(CORPUS, "*.json")))
    check(len(files) > 0, "corpus: %d recorded bodies in %s" % (len(files), CORPUS))
    for f in files:
        name = os.path.basename(f)[:-5]
        with open(f) as fh:
            rec = json.load(fh)
        path = rec["path"].split("?")[0]
        times.clear()
        if path.endswith("/messages"):
            messages_case(name, rec)
        elif path.endswith("/responses"):
            responses_case(name, rec)
        else:
            check(False, "%s: a /v1/messages or /v1/responses body (%s)" % (name, rec["path"]))
        print("# %s: %s s" % (name, " + ".join("%.1f" % t for t in times)), flush=True)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
