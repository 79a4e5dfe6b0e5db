#!/usr/bin/env python3
"""corpus_add.py — copy one body record_proxy.py recorded into the corpus.

  corpus_add.py RECORDED.json NAME

writes tests/agents/corpus/NAME.json (the recording as is — path, the
anthropic-*/openai-*/x-* headers and user agent, body — minus the API key
headers) and the same body as a seed of the fuzz target that parses it:
tests/fuzz/corpus/anthropic/agents_NAME (flag byte 0: the Messages parser;
count_tokens bodies flag 1) or tests/fuzz/corpus/responses/agents_NAME
(flag byte 0). Record with AGENTS_RECORD=DIR bash tests/agents/claude_code.sh
(or codex.sh); see tests/agents/corpus/README.md.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    src, name = sys.argv[1], sys.argv[2]
    with open(src) as f:
        rec = json.load(f)
    for h in ("x-api-key", "authorization"):
        rec["headers"].pop(h, None)
    path = rec["path"].split("?")[0]
    if path.endswith("/messages/count_tokens"):
        target, flag = "anthropic", 1
    elif path.endswith("/messages"):
        target, flag = "anthropic", 0
    elif path.endswith("/responses"):
        target, flag = "responses", 0
    else:
        print("not a Messages or Responses body: " + rec["path"], file=sys.stderr)
        return 1
    out = os.path.join(ROOT, "tests/agents/corpus", name + ".json")
    with open(out, "w") as f:
        json.dump(rec, f, indent=1, ensure_ascii=False)
        f.write("\n")
    seed = os.path.join(ROOT, "tests/fuzz/corpus", target, "agents_" + name)
    with open(seed, "wb") as f:
        f.write(bytes([flag]) + json.dumps(rec["body"], ensure_ascii=False).encode())
    print(out, seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
