#!/usr/bin/env python3
"""stall_bench.py — do long prompts stall running streams? (issue #38)

Any OpenAI-compatible server (pagoda's gateway, llama-server): standard
library only, POST /v1/completions with "stream": true, "temperature": 0,
"ignore_eos": true. Times are the client's (time.perf_counter).

interference  N streams decode (max_tokens large); after --settle s, M long
              prompts (--long-words words each, max_tokens 1) arrive at once.
              Printed: the streams' inter-token gaps (time between
              consecutive text chunks of one stream), p50 and p99, in the
              window before the long prompts arrive and in the window from
              their arrival to the last one's first token; and each long
              prompt's TTFT (send -> first text chunk).
priority      a short request with the high-tier key (--key-high): its TTFT
              on an idle server (median of --reps, at least 3), then again
              when it arrives --delay s into the prefill of a long low-tier
              prompt (--key-low; a fresh prompt each rep, so no prefix-cache
              hit), median of --reps. The low prompt's size comes from
              POST /tokenize (pagoda's gateway; "?" elsewhere). With --cancel
              (the default) the low prompt is cancelled as soon as the high
              request's first token is in (a long prefill need not finish to
              measure it), then a short probe request waits until the server
              is free again before the next rep; --no-cancel waits for the
              low prompt's first token (and prints its TTFT). Without keys
              (or against llama-server, which has no tiers) both go at the
              same priority.

usage: stall_bench.py --url http://127.0.0.1:8080 [--model NAME]
         [--mode interference|priority|both] [--streams 8] [--long 2]
         [--long-words 560] [--settle 8] [--delay 1.0] [--reps 1] [--no-cancel]
         [--key-high SECRET] [--key-low SECRET] [--label TEXT] [--json]
Exit status 0 when every request succeeded, 1 otherwise.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("the a little big dog cat ran to and with sun tree house over under went saw "
         "happy sad red blue day night friend park ball bird fish water hill boy girl "
         "mom dad said played found looked jumped garden flower rain wind boat road").split()


def prompt(seed, n_words):
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) for _ in range(n_words))


class Stream:
    """One streamed completion on its own thread; records text-chunk times."""

    def __init__(self, cfg, text, max_tokens, key=None):
        self.cfg, self.text, self.max_tokens, self.key = cfg, text, max_tokens, key
        self.t_send = None
        self.times = []          # perf_counter of each chunk with text
        self.error = None
        self.prompt_tokens = None
        self.stop_flag = False
        self.conn = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def run(self):
        u = urllib.parse.urlparse(self.cfg.url)
        body = {"prompt": self.text, "max_tokens": self.max_tokens, "stream": True,
                "temperature": 0, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        if self.cfg.model:
            body["model"] = self.cfg.model
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        try:
            c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=self.cfg.timeout)
            self.conn = c
            self.t_send = time.perf_counter()
            c.request("POST", "/v1/completions", json.dumps(body), headers)
            resp = c.getresponse()
            if resp.status != 200:
                self.error = "HTTP %d: %s" % (resp.status, resp.read()[:200])
                return
            done = False
            for raw in resp:
                if self.stop_flag:
                    break
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                ev = json.loads(data)
                if "error" in ev:
                    self.error = str(ev["error"])[:200]
                    return
                ch = ev.get("choices") or []
                if ch and ch[0].get("text"):
                    self.times.append(time.perf_counter())
                if ev.get("usage"):
                    self.prompt_tokens = ev["usage"].get("prompt_tokens")
            if not done and not self.stop_flag:
                self.error = "stream ended without [DONE]"
            c.close()
        except Exception as e:  # noqa: BLE001 - report any failure as the request's error
            if not self.stop_flag:
                self.error = repr(e)

    def cancel(self):
        """Drops the connection (the server cancels the request) and waits for the thread."""
        self.stop_flag = True
        c = self.conn
        if c is not None and c.sock is not None:
            try:
                import socket
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(self.cfg.timeout)

    def ttft(self):
        return self.times[0] - self.t_send if self.times else None


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def gaps(streams, t0, t1):
    """Inter-token gaps (s) of every stream whose later token fell in [t0, t1)."""
    out = []
    for s in streams:
        for a, b in zip(s.times, s.times[1:]):
            if t0 <= b < t1:
                out.append(b - a)
    return out


def interference(cfg):
    streams = [Stream(cfg, prompt(1000 + i, 12), 100000, cfg.key_low or cfg.key_high).start()
               for i in range(cfg.streams)]
    # every stream decoding, then the "before" window
    t_wait = time.perf_counter() + cfg.timeout
    while any(len(s.times) < 2 and not s.error for s in streams) and time.perf_counter() < t_wait:
        time.sleep(0.05)
    t_before = time.perf_counter()
    time.sleep(cfg.settle)
    t_arrive = time.perf_counter()
    seed = int(time.time())  # fresh prompts: no prefix-cache hit from an earlier run
    longs = [Stream(cfg, prompt(seed * 100 + i, cfg.long_words), 1, cfg.key_low or cfg.key_high).start()
             for i in range(cfg.long)]
    for s in longs:
        s.thread.join(cfg.timeout)
    t_done = time.perf_counter()
    time.sleep(min(cfg.settle, 3.0))
    t_after = time.perf_counter()
    for s in streams:
        s.stop_flag = True
    before = gaps(streams, t_before, t_arrive)
    during = gaps(streams, t_arrive, t_done)
    after = gaps(streams, t_done, t_after)
    res = {
        "streams": cfg.streams, "long": cfg.long,
        "long_prompt_tokens": [s.prompt_tokens for s in longs],
        "gap_before_p50_ms": pct(before, 50) * 1e3, "gap_before_p99_ms": pct(before, 99) * 1e3,
        "gap_during_p50_ms": pct(during, 50) * 1e3, "gap_during_p99_ms": pct(during, 99) * 1e3,
        "gap_during_max_ms": max(during) * 1e3 if during else float("nan"),
        "gap_after_p50_ms": pct(after, 50) * 1e3,
        "n_gaps_before": len(before), "n_gaps_during": len(during),
        "long_ttft_s": [s.ttft() for s in longs],
        "errors": [s.error for s in longs + streams if s.error],
    }
    return res


def count_tokens(cfg, text):
    """The prompt's token count from POST /tokenize (pagoda's gateway), or None."""
    u = urllib.parse.urlparse(cfg.url)
    body = {"prompt": text}
    if cfg.model:
        body["model"] = cfg.model
    headers = {"Content-Type": "application/json"}
    if cfg.key_low or cfg.key_high:
        headers["Authorization"] = "Bearer " + (cfg.key_low or cfg.key_high)
    try:
        c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
        c.request("POST", "/tokenize", json.dumps(body), headers)
        resp = c.getresponse()
        data = resp.read()
        c.close()
        return json.loads(data).get("count") if resp.status == 200 else None
    except (OSError, ValueError):
        return None


def priority(cfg):
    short = prompt(7, 12)
    reps = max(cfg.reps, 1)
    idle = []
    for i in range(max(reps, 3)):
        s = Stream(cfg, short + " " + str(i), 1, cfg.key_high).start()
        s.thread.join(cfg.timeout)
        if s.ttft() is not None:
            idle.append(s.ttft())
    seed = int(time.time())
    during, low_ttft, errors, n_low = [], [], [], None
    for rep in range(reps):
        text = prompt(seed * 100 + rep, cfg.long_words)
        if n_low is None:
            n_low = count_tokens(cfg, text)
        low = Stream(cfg, text, 1, cfg.key_low).start()
        time.sleep(cfg.delay)
        high = Stream(cfg, short + " busy " + str(rep), 1, cfg.key_high).start()
        high.thread.join(cfg.timeout)
        low_running = low.thread.is_alive()  # still prefilling when the high request got its token
        if high.ttft() is not None:
            during.append(high.ttft())
        errors += [s.error for s in (high,) if s.error]
        if cfg.cancel:
            low.cancel()
            # a low prompt refused (e.g. too long for the KV pool) or already
            # done measured nothing: say so instead of reporting idle TTFTs
            if low.error:
                errors.append("low prompt: " + low.error)
            elif not low_running:
                errors.append("the low prompt was not running when the high request got its first token")
            # the server is free again once a probe gets through (a high-tier
            # probe also stops a step the cancelled prompt may still hold)
            probe = Stream(cfg, short + " probe", 1, cfg.key_high).start()
            probe.thread.join(cfg.timeout)
            errors += [probe.error] if probe.error else []
        else:
            low.thread.join(cfg.timeout)
            errors += [low.error] if low.error else []
            if low.ttft() is not None:
                low_ttft.append(low.ttft())
    med_idle = statistics.median(idle) if idle else None
    med_during = statistics.median(during) if during else None
    return {
        "reps": reps,
        "low_prompt_tokens": n_low if n_low is not None else "?",
        "high_ttft_idle_s": med_idle,
        "high_ttft_during_low_prefill_s": med_during,
        "high_ttft_during_each_s": during,
        "ratio_during_over_idle": med_during / med_idle if med_idle and med_during else None,
        "low_ttft_s": statistics.median(low_ttft) if low_ttft else "cancelled",
        "errors": errors,
    }


def fmt(v):
    if isinstance(v, float):
        return "%.3f" % v if v < 10 else "%.1f" % v
    if isinstance(v, list):
        return "[" + ", ".join(fmt(x) for x in v) + "]"
    return str(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--mode", choices=["interference", "priority", "both"], default="both")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--long", type=int, default=2)
    ap.add_argument("--long-words", type=int, default=560)
    ap.add_argument("--settle", type=float, default=8.0)
    ap.add_argument("--delay", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--cancel", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--key-high", default=None)
    ap.add_argument("--key-low", default=None)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", action="store_true")
    cfg = ap.parse_args(argv)
    out = {"label": cfg.label, "url": cfg.url}
    if cfg.mode in ("interference", "both"):
        out["interference"] = interference(cfg)
    if cfg.mode in ("priority", "both"):
        out["priority"] = priority(cfg)
    if cfg.json:
        print(json.dumps(out))
    else:
        for part in ("interference", "priority"):
            if part in out:
                print("# %s %s" % (cfg.label, part))
                for k, v in out[part].items():
                    print("  %-32s %s" % (k, fmt(v)))
    errs = sum(len(out[p]["errors"]) for p in ("interference", "priority") if p in out)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
