#!/usr/bin/env python3
"""lora_cmp.py — one verdict of tests/compare/lora_vs_llamacpp.sh: pagoda's
greedy text against llama-server's /completion answer for the same prompt.

usage: lora_cmp.py PAGODA_TEXT_FILE LLAMA_JSON_FILE TIE_GAP
Prints one word and a note: "ok" (equal texts), "tie" (they part at a token
where llama-server's own top two candidates are within TIE_GAP nats of each
other and pagoda took the second: a near-tie that float rounding may flip,
not a disagreement of the adapter code), "skip" (llama-server answered HTTP
500 because its own text is not valid UTF-8: its chat output parser, which
runs on /completion too, refuses lone byte tokens), or "FAIL". Exit 0 for
ok, tie and skip.

A FAIL says where pagoda's token stands among llama-server's candidates
(its rank and how many nats below llama's top), to tell a near-tie past
TIE_GAP from a real disagreement.

The answer must come from a request with "n_probs" >= 2 (the script asks
for 8): its
completion_probabilities list holds, per generated token, the token's text
and the top candidates' log-probabilities (before sampling).
"""
import json
import sys


def main():
    a = open(sys.argv[1], encoding="utf-8", errors="replace").read()
    j = json.load(open(sys.argv[2], encoding="utf-8"))
    gap_max = float(sys.argv[3])
    if "content" not in j:
        msg = json.dumps(j)[:200]
        if "does not match the expected" in msg:
            # llama-server's output parser refuses a text that is not valid
            # UTF-8 (a random model's lone byte tokens): nothing to compare
            print(f"skip: llama-server refused its own text (HTTP 500, not valid UTF-8): {msg}")
            return 0
        print(f"FAIL: llama-server answered no content: {msg}")
        return 1
    b = j["content"]
    if a == b:
        print("ok")
        return 0
    # the first token of llama-server's continuation where pagoda's text parts
    pos = 0
    for k, tok in enumerate(j.get("completion_probabilities", [])):
        t = tok.get("token", "")
        if a[pos:pos + len(t)] != t:
            top = tok.get("top_logprobs") or tok.get("probs") or []
            if len(top) >= 2 and "logprob" in top[0]:
                gap = top[0]["logprob"] - top[1]["logprob"]
                alt = top[1].get("token", "")
                if gap <= gap_max and alt and a[pos:pos + len(alt)] == alt:
                    print(f"tie at token {k}: llama's top two {top[0].get('token')!r} / {alt!r} "
                          f"{gap:.4f} nats apart, pagoda took {alt!r}")
                    return 0
                # where pagoda's token stands in llama's candidates (longest
                # match: a token's text may be a prefix of another's)
                seen = [(r, c) for r, c in enumerate(top) if c.get("token") and a[pos:].startswith(c["token"])]
                if seen:
                    r, c = max(seen, key=lambda rc: len(rc[1]["token"]))
                    where = (f"pagoda's {c['token']!r} is llama's #{r + 1}, "
                             f"{top[0]['logprob'] - c['logprob']:.4f} nats below its top")
                else:
                    where = f"pagoda's token is not in llama's top {len(top)}"
                print(f"FAIL at token {k}: llama {t!r} (top two {gap:.4f} nats apart), "
                      f"pagoda {a[pos:pos + 12]!r}; {where}")
            else:
                print(f"FAIL at token {k}: llama {t!r}, pagoda {a[pos:pos + 12]!r} (no probabilities)")
            return 1
        pos += len(t)
    print(f"FAIL: texts differ past llama's tokens (pagoda {len(a)} chars, llama {len(b)})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
