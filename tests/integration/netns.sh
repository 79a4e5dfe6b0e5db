#!/usr/bin/env bash
# Scale-out across "hosts" with CURVE: the gateway in one network namespace,
# two workers in two others, joined by veth pairs with addresses of
# 10.201.0.0/24 that exist only inside these namespaces (all traffic stays
# between them; the test talks to the gateway's HTTP port from inside its
# namespace). Checks:
#   - the gateway binds a non-loopback endpoint with CURVE; both workers
#     register over it with their own authorized keys (/health lists both);
#   - a worker without CURVE, from the same remote namespace, stays out;
#   - concurrent requests complete and both workers generate tokens (their
#     load.tokens_generated in /health grows);
#   - after one worker is killed (-9) the gateway drops it and requests keep
#     completing on the other.
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and `ip netns`; prints
# "skip - ip netns not permitted here" otherwise (CI containers, non-root).
# The namespaces are deleted on any exit (trap). Every wait is bounded.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }

NS_GW=pgd-gw-$$
NS_W1=pgd-w1-$$
NS_W2=pgd-w2-$$
NS_MADE=()
del_ns() {
  local n
  for n in "${NS_MADE[@]:-}"; do [[ -n $n ]] && ip netns del "$n" 2>/dev/null; done
}
# processes first (lib.sh's cleanup), then the namespaces they lived in
trap 'cleanup; del_ns' EXIT
trap 'exit 1' INT TERM HUP

if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null 2>&1 || ! ip netns add "$NS_GW" 2>/dev/null; then
  skip "ip netns not permitted here"
  exit 0
fi
NS_MADE+=("$NS_GW")
for n in "$NS_W1" "$NS_W2"; do
  ip netns add "$n" || { fail "ip netns add $n"; finish; }
  NS_MADE+=("$n")
done
# gw:g1 10.201.0.1/30 <-> w1:e0 10.201.0.2/30 ; gw:g2 10.201.0.5/30 <-> w2:e0 10.201.0.6/30
setup_net() {
  ip -n "$NS_GW" link add g1 type veth peer name e0 netns "$NS_W1" &&
    ip -n "$NS_GW" link add g2 type veth peer name e0 netns "$NS_W2" &&
    ip -n "$NS_GW" addr add 10.201.0.1/30 dev g1 &&
    ip -n "$NS_GW" addr add 10.201.0.5/30 dev g2 &&
    ip -n "$NS_W1" addr add 10.201.0.2/30 dev e0 &&
    ip -n "$NS_W2" addr add 10.201.0.6/30 dev e0 &&
    for n in "$NS_GW" "$NS_W1" "$NS_W2"; do ip -n "$n" link set lo up || return 1; done &&
    ip -n "$NS_GW" link set g1 up && ip -n "$NS_GW" link set g2 up &&
    ip -n "$NS_W1" link set e0 up && ip -n "$NS_W2" link set e0 up
}
if ! setup_net 2>"$TMP/net.err"; then
  # veth may be unavailable even where namespaces are (no module, seccomp)
  skip "ip netns not permitted here (veth setup failed: $(head -1 "$TMP/net.err"))"
  exit 0
fi
check "namespaces linked: w1 routes to the gateway at 10.201.0.1, w2 at 10.201.0.5 (veth)" \
  bash -c "ip -n '$NS_W1' route get 10.201.0.1 | grep -q 'dev e0' && ip -n '$NS_W2' route get 10.201.0.5 | grep -q 'dev e0'"

MODEL=$(small_model)
[[ -f $MODEL ]] || { fail "no model"; finish; }
mkdir -p "$TMP/keys"
for k in server w1 w2 rogue; do
  "$GW" --gen-curve-keypair "$TMP/keys/$k" >/dev/null || { fail "key pair $k"; finish; }
done
cat "$TMP/keys/w1.pub" "$TMP/keys/w2.pub" >"$TMP/keys/authorized"
ZP=5557 # ports are per namespace: nothing else listens in ours
HP=8080
cat >"$TMP/gw.yaml" <<EOF
listen: 127.0.0.1:$HP
worker_endpoint: tcp://0.0.0.0:$ZP
heartbeat_ms: 200
curve:
  server_secret_key_file: $TMP/keys/server.key
  authorized_worker_keys_file: $TMP/keys/authorized
models:
  - name: m
    path: $MODEL
    replicas: 0
