# fake_server_lib.sh — shell helpers of the client tests that drive
# tests/bench/fake_server.mjs (tests/integration/bench_client.sh for
# pagoda-bench, loadgen_client.sh for loadgen.py). Source it after
# tests/lib.sh (it uses free_port, spawn, wait_for, ok, fail, finish, TMP
# and ROOT).

FAKE=$ROOT/tests/bench/fake_server.mjs
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3

# fake NAME ARGS... : start a fake server, set PORT_<NAME> to its port.
fake() {
  local name=$1; shift
  local port; port=$(free_port)
  spawn "$TMP/fake_$name.log" node "$FAKE" --port "$port" "$@"
  if ! wait_for 10 curl -sf "http://127.0.0.1:$port/stats"; then
    fail "fake server $name did not start"; cat "$TMP/fake_$name.log"; finish
  fi
  printf -v "PORT_$name" '%s' "$port"
}
# jget FILE EXPR : evaluate a Python expression on the JSON document d.
jget() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# jcheck DESC FILE EXPR : ok when the Python expression is true.
jcheck() {
  local r; r=$(jget "$2" "$3" 2>&1)
  if [[ $r == True ]]; then ok "$1"; else fail "$1 ($3 -> $r)"; fi
}
