#!/usr/bin/env python3
"""loadgen.py — an independent HTTP load generator for OpenAI-compatible servers.

It shares no code with pagoda-bench (tests/bench/*.c): Python standard library
only, its own HTTP/1.1 client on asyncio streams (chunked or sized bodies,
keep-alive, TCP_NODELAY), its own SSE reader and its own counting, so a
figure both tools agree on is not an artefact of one client.

Load: N concurrent streams, closed loop (each stream sends its next request
as soon as its previous one ends), R measured requests in all, after an
optional warm-up of W requests (run to completion first, not counted). Each
request is a POST /v1/completions with "stream": true (or false with
--no-stream), a prompt of --words words drawn from a seeded generator
(request i always gets the same prompt), "max_tokens", "ignore_eos": true
and "temperature": 0 unless told otherwise. The same request body goes to
any server: llama-server accepts ignore_eos and /v1/completions.

What it counts, on the client's clock (time.perf_counter):
  output tokens   usage.completion_tokens of the final chunk when the server
                  sends usage, else the number of SSE chunks whose
                  choices[0].text is non-empty; both totals are reported
                  (tokens_usage, tokens_chunks) so a server that batches
                  tokens into chunks shows up
  wall time       first send of the measured phase -> last measured response
                  end (prefill and queueing included)
  output tok/s    output tokens of the ok requests / wall time
  TTFT            send -> first chunk with text (median over ok requests)
  ITL             gaps between consecutive text chunks, pooled (median)
  TPOT            per request (end - first text) / (tokens - 1) (median)
A request is ok when it got HTTP 2xx, a stream ending in "data: [DONE]"
(or a JSON body without --stream) and no error object; anything else is an
error, reported with its message. Server-side timings (llama-server's
"timings": prompt_ms, predicted_ms) are summarized when present.

usage: loadgen.py --url http://127.0.0.1:8080 [-c 32] [-n 96] [--warmup 0]
         [--words 24] [--max-tokens 64] [--seed 1] [--temperature 0|none]
         [--no-ignore-eos] [--no-stream] [--no-include-usage] [--model NAME]
         [--timeout 600] [--json] [--dump FILE.jsonl]
Exit status: 0 when at least one measured request was ok, 1 otherwise, 2 usage.
"""
import argparse
import asyncio
import json
import random
import socket
import statistics
import sys
import time
import urllib.parse
import urllib.request

# Plain English words, 1-3 syllables (a different list from pagoda-bench's).
WORDS = """apple river garden window yellow bright quiet morning evening summer winter
forest market letter doctor family friend mountain ocean island village kitchen table
chair bread butter coffee music picture teacher student paper pencil flower button
little happy heavy simple gentle careful hungry sleepy silver golden orange purple
walked talked jumped played opened closed carried painted watched listened laughed
smiled because before after under over between behind around inside outside always
never sometimes often slowly quickly softly loudly together again maybe really very
bird horse rabbit tiger kitten puppy monkey turtle dragon castle rocket planet cloud
storm rain snow wind stone road bridge tower ship train truck bottle basket blanket
pocket ticket jacket sister brother mother father uncle cousin neighbor stranger""".split()


def make_prompt(seed, i, n_words):
    """The prompt of request i: n_words words from a generator seeded by
    (seed, i), so a run is reproducible and no two requests share a prefix."""
    rng = random.Random(seed * 1000003 + i)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


class Req:
    """What one response told us."""
    __slots__ = ("i", "t_send", "t_first", "t_end", "stamps", "usage_completion", "usage_prompt",
                 "n_chunks", "error", "done", "timings")

    def __init__(self, i):
        self.i = i
        self.t_send = self.t_first = self.t_end = None
        self.stamps = []            # arrival time of every chunk with text
        self.usage_completion = None
        self.usage_prompt = None
        self.n_chunks = 0           # chunks with non-empty text
        self.error = None
        self.done = False           # saw [DONE] (stream) or a complete body
        self.timings = None         # llama-server's per-request timings

    def tokens(self):
        return self.usage_completion if self.usage_completion is not None else self.n_chunks


