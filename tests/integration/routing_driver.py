"""Routing by cache across 2 real local replicas (driven by routing.sh).

Prints TAP-like lines. argv: URL KV_BLOCKS
Checks, against a gateway started with --replicas 2 --routing-max-load-gap 1:
  1. a request whose prefix a replica holds goes to that replica (routed
     "cache", its prefix-cache hits rise, the other's do not);
  2. when that replica is loaded past the gap the request goes elsewhere
     ("overload");
  3. evictions on the worker remove its index entries (entries per replica
     stay ≤ its KV blocks; an evicted prefix is routed "load" again);
  4. /metrics prefix-cache counters equal the tokens actually served from
     cache (sum of usage.prompt_tokens_details.cached_tokens) and the prompt
     tokens looked up;
  5. a killed worker's entries vanish from the index.
"""
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.request
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tap import check  # noqa: E402
import tap  # noqa: E402
import prom  # noqa: E402

URL = sys.argv[1]
KV_BLOCKS = int(sys.argv[2])
CACHED = 0      # tokens the responses say came from the prefix cache
PROMPT = 0      # prompt tokens of all responses
LOCK = threading.Lock()


def post(prompt, max_tokens=1, ignore_eos=False):
    global CACHED, PROMPT
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": ignore_eos}).encode()
    r = urllib.request.urlopen(urllib.request.Request(URL + "/v1/completions", body,
                                                      {"Content-Type": "application/json"}), timeout=60)
    u = json.load(r)["usage"]
    with LOCK:
        CACHED += (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        PROMPT += u["prompt_tokens"]
    return u


def metrics():
    return prom.metrics(URL)


metric = prom.metric


def replicas():
    h = json.load(urllib.request.urlopen(URL + "/health", timeout=10))
    return {w["id"]: w["pid"] for w in h["workers"]}


def entries(m, rid):
    return metric(m, "pagoda_prefix_index_replica_entries", replica=rid)


def routed(m, by):
    return metric(m, "pagoda_routed_total", by=by)


def wait(cond, limit=10.0):
    return prom.wait(cond, limit)


WORDS = ("the cat sat on a mat and a dog ran to the park with a red ball while "
         "the sun was warm and bright over the hill").split()


def text(seed, n_words):
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] + ("" if i % 5 else str(seed)) for i in range(n_words))


reps = replicas()
check("two replicas registered", len(reps) == 2)
ids = list(reps)

# 1. the replica holding a prefix gets the requests sharing it
A = text(1, 110)
u = post(A + " first")
check(f"a long prompt ({u['prompt_tokens']} tokens, over 3 blocks)", u["prompt_tokens"] > 3 * 32)
check("its blocks reach the gateway's index (KV messages)",
      wait(lambda: max(entries(metrics(), r) for r in ids) >= 3))
m0 = metrics()
R = max(ids, key=lambda r: entries(m0, r))
O = [r for r in ids if r != R][0]
hits_R0 = metric(m0, "pagoda_replica_prefix_cache_hits_total", replica=R)
hits_O0 = metric(m0, "pagoda_replica_prefix_cache_hits_total", replica=O)
cache0 = routed(m0, "cache")
cached = [post(A + f" then {i}")["prompt_tokens_details"]["cached_tokens"] for i in range(4)]
check(f"4 requests sharing the prefix are served from cache ({cached} tokens)", min(cached) >= 3 * 32)
ok = wait(lambda: metric(metrics(), "pagoda_replica_prefix_cache_hits_total", replica=R) >= hits_R0 + sum(cached))
m1 = metrics()
check("all 4 were routed by cache", routed(m1, "cache") - cache0 == 4)
check(f"all their hits were on the replica holding the prefix ({R})",
      ok and metric(m1, "pagoda_replica_prefix_cache_hits_total", replica=O) == hits_O0)

# 2. overload: R busy past the gap (1) → the next one goes to the other replica
over0 = routed(m1, "overload")
long_runs = [threading.Thread(target=post, args=(A + f" busy {i}", 300, True)) for i in range(4)]
for t in long_runs:
    t.start()
for t in long_runs:
    t.join()
m2 = metrics()
check(f"with the holder loaded past --routing-max-load-gap, a request went elsewhere "
      f"(overload {routed(m2, 'overload') - over0:.0f})", routed(m2, "overload") > over0)