EOF
in_gw() { ip netns exec "$NS_GW" "$@"; }
spawn "$TMP/gw.log" ip netns exec "$NS_GW" "$GW" --config "$TMP/gw.yaml"
health() { in_gw curl -s -m 5 "http://127.0.0.1:$HP/health"; } # 503 while no worker
hq() { # python condition over the /health JSON j
  health | python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"
}
check "gateway up in its namespace, bound to a non-loopback endpoint with CURVE" \
  wait_for 15 hq "j['status']=='no_workers' and 'm' in j['models']"
worker() { # ns gateway-ip key (exec: spawn's pid must be the worker's own)
  exec ip netns exec "$1" "$WK" --gateway "tcp://$2:$ZP" --model "m=$MODEL" --threads 1 --max-seqs 2 \
    --heartbeat-ms 200 --curve-server-key "$TMP/keys/server.pub" --curve-secret-key "$TMP/keys/$3.key"
}
spawn "$TMP/w1.log" worker "$NS_W1" 10.201.0.1 w1
W1=$SPAWNED
spawn "$TMP/w2.log" worker "$NS_W2" 10.201.0.5 w2
check "both workers register from their namespaces (/health lists 2)" wait_for 60 hq "len(j['workers'])==2"
pids=$(health | python3 -c 'import json,sys; print(" ".join(sorted(str(w["pid"]) for w in json.load(sys.stdin)["workers"])))')

spawn "$TMP/plain.log" ip netns exec "$NS_W2" "$WK" --gateway "tcp://10.201.0.5:$ZP" --model "m=$MODEL" --threads 1 --heartbeat-ms 200
spawn "$TMP/rogue.log" worker "$NS_W2" 10.201.0.5 rogue
check "a worker with an unknown key from w2's namespace is refused (logged)" \
  wait_for 30 grep -q "refused worker connection from 10.201.0.6" "$TMP/gw.log"
sleep 1
check "... it and a worker without CURVE stay out (still 2 workers)" hq "len(j['workers'])==2"

# tokens_generated of each worker pid, "pid:n pid:n"
gen() {
  health | python3 -c 'import json,sys
print(" ".join("%d:%d" % (w["pid"], (w["load"] or {}).get("tokens_generated", 0)) for w in json.load(sys.stdin)["workers"]))'
}
body='{"model":"m","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":8}'
burst() { # n concurrent chat completions; all must end with a finish reason
  local n=$1 i okc=0
  for i in $(seq 1 "$n"); do
    in_gw curl -s -m 60 "http://127.0.0.1:$HP/v1/chat/completions" -H 'content-type: application/json' \
      -d "$body" >"$TMP/r$i.json" &
  done
  wait_curls
  for i in $(seq 1 "$n"); do
    python3 -c "import json,sys; sys.exit(0 if json.load(open('$TMP/r$i.json'))['choices'][0]['finish_reason'] in ('stop','length') else 1)" \
      2>/dev/null && okc=$((okc + 1))
  done
  [[ $okc == "$n" ]]
}
wait_curls() { # the curls of burst, not the spawned servers
  local j
  for j in $(jobs -p); do
    [[ " ${PIDS[*]} " == *" $j "* ]] || wait "$j"
  done
}
both_generated() {
  local g
  g=$(gen)
  python3 -c "import sys; d=dict(map(int, x.split(':')) for x in '$g'.split()); sys.exit(0 if len(d)==2 and all(v>0 for v in d.values()) else 1)"
}
ok_all=1
for _ in 1 2 3 4 5; do
  burst 8 || ok_all=0
  both_generated && break
done
check "concurrent requests complete across the namespaces" test "$ok_all" = 1
check "both workers generated tokens (pid:tokens $(gen))" both_generated

kill -9 "$W1"
check "worker 1 killed: the gateway drops it (1 worker left)" wait_for 15 hq "len(j['workers'])==1"
before=$(gen)
check "requests keep completing on the other worker" burst 6
after=$(gen)
check "... and it is the one generating (pid:tokens $before → $after)" \
  python3 -c "import sys; b=dict(map(int,x.split(':')) for x in '$before'.split()); a=dict(map(int,x.split(':')) for x in '$after'.split()); sys.exit(0 if len(a)==1 and list(a)==list(b) and list(a.values())[0]>list(b.values())[0] and str(list(a)[0]) in '$pids'.split() else 1)"
finish