class Conn:
    """One keep-alive HTTP/1.1 connection (reopened when the server closes)."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.r = self.w = None

    async def open(self):
        self.r, self.w = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        sock = self.w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        if self.w is not None:
            self.w.close()
        self.r = self.w = None


async def read_head(r):
    """Status code and lower-cased headers of one response."""
    line = await r.readline()
    if not line:
        raise ConnectionError("connection closed before the status line")
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ConnectionError("bad status line %r" % line[:80])
    status = int(parts[1])
    headers = {}
    while True:
        line = await r.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers


async def body_pieces(r, headers):
    """Yields (bytes, arrival time) as the body arrives."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            line = await r.readline()
            if not line:
                raise ConnectionError("connection closed inside a chunked body")
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await r.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            data = await r.readexactly(size + 2)
            yield data[:-2], time.perf_counter()
    elif "content-length" in headers:
        n = int(headers["content-length"])
        while n > 0:
            data = await r.read(min(n, 1 << 16))
            if not data:
                raise ConnectionError("connection closed inside a sized body")
            n -= len(data)
            yield data, time.perf_counter()
    else:
        while True:
            data = await r.read(1 << 16)
            if not data:
                return
            yield data, time.perf_counter()


def take_event(req, payload, t):
    """One SSE data payload of a streamed completion."""
    if payload == "[DONE]":
        req.done = True
        return
    try:
        j = json.loads(payload)
    except ValueError:
        req.error = req.error or "bad chunk: %s" % payload[:80]
        return
    if not isinstance(j, dict):
        req.error = req.error or "bad chunk: %s" % payload[:80]
        return
    if j.get("error"):
        e = j["error"]
        req.error = req.error or "SSE error: %s" % (e.get("message") if isinstance(e, dict) else e)
        return
    ch = j.get("choices") or []
    if ch and isinstance(ch[0], dict):
        text = ch[0].get("text")
        if text is None and isinstance(ch[0].get("delta"), dict):
            text = ch[0]["delta"].get("content")
        if text:
            req.n_chunks += 1
            req.stamps.append(t)
            if req.t_first is None:
                req.t_first = t
    u = j.get("usage")
    if isinstance(u, dict):
        if isinstance(u.get("completion_tokens"), int):
            req.usage_completion = u["completion_tokens"]
        if isinstance(u.get("prompt_tokens"), int):
            req.usage_prompt = u["prompt_tokens"]
    if isinstance(j.get("timings"), dict):
        req.timings = j["timings"]


async def one_request(conn, cfg, req):
    body = {"model": cfg.model, "prompt": make_prompt(cfg.seed, req.i, cfg.words),
            "max_tokens": cfg.max_tokens, "stream": cfg.stream}
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.temperature is not None:
        body["temperature"] = cfg.temperature
    if cfg.stream and cfg.include_usage:
        body["stream_options"] = {"include_usage": True}
    data = json.dumps(body).encode()
    head = ("POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            "Accept: %s\r\nContent-Length: %d\r\n\r\n" %
            (cfg.path, conn.host, conn.port, "text/event-stream" if cfg.stream else "application/json",
             len(data))).encode()
    for attempt in (0, 1):
        fresh = conn.w is None
        if fresh:
            await conn.open()
        req.t_send = time.perf_counter()
        try:
            conn.w.write(head + data)
            await conn.w.drain()
            status, headers = await read_head(conn.r)
            break
        except (ConnectionError, OSError):
            conn.close()
            if fresh or attempt:  # a kept-alive connection may have been closed by the server: retry once
                raise
    keep = headers.get("connection", "").lower() != "close"
    buf = b""
    raw = []
    async for piece, t in body_pieces(conn.r, headers):
        if status // 100 != 2 or not cfg.stream:
            raw.append(piece)
            continue
        buf += piece
        while True:
            # an event ends at a blank line (LF LF or CRLF CRLF)
            k, sep = buf.find(b"\n\n"), 2
            k2 = buf.find(b"\r\n\r\n")
            if k2 >= 0 and (k < 0 or k2 < k):
                k, sep = k2, 4
            if k < 0:
                break
            ev, buf = buf[:k].decode("utf-8", "replace"), buf[k + sep:]
            datas, kind = [], "message"
            for line in ev.splitlines():
                if line.startswith("data:"):
                    datas.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
                elif line.startswith("event:"):
                    kind = line[6:].strip()
            if kind == "error":
                req.error = req.error or "SSE error event: %s" % "\n".join(datas)[:200]
            elif datas:
                take_event(req, "\n".join(datas), t)
    req.t_end = time.perf_counter()
    if not keep or "content-length" not in headers and "chunked" not in headers.get("transfer-encoding", ""):
        conn.close()
    if status // 100 != 2:
        text = b"".join(raw).decode("utf-8", "replace")
        try:
            msg = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = text[:200]
        req.error = "HTTP %d: %s" % (status, msg)
        return
    if not cfg.stream:
        try:
            j = json.loads(b"".join(raw))
            u = j.get("usage") or {}
            req.usage_completion = u.get("completion_tokens")
            req.usage_prompt = u.get("prompt_tokens")
            req.timings = j.get("timings")
            req.t_first = req.t_end
            req.done = True
        except (ValueError, AttributeError) as e:
            req.error = "bad body: %s" % e
        return
    if req.error is None and not req.done:
        req.error = "stream ended without [DONE]"


