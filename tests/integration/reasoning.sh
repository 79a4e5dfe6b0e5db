#!/usr/bin/env bash
# --reasoning-parser qwen3 end to end: two real gateways, each with its own
# worker on the same random-weight model (pagoda-mkmodel), one started with
# --reasoning-parser qwen3 and one with the default (none). A GBNF grammar
# makes the model write "<think>…</think>…" (a random model would not), so
# the same seeded request must come back
#   - from the plain gateway as that whole text in message.content, and
#   - from the qwen3 gateway split: reasoning_content = the text between the
#     tags, content = what follows </think>, streamed as delta.reasoning_content
#     then delta.content chunks that add up to the same strings;
# an answer without <think> is untouched, and a bad --reasoning-parser value
# is refused at start-up.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent
command -v python3 >/dev/null || { skip "python3 not found: skipping reasoning tests"; exit 0; }
RAND=$TMP/random.gguf
check "pagoda-mkmodel makes a random-weight model" "$BUILD/pagoda-mkmodel" -o "$RAND" --dim 64 --layers 2 \
  --heads 4 --kv-heads 2 --ffn 128 --ctx 1024 --type F32 --seed 11 --tokenizer-from "$SMALL"

check "--reasoning-parser bogus is refused at start-up" \
  bash -c "! '$GW' --reasoning-parser bogus --print-config >'$TMP/bad.out' 2>&1 && grep -q 'expected none or qwen3' '$TMP/bad.out'"
check "--print-config shows reasoning_parser: qwen3" \
  bash -c "'$GW' --reasoning-parser qwen3 --model m=$RAND --print-config | grep -q '^reasoning_parser: qwen3'"

PQ=$(free_port); ZQ=$(free_port); PN=$(free_port); ZN=$(free_port)
spawn "$TMP/gw_q.log" "$GW" --listen 127.0.0.1:$PQ --worker-endpoint tcp://127.0.0.1:$ZQ \
  --model "m=$RAND" --reasoning-parser qwen3
spawn "$TMP/gw_n.log" "$GW" --listen 127.0.0.1:$PN --worker-endpoint tcp://127.0.0.1:$ZN --model "m=$RAND"
ready() { curl -sf "http://127.0.0.1:$1/health" | grep -q '"replicas":1'; }
check "qwen3-parser gateway: worker registered" wait_for 30 ready $PQ
check "plain gateway: worker registered" wait_for 30 ready $PN

timeout 300 python3 - "http://127.0.0.1:$PQ" "http://127.0.0.1:$PN" <<'PY' | tee "$TMP/py.out"
import json, sys, urllib.request
Q, N = sys.argv[1], sys.argv[2]
THINK = 'root ::= "<think>" [a-z ]+ "</think>" "\\n\\n"? [a-z .]+'
PLAIN = 'root ::= [a-z ]+ "."'

def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read().decode()
    if not body.get("stream"):
        return json.loads(raw)
    return [json.loads(l[6:]) for l in raw.split("\n") if l.startswith("data: ") and l != "data: [DONE]"]

def ok(cond, what):
    print(("ok - " if cond else "not ok - ") + what)

def body(grammar, seed, **kw):
    return {"model": "m", "messages": [{"role": "user", "content": "Think, then answer."}],
            "grammar": grammar, "temperature": 1, "seed": seed, "max_tokens": 60, **kw}

n_good, first_bad = 0, None
for seed in range(6):
    plain = post(N, body(THINK, seed))["choices"][0]["message"]
    split = post(Q, body(THINK, seed))["choices"][0]["message"]
    whole = plain["content"]
    r, c = split.get("reasoning_content"), split.get("content")
    want_r = whole[len("<think>"):whole.index("</think>")]
    want_c = whole[whole.index("</think>") + len("</think>"):]
    good = whole.startswith("<think>") and r == want_r and c == (want_c or None)
    chunks = post(Q, body(THINK, seed, stream=True))
    deltas = [ch["choices"][0]["delta"] for ch in chunks if ch.get("choices")]
    sr = "".join(d.get("reasoning_content", "") for d in deltas)
    sc = "".join(d.get("content") or "" for d in deltas)
    # reasoning deltas come first and carry no content
    kinds = [("r" if "reasoning_content" in d else "c") for d in deltas if d.get("reasoning_content") or d.get("content")]
    good = good and sr == r and sc == (c or "") and kinds == sorted(kinds, key=lambda k: k != "r") \
        and all("content" not in d for d in deltas if "reasoning_content" in d)
    if good:
        n_good += 1
    elif first_bad is None:
        first_bad = f"seed {seed}: plain {whole!r}, split {split!r}, streamed ({sr!r}, {sc!r})"
ok(n_good == 6, f"<think> answers: reasoning_content/content are the plain answer split at the tags, streamed and not ({n_good}/6 seeds)" + (f" — {first_bad}" if first_bad else ""))

a = post(N, body(PLAIN, 4))["choices"][0]["message"]
b = post(Q, body(PLAIN, 4))["choices"][0]["message"]
ok(a["content"] == b["content"] and "reasoning_content" not in b,
   f"an answer without <think> is untouched by the parser ({b['content']!r})")
chunks = post(Q, body(PLAIN, 4, stream=True))
deltas = [ch["choices"][0]["delta"] for ch in chunks if ch.get("choices")]
ok("".join(d.get("content") or "" for d in deltas) == a["content"] and not any("reasoning_content" in d for d in deltas),
   "streamed: the same content, no reasoning_content")
PY
grep -q '^not ok' "$TMP/py.out" && N_FAIL=$((N_FAIL + 1))
grep -q '^ok' "$TMP/py.out" || fail "the python driver printed nothing"
if [[ $N_FAIL -gt 0 ]]; then for f in "$TMP"/gw*.log; do echo "# --- $f"; tail -n 20 "$f" | sed 's/^/# /'; done; fi
finish
