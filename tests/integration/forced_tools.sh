#!/usr/bin/env bash
# A forced tool call (tool_choice "required" or a named function) together with
# a response_format or a grammar, over real HTTP against a real gateway and
# worker on a tiny random-weight model with the real Qwen2.5 chat template (made
# by pagoda-mkmodel; #22: these hung until --request-timeout because
# the worker's refusal carried an HTTP status where the wire wants a typed
# cause). Each request must answer well before the 120 s request timeout
# (curl gives up after 30 s):
#   - response_format text / json_object / json_schema: 200 with the forced
#     call (docs/API.md: the call's grammar decides the output), stream or not;
#   - grammar: 400 naming `grammar`; a response_format schema that does not
#     compile: still 400;
#   - a strict tool whose schema does not compile, forced: 400 (the worker's
#     refusal reaches the client);
#   - the server keeps serving.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
[[ -x $GW && -x $MK ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
check "mkmodel: tiny model with the Qwen2.5 template" "$MK" -o "$TMP/qwen.gguf" --dim 64 --layers 2 \
  --heads 4 --kv-heads 2 --ffn 128 --ctx 2048 --type F32 --seed 11 \
  --chat-template "$ROOT/tests/common/text/chat_templates/qwen2.5.jinja"

HP=$(free_port); ZP=$(free_port)
URL=http://127.0.0.1:$HP
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP \
  --model "qwen=$TMP/qwen.gguf" --max-seqs 4 --request-timeout 120
GPID=$SPAWNED
ready() { curl -sf "$URL/health" | grep -q '"replicas":1'; }
check "gateway up, local worker registered" wait_for 20 ready

TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}}}]'
STRICT_BAD='[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"not":{"type":"integer"}}}}}}]'
NAMED='{"type":"function","function":{"name":"get_weather"}}'
SCHEMA='{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}}}'

# post NAME BODY → $CODE, body in $TMP/NAME.out
post() {
  CODE=$(curl -s -m 30 -o "$TMP/$1.out" -w '%{http_code}' "$URL/v1/chat/completions" \
    -H 'Content-Type: application/json' -d "$2")
}
body() { # tool_choice extra [tools]
  printf '{"model":"qwen","max_tokens":120,"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":%s,"tool_choice":%s%s}' \
    "${3:-$TOOLS}" "$1" "$2"
}
# a non-streamed answer with exactly the forced call(s), arguments matching the tool
calls_ok() {
  python3 - "$TMP/$1.out" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
c = j["choices"][0]
assert c["finish_reason"] == "tool_calls", c
calls = c["message"]["tool_calls"]
assert calls and c["message"]["content"] is None
for t in calls:
    assert t["type"] == "function" and t["id"].startswith("call_")
    assert t["function"]["name"] == "get_weather"
    a = json.loads(t["function"]["arguments"])
    assert set(a) == {"city", "days"} and isinstance(a["city"], str) and len(a["city"]) <= 12
    assert type(a["days"]) is int and 1 <= a["days"] <= 7
EOF
}
# a streamed answer: tool_calls deltas, finish_reason tool_calls, no error event, [DONE] last
stream_ok() {
  python3 - "$TMP/$1.out" <<'EOF'
import json, sys
lines = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert lines and lines[-1] == "[DONE]", lines[-3:]
chunks = [json.loads(l) for l in lines[:-1]]
assert not any("error" in c for c in chunks)
fins = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
assert fins == ["tool_calls"], fins
names = [t["function"].get("name") for c in chunks for ch in c["choices"]
         for t in ch["delta"].get("tool_calls") or [] if t.get("function", {}).get("name")]
assert names and set(names) == {"get_weather"}, names
EOF
}
call_ok() { [[ $CODE == 200 ]] && calls_ok "$1"; }
streamed_ok() { [[ $CODE == 200 ]] && stream_ok "$1"; }
is_400() { # param
  [[ $CODE == 400 ]] && python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['error']; assert set(e)=={'message','type','param','code'} and e['type']=='invalid_request_error' and e['param']==sys.argv[2]" "$TMP/$1.out" "$2"
}

for rf in '{"type":"text"}' '{"type":"json_object"}' "$SCHEMA"; do
  t=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['type'])" "$rf")
  post req_$t "$(body '"required"' ",\"response_format\":$rf")"
  check "tool_choice required + response_format $t: 200 with the forced call ($CODE)" \
    call_ok req_$t
  post named_$t "$(body "$NAMED" ",\"response_format\":$rf,\"parallel_tool_calls\":false")"
  check "named tool_choice + response_format $t: 200 with the forced call ($CODE)" \
    call_ok named_$t
  post stream_$t "$(body '"required"' ",\"response_format\":$rf,\"stream\":true")"
  check "streamed, tool_choice required + response_format $t: tool_calls deltas and [DONE] ($CODE)" \
    streamed_ok stream_$t
done

post grammar "$(body "$NAMED" ',"grammar":"root ::= \"x\""')"
check "named tool_choice + grammar: 400 naming grammar ($CODE)" is_400 grammar grammar
post grammar_stream "$(body '"required"' ',"grammar":"root ::= \"x\"","stream":true')"
check "streamed, tool_choice required + grammar: 400 before the stream starts ($CODE)" is_400 grammar_stream grammar
post bad_format "$(body '"required"' ',"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"not":{}}}}')"
check "forced call + a response_format schema that does not compile: still 400 ($CODE)" \
  is_400 bad_format response_format.json_schema.schema
post bad_schema '{"model":"qwen","max_tokens":50,"messages":[{"role":"user","content":"hi"}],"tools":'"$STRICT_BAD"',"tool_choice":"required"}'
check "forced strict tool whose schema does not compile: 400 at once ($CODE)" \
  bash -c "[[ $CODE == 400 ]] && grep -q \"'not'\" '$TMP/bad_schema.out'"
post after '{"model":"qwen","max_tokens":8,"messages":[{"role":"user","content":"Once upon a time"}]}'
check "the server keeps serving ($CODE)" test "$CODE" = 200
check "no malformed message between worker and gateway" bash -c "! grep -q 'malformed' '$TMP/gw.log'"
stop_and_check "gateway (and its worker)" "$GPID" "$TMP/gw.log"
[[ $N_FAIL -gt 0 ]] && tail -n 30 "$TMP/gw.log" | sed 's/^/# /'
finish