async def stream_loop(conn, cfg, queue, out):
    while True:
        try:
            i = queue.pop()
        except IndexError:
            return
        req = Req(i)
        try:
            await asyncio.wait_for(one_request(conn, cfg, req), cfg.timeout)
        except asyncio.TimeoutError:
            req.error = "timeout after %g s" % cfg.timeout
            conn.close()
        except (ConnectionError, OSError, ValueError, asyncio.IncompleteReadError) as e:
            req.error = "transport: %s" % (e or type(e).__name__)
            conn.close()
        if req.t_end is None:
            req.t_end = time.perf_counter()
        out.append(req)


async def phase(cfg, conns, indices):
    """Runs the requests `indices` on the streams, closed loop; returns them."""
    queue = list(reversed(indices))
    out = []
    await asyncio.gather(*(stream_loop(c, cfg, queue, out) for c in conns))
    return out


def median(xs):
    return statistics.median(xs) if xs else None


def summarize(cfg, reqs, wall):
    ok = [q for q in reqs if q.error is None]
    errs = {}
    for q in reqs:
        if q.error is not None:
            errs[q.error] = errs.get(q.error, 0) + 1
    tok = sum(q.tokens() for q in ok)
    tok_chunks = sum(q.n_chunks for q in ok)
    n_usage = sum(q.usage_completion is not None for q in ok)
    gaps = [b - a for q in ok for a, b in zip(q.stamps, q.stamps[1:])]
    tpot = [(q.t_end - q.t_first) / (q.tokens() - 1) for q in ok if q.t_first and q.tokens() > 1]
    prompts = [q.usage_prompt for q in ok if q.usage_prompt is not None]
    ms = lambda x: None if x is None else round(x * 1000.0, 3)
    res = {
        "url": cfg.url, "model": cfg.model, "concurrency": cfg.concurrency, "requests": len(reqs),
        "warmup": cfg.warmup, "words": cfg.words, "max_tokens": cfg.max_tokens, "stream": cfg.stream,
        "temperature": cfg.temperature, "ignore_eos": cfg.ignore_eos,
        "ok": len(ok), "errors": len(reqs) - len(ok), "error_messages": errs,
        "wall_s": round(wall, 4),
        "output_tokens": tok, "tokens_usage": sum(q.usage_completion or 0 for q in ok),
        "tokens_chunks": tok_chunks, "usage_reported": n_usage,
        "output_tok_per_s": round(tok / wall, 3) if wall > 0 else 0.0,
        "chunk_tok_per_s": round(tok_chunks / wall, 3) if wall > 0 else 0.0,
        "prompt_tokens_mean": round(statistics.mean(prompts), 2) if prompts else None,
        "ttft_ms_p50": ms(median([q.t_first - q.t_send for q in ok if q.t_first])),
        "itl_ms_p50": ms(median(gaps)),
        "tpot_ms_p50": ms(median(tpot)),
        "e2e_ms_p50": ms(median([q.t_end - q.t_send for q in ok])),
    }
    tim = [q.timings for q in ok if q.timings]
    if tim:
        pick = lambda k: median([t[k] for t in tim if isinstance(t.get(k), (int, float))])
        res["server_prompt_ms_p50"] = pick("prompt_ms")
        res["server_prompt_n_p50"] = pick("prompt_n")
        res["server_predicted_per_token_ms_p50"] = pick("predicted_per_token_ms")
    return res


def first_model(base):
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        return json.load(r)["data"][0]["id"]