# 3. evictions remove entries: flood both replicas with other prefixes
for rnd in range(8):
    th = [threading.Thread(target=post, args=(text(100 + 2 * rnd + j, 110),)) for j in range(2)]
    for t in th:
        t.start()
    for t in th:
        t.join()
time.sleep(0.5)
m3 = metrics()
ents = {r: entries(m3, r) for r in ids}
check(f"index entries per replica stay within its KV pool ({ents}, {KV_BLOCKS} blocks each): "
      f"evictions were reported", all(0 < v <= KV_BLOCKS for v in ents.values()))
load0 = routed(m3, "load")
post(A + " again")
check("the evicted prefix is routed by load again", routed(metrics(), "load") == load0 + 1)

# 4. /metrics prefix-cache counters == tokens actually served from cache
def counters_match():
    m = metrics()
    return (metric(m, "vllm:prefix_cache_hits_total") == CACHED and
            metric(m, "vllm:prefix_cache_queries_total") >= PROMPT)
ok = wait(counters_match, 5)
m4 = metrics()
hits, queries = metric(m4, "vllm:prefix_cache_hits_total"), metric(m4, "vllm:prefix_cache_queries_total")
check(f"vllm:prefix_cache_hits_total {hits:.0f} == cached tokens served {CACHED}", hits == CACHED)
if metric(m4, "vllm:num_preemptions_total") == 0:
    check(f"vllm:prefix_cache_queries_total {queries:.0f} == prompt tokens {PROMPT} (no preemption)",
          queries == PROMPT)
per_rep = sum(metric(m4, "pagoda_replica_prefix_cache_hits_total", replica=r) for r in ids)
check("per-replica hits add up to the model's", per_rep == hits)

# 4b. prompt_cache_key (Responses) is a routing affinity: short inputs with no full block in
# common go where the key's last request went ("cache"); without a key they go by load
def respond(inp, key=None):
    b = {"model": "m", "input": inp, "max_output_tokens": 1, "temperature": 0, "store": False}
    if key:
        b["prompt_cache_key"] = key
    urllib.request.urlopen(urllib.request.Request(URL + "/v1/responses", json.dumps(b).encode(),
                                                  {"Content-Type": "application/json"}), timeout=60).read()


ma = metrics()
q0 = {r: metric(ma, "pagoda_replica_prefix_cache_queries_total", replica=r) for r in ids}
c0, l0 = routed(ma, "cache"), routed(ma, "load")
for i in range(4):
    respond("Tom had a %s dog." % ["red", "big", "old", "shy"][i], key="session-7")
wait(lambda: sum(metric(metrics(), "pagoda_replica_prefix_cache_queries_total", replica=r) - q0[r]
                 for r in ids) > 0, 5)
mb = metrics()
used = [r for r in ids if metric(mb, "pagoda_replica_prefix_cache_queries_total", replica=r) > q0[r]]
check(f"prompt_cache_key: 3 of 4 requests with one key routed by cache "
      f"(cache +{routed(mb, 'cache') - c0:.0f}, load +{routed(mb, 'load') - l0:.0f}), all on one replica ({used})",
      routed(mb, "cache") - c0 == 3 and routed(mb, "load") - l0 == 1 and len(used) == 1)
c1, l1 = routed(mb, "cache"), routed(mb, "load")
for i in range(3):
    respond("Sue saw a %s cat." % ["red", "big", "old"][i])
mc = metrics()
check(f"without a key the same inputs are routed by load (load +{routed(mc, 'load') - l1:.0f})",
      routed(mc, "load") - l1 == 3 and routed(mc, "cache") == c1)

# 5. a killed worker's entries vanish
B = text(7, 110)
post(B)
wait(lambda: max(entries(metrics(), r) for r in ids) > 0)
m5 = metrics()
victim = max(ids, key=lambda r: metric(m5, "pagoda_replica_prefix_cache_queries_total", replica=r))
n_before = metric(m5, "pagoda_prefix_index_entries")
os.kill(reps[victim], signal.SIGKILL)
gone = wait(lambda: victim not in replicas(), 10)
check("the killed worker is dropped", gone)
m6 = metrics()
survivor = [r for r in replicas() if r != victim]
left = sum(entries(m6, r) for r in survivor)
check(f"its index entries vanished ({n_before:.0f} → {metric(m6, 'pagoda_prefix_index_entries'):.0f}, "
      f"all held by live replicas)",
      entries(m6, victim) == 0 and metric(m6, "pagoda_prefix_index_entries") == left)
sys.exit(1 if tap.n_failed() else 0)
