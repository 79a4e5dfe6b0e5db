#!/usr/bin/env python3
"""lora_bench.py — 32 concurrent greedy streams over several LoRA adapters
and the base model (issue #39), driven by tests/bench/lora_bench.sh.

Each stream i sends one request (not streamed) for prompt i (its own
words), N new tokens, temperature 0, ignore_eos: to pagoda POST
/v1/completions ("max_tokens"), choosing its adapter by model name
("model": "a3"); to llama-server (--llama-ids) its native POST /completion
("n_predict"; its OpenAI routes run the chat output parser, which rejects
a random model's text with HTTP 500), choosing the adapter with llama.cpp's
per-request "lora" list: every loaded adapter listed, the stream's at scale
1, the others at 0 (the base: all at 0; adapters left out of a non-empty
list get scale 0, an empty list means the load-time scales). Both sides
tokenize the same prompt text with the same vocabulary; each phase line
shows the prompt tokens each side counted, so a difference shows.
Both sides get the same logit_bias banning the 256 byte tokens <0x00>..<0xFF>
(ids 3..258 in the llama-2 SentencePiece layout of the bases' tokenizer;
--ban-bytes 0 turns it off): a random model picks lone bytes that make
invalid UTF-8, and llama-server answers such a text with HTTP 500 ("does
not match the expected Content-only format", its chat output parser runs
on /completion too).
An answer that fails, or has fewer than N completion tokens, is a failed
request; RESULT lines carry the failed count.

Phases (each printed as one line "label tok/s tokens wall_s errors"):
  mixed   stream i selects ASSIGN[i] (a name or "base")
  base    the same 32 prompts, all on the base model
  alone   (--check) each stream of the mixed phase again, one at a time:
          its text must equal the mixed phase's (exit 1 otherwise)
tok/s = completion tokens of the phase / wall time from the first send to
the last response (prefill and queueing included).
After the rounds, ADAPTED counts the adapter streams whose mixed-phase text
differs from the base-only text of the same prompt (random adapters change
the greedy text, so each request did get its adapter; a stream that equals
the base's is printed).

usage: lora_bench.py --url URL --assign a1,a2,...,base,... [--n 32]
         [--words 12] [--reps 1] [--llama-ids a1:0,a2:1,...] [--check]
         [--label NAME] [--base-model base]
"""
import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request

WORDS = """harbor lantern meadow pebble thunder velvet walnut candle ribbon saddle
compass blanket cellar feather glacier hammock jigsaw kettle ladder marble needle
orchard parcel quartz riddle spindle timber umbrella vessel whistle yarn zephyr""".split()


def prompt(i, n_words):
    # stream i's own words (a fixed walk through the list), then a story opener
    w = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n_words)]
    return "Once upon a time, " + " ".join(w)


def body(args, i, sel, n):
    b = {"prompt": prompt(i, args.words), "temperature": 0, "ignore_eos": True}
    banned = range(3, 259) if args.ban_bytes else range(0)
    if args.llama_ids is None:
        b["model"] = args.base_model if sel == "base" else sel
        b["max_tokens"] = n
        if banned:
            b["logit_bias"] = {str(t): -100 for t in banned}
    else:
        b["n_predict"] = n
        if banned:
            b["logit_bias"] = [[t, False] for t in banned]
        b["lora"] = [{"id": idx, "scale": 1.0 if name == sel else 0.0} for name, idx in args.llama_ids]
    return b


def send(args, b, n):
    """One request: (text, completion tokens, prompt tokens, error or None)."""
    llama = args.llama_ids is not None
    req = urllib.request.Request(args.url + ("/completion" if llama else "/v1/completions"),
                                 data=json.dumps(b).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as r:
            j = json.load(r)
        if llama:
            text, done, ptok = j["content"], int(j["tokens_predicted"]), int(j["tokens_evaluated"])
        else:
            text, done = j["choices"][0]["text"], int(j["usage"]["completion_tokens"])
            ptok = int(j["usage"]["prompt_tokens"])
        if done != n:
            return text, done, ptok, f"{done} completion tokens, not {n}"
        return text, done, ptok, None
    except urllib.error.HTTPError as e:
        return None, 0, 0, f"HTTP {e.code}: {e.read()[:200]!r}"
    except Exception as e:  # noqa: BLE001 — any failure is one counted error
        return None, 0, 0, str(e)


def phase(args, sels):
    res = [None] * len(sels)

    def run(i):
        res[i] = send(args, body(args, i, sels[i], args.n), args.n)

    th = [threading.Thread(target=run, args=(i,)) for i in range(len(sels))]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r[1] for r in res)
    errors = [r[3] for r in res if r[3]]
    return res, tokens, wall, errors


def report(label, res, tokens, wall, errors):
    rate = tokens / wall if wall > 0 else 0.0
    ptok = sum(r[2] for r in res)
    print(f"{label:<28} {rate:9.1f} tok/s  {tokens:6d} tokens  {wall:7.2f} s  {len(errors)} failed  "
          f"({ptok} prompt tokens)", flush=True)
    for e in errors[:3]:
        print(f"#   error: {e}", flush=True)
    return rate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--assign", required=True, help="comma list: each stream's adapter name or base")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--words", type=int, default=12)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--llama-ids", default=None, help="name:id,... (llama-server's lora field)")
    ap.add_argument("--base-model", default="base")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--ban-bytes", type=int, default=1, help="1: logit_bias bans the byte tokens 3..258")
    ap.add_argument("--label", default="pagoda")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    sels = args.assign.split(",")
    if args.llama_ids is not None:
        args.llama_ids = [(p.split(":")[0], int(p.split(":")[1])) for p in args.llama_ids.split(",")]
    # warm-up: one short request per distinct selection (loads pages, fills nothing we measure)
    for s in sorted(set(sels)):
        send(args, body(args, 999, s, 2), 2)
    mixed_rates, base_rates, first, first_base = [], [], None, None
    failed = 0
    for rep in range(args.reps):
        res, tok, wall, err = phase(args, sels)
        mixed_rates.append(report(f"{args.label} mixed #{rep + 1}", res, tok, wall, err))
        first = first or res
        failed += len(err)
        resb, tok, wall, err = phase(args, ["base"] * len(sels))
        base_rates.append(report(f"{args.label} base-only #{rep + 1}", resb, tok, wall, err))
        first_base = first_base or resb
        failed += len(err)
    mixed, base = max(mixed_rates), max(base_rates)
    print(f"RESULT {args.label} mixed {mixed:.1f} tok/s, base-only {base:.1f} tok/s, "
          f"ratio {mixed / base if base else 0:.3f} (best of {args.reps}), failed {failed}", flush=True)
    rc = 1 if failed else 0
    adapted = [i for i, s in enumerate(sels) if s != "base"]
    differ = 0
    for i in adapted:
        if first[i][0] is not None and first_base[i][0] is not None and first[i][0] != first_base[i][0]:
            differ += 1
        else:
            print(f"# stream {i} ({sels[i]}): text equals the base's (or failed): {first[i][0]!r:.80}")
    print(f"ADAPTED {args.label}: {differ}/{len(adapted)} adapter streams' text differs from the base's", flush=True)
    if args.check:
        same = 0
        for i, s in enumerate(sels):
            text, _, _, err = send(args, body(args, i, s, args.n), args.n)
            if err is None and first[i][3] is None and text == first[i][0]:
                same += 1
            else:
                print(f"# stream {i} ({s}): alone {text!r:.80} != mixed {first[i][0]!r:.80} {err or ''}")
                rc = 1
        print(f"CHECK {args.label}: {same}/{len(sels)} streams' text equals the request run alone", flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