async def run(cfg):
    u = urllib.parse.urlsplit(cfg.url)
    if u.scheme != "http" or not u.hostname:
        raise SystemExit("loadgen: --url must be http://HOST:PORT")
    base = "http://%s:%d" % (u.hostname, u.port or 80)
    cfg.path = "/v1/completions"
    if cfg.model is None:
        try:
            cfg.model = first_model(base)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            raise SystemExit("loadgen: GET %s/v1/models gave no model (%s); pass --model" % (base, e))
    conns = [Conn(u.hostname, u.port or 80) for _ in range(cfg.concurrency)]
    n, w = cfg.requests, cfg.warmup
    if w:
        await phase(cfg, conns, list(range(n, n + w)))  # warm-up prompts after the measured ones
    t0 = time.perf_counter()
    reqs = await phase(cfg, conns, list(range(n)))
    sends = [q.t_send for q in reqs if q.t_send is not None]
    t_start = min(sends) if sends else t0
    wall = max(q.t_end for q in reqs) - t_start if reqs else 0.0
    for c in conns:
        c.close()
    if cfg.dump:
        with open(cfg.dump, "w") as f:
            for q in sorted(reqs, key=lambda q: q.i):
                f.write(json.dumps({
                    "i": q.i, "t_send_ms": round((q.t_send - t_start) * 1000, 3) if q.t_send else None,
                    "ttft_ms": round((q.t_first - q.t_send) * 1000, 3) if q.t_first and q.t_send else None,
                    "e2e_ms": round((q.t_end - q.t_send) * 1000, 3) if q.t_send else None,
                    "tokens_usage": q.usage_completion, "tokens_chunks": q.n_chunks,
                    "prompt_tokens": q.usage_prompt, "timings": q.timings, "error": q.error}) + "\n")
    return summarize(cfg, reqs, wall)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Independent streaming load generator for /v1/completions.")
    ap.add_argument("--url", required=True, help="server root, http://HOST:PORT")
    ap.add_argument("--model", default=None, help="model name (default: first of GET /v1/models)")
    ap.add_argument("-c", "--concurrency", type=int, default=1)
    ap.add_argument("-n", "--requests", type=int, default=8, help="measured requests")
    ap.add_argument("--warmup", type=int, default=0, help="uncounted requests run first")
    ap.add_argument("--words", type=int, default=24, help="prompt length in words")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--temperature", default="0", help="a number, or 'none' to leave it out")
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    ap.add_argument("--no-stream", dest="stream", action="store_false")
    ap.add_argument("--no-include-usage", dest="include_usage", action="store_false",
                    help='do not send stream_options {"include_usage": true}')
    ap.add_argument("--timeout", type=float, default=600.0, help="per-request limit, seconds")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--dump", default=None, help="one JSON line per measured request")
    cfg = ap.parse_args(argv)
    if cfg.concurrency < 1 or cfg.requests < 1 or cfg.warmup < 0 or cfg.words < 1 or cfg.max_tokens < 1:
        ap.error("-c, -n, --words and --max-tokens must be >= 1, --warmup >= 0")
    cfg.temperature = None if cfg.temperature == "none" else float(cfg.temperature)
    res = asyncio.run(run(cfg))
    if cfg.json:
        print(json.dumps(res))
    else:
        print("loadgen %s model %s: %d streams, %d requests (+%d warm-up), %d words, max_tokens %d%s%s" % (
            cfg.url, cfg.model, cfg.concurrency, cfg.requests, cfg.warmup, cfg.words, cfg.max_tokens,
            ", ignore_eos" if cfg.ignore_eos else "", "" if cfg.stream else ", not streamed"))
        print("  ok %d, errors %d %s" % (res["ok"], res["errors"],
                                         json.dumps(res["error_messages"]) if res["errors"] else ""))
        print("  wall %.3f s, output %d tokens (usage %d, chunks %d): %.1f tok/s (chunks: %.1f)" % (
            res["wall_s"], res["output_tokens"], res["tokens_usage"], res["tokens_chunks"],
            res["output_tok_per_s"], res["chunk_tok_per_s"]))
        print("  prompt %s tok/request; p50 TTFT %s ms, ITL %s ms, TPOT %s ms, E2E %s ms" % (
            res["prompt_tokens_mean"], res["ttft_ms_p50"], res["itl_ms_p50"], res["tpot_ms_p50"],
            res["e2e_ms_p50"]))
        if "server_prompt_ms_p50" in res:
            print("  server timings p50: prompt %s ms (%s tokens), %s ms per generated token" % (
                res["server_prompt_ms_p50"], res["server_prompt_n_p50"],
                res["server_predicted_per_token_ms_p50"]))
    return 0 if res["ok"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
