#!/usr/bin/env bash
# LoRA adapters loaded and unloaded at run time (gateway/gateway_lora.h)
# against real processes: a gateway with an admin key and a user key whose
# local worker serves stories260K (or its stand-in) with one start-up
# adapter; adapters from `pagoda-mkmodel --lora-for`. Checks:
#   - POST /admin/models/base/loras: no key 401, a user key 403; the adapter's
#     greedy text equals `pagoda-run --lora`; /v1/models and /lora-adapters
#     list it; a taken name, an unknown model, a bad scale → 4xx;
#   - bad paths → 400 param "path": missing, relative, a directory, not GGUF,
#     a GGUF model, a symlink; an adapter for another architecture or shape
#     → 400 with the worker's message; a file only another user may read (a
#     second gateway run as nobody; skipped when not root or no setpriv);
#   - DELETE while a streamed request using the adapter runs (the worker's
#     steps held with the PAGODA_TEST_STEP_HOLD hook once the gateway shows
#     the request assigned, so the unload lands mid-request whatever the
#     speed): 200, new requests → 404 model_not_found at once, then the
#     stream ends with the same text as the adapter alone;
#   - vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter;
#   - unloading the start-up adapter, then kill -9 of the worker: the
#     restarted worker has the run-time adapter (its text) and not the
#     unloaded start-up one (loading that name again succeeds).
#   - a worker that never answers (kill -STOP; a second gateway with
#     --lora-timeout 2): the load → 504 timeout, the adapter is not served,
#     another model keeps serving; after kill -CONT the worker undoes the
#     late load (its log), the base serves, and the name loads again (200).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
MK=$BUILD/pagoda-mkmodel
RUN=$BUILD/pagoda-run
[[ -x $GW && -x $MK && -x $RUN ]] || { fail "pagoda-gateway / pagoda-mkmodel / pagoda-run not built in $BUILD"; finish; }
BASE=$(small_model) || finish
"$MK" --lora-for "$BASE" -o "$TMP/boot.gguf" --lora-rank 8 --seed 3 >/dev/null 2>&1 || { fail "mkmodel --lora-for (boot)"; finish; }
"$MK" --lora-for "$BASE" -o "$TMP/rt.gguf" --lora-rank 16 --lora-alpha 8 --type F16 --seed 4 >/dev/null 2>&1 ||
  { fail "mkmodel --lora-for (rt)"; finish; }
"$MK" --lora-for "$BASE" -o "$TMP/vl.gguf" --lora-rank 4 --seed 5 >/dev/null 2>&1 || { fail "mkmodel --lora-for (vl)"; finish; }
"$MK" -o "$TMP/qwen.gguf" --arch qwen2 --dim 96 --layers 2 --heads 4 --ffn 128 --vocab 600 --seed 6 >/dev/null 2>&1 &&
  "$MK" --lora-for "$TMP/qwen.gguf" -o "$TMP/qwen-lora.gguf" --lora-rank 4 --seed 7 >/dev/null 2>&1 ||
  { fail "mkmodel: a qwen2 model and its adapter"; finish; }
"$MK" -o "$TMP/wide.gguf" --dim 96 --layers 2 --heads 4 --ffn 128 --vocab 600 --seed 8 >/dev/null 2>&1 &&
  "$MK" --lora-for "$TMP/wide.gguf" -o "$TMP/wide-lora.gguf" --lora-rank 4 --seed 9 >/dev/null 2>&1 ||
  { fail "mkmodel: a llama model of another width and its adapter"; finish; }

"$GW" --hash-key user:normal --secret user-secret | grep -v '^#' >"$TMP/keys.txt"
"$GW" --hash-key ops:normal:admin --secret ops-secret | grep -v '^#' >>"$TMP/keys.txt"
hp=$(free_port); zp=$(free_port)
URL=http://127.0.0.1:$hp
PAGODA_TEST_STEP_HOLD=$TMP/hold spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$hp --worker-endpoint tcp://127.0.0.1:$zp \
  --keys "$TMP/keys.txt" --model "base=$BASE" --lora "boot=$TMP/boot.gguf:1.5" --max-seqs 4 --threads 1 \
  --progress-timeout-ms 600000 --worker-arg=--exact-matmul --worker-arg=--kv-type=f32
ADM=(-H 'Authorization: Bearer ops-secret')
USR=(-H 'Authorization: Bearer user-secret')
py() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
health() { curl -sf "${ADM[@]}" "$URL/health"; }
ready() { health | py "j['models']['base']['replicas']==1"; }
check "gateway up, its worker registered" wait_for 90 ready

req() { # METHOD PATH [BODY] [curl args...] → $CODE, body in $TMP/body
  local m=$1 p=$2 b=${3:-}; shift 3 2>/dev/null || shift $#
  CODE=$(curl -s -o "$TMP/body" -w '%{http_code}' -X "$m" "$URL$p" -H 'Content-Type: application/json' ${b:+-d "$b"} "$@")
}
err_is() { # STATUS [PARAM] [CODE]: the last answer is an OpenAI-shaped error
  [[ $CODE == "$1" ]] && py "set(j['error'])=={'message','type','param','code'} ${2:+and j['error']['param']=='$2'} ${3:+and j['error']['code']=='$3'}" <"$TMP/body"
}
load() { req POST /admin/models/base/loras "$1" "${ADM[@]}"; }

N=24
comp() { # MODEL PROMPT → text on stdout; status in $CODE
  local b
  b=$(python3 -c 'import json,sys; print(json.dumps({"model":sys.argv[1],"prompt":sys.argv[2],"max_tokens":int(sys.argv[3]),"temperature":0}))' "$1" "$2" "$N")
  req POST /v1/completions "$b" "${USR[@]}"
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'], end='')" "$TMP/body" 2>/dev/null
}
ref() { "$RUN" -m "$BASE" -p "$1" -n $N --temp 0 --exact-matmul --kv-type f32 --threads 1 "${@:2}" 2>/dev/null; }
models() { curl -sf "${USR[@]}" "$URL/v1/models" | python3 -c "import json,sys; print(' '.join(m['id'] for m in json.load(sys.stdin)['data']))"; }
P="Once upon a time"
R0=$(ref "$P"); RRT=$(ref "$P" --lora "rt=$TMP/rt.gguf:0.5"); RVL=$(ref "$P" --lora "vl=$TMP/vl.gguf")
RBOOT=$(ref "$P" --lora "boot=$TMP/boot.gguf:1.5")
[[ -n $R0 && $R0 != "$RRT" && $R0 != "$RVL" ]] || fail "pagoda-run: the adapters change the base's text (else the test shows nothing)"

# --- auth -------------------------------------------------------------------
BODY_RT="{\"name\":\"rt\",\"path\":\"$TMP/rt.gguf\",\"scale\":0.5}"
req POST /admin/models/base/loras "$BODY_RT"
check "load without a key → 401" err_is 401
req POST /admin/models/base/loras "$BODY_RT" "${USR[@]}"
check "load with a non-admin key → 403" err_is 403
req DELETE /admin/models/base/loras/boot "" "${USR[@]}"
check "unload with a non-admin key → 403" err_is 403
req POST /v1/load_lora_adapter "{\"lora_name\":\"x\",\"lora_path\":\"$TMP/vl.gguf\"}" "${USR[@]}"
check "vLLM load with a non-admin key → 403" err_is 403

# --- bad input --------------------------------------------------------------
mkdir -p "$TMP/adir"; echo "not a model" >"$TMP/text.gguf"; ln -s "$TMP/rt.gguf" "$TMP/link.gguf"
for c in "missing:$TMP/nope.gguf" "relative:rt.gguf" "a directory:$TMP/adir" "not GGUF:$TMP/text.gguf" \
         "a GGUF model, not an adapter:$BASE" "a symlink:$TMP/link.gguf"; do
  load "{\"name\":\"bad\",\"path\":\"${c#*:}\"}"
  check "path ${c%%:*} → 400 param path" err_is 400 path
done
check "a refused file's content is never echoed" bash -c "! grep -q 'not a model' '$TMP/body'"
load "{\"name\":\"bad\",\"path\":\"$TMP/qwen-lora.gguf\"}"
check "an adapter of another architecture → 400 with the worker's message" bash -c \
  "[[ $CODE == 400 ]] && grep -q 'qwen2' '$TMP/body' && grep -q 'general.architecture' '$TMP/body'"
load "{\"name\":\"bad\",\"path\":\"$TMP/wide-lora.gguf\"}"
check "an adapter of another shape → 400 with the worker's message" bash -c "[[ $CODE == 400 ]] && grep -q 'bad' '$TMP/body'"
check "refused adapters are not listed" test "$(models)" == 'base boot'
load "{\"name\":\"boot\",\"path\":\"$TMP/rt.gguf\"}"
check "a name in use → 400 adapter_exists" err_is 400 lora_name adapter_exists
load "{\"name\":\"base\",\"path\":\"$TMP/rt.gguf\"}"
check "a model's name → 400 adapter_exists" err_is 400 lora_name adapter_exists
load "{\"name\":\"bad name!\",\"path\":\"$TMP/rt.gguf\"}"
check "a name outside the model-name rules → 400" err_is 400 name
load "{\"name\":\"x\",\"path\":\"$TMP/rt.gguf\",\"scale\":101}"
check "scale 101 → 400" err_is 400 scale
req POST /admin/models/nope/loras "$BODY_RT" "${ADM[@]}"
check "an unknown model → 404 model_not_found" err_is 404 model model_not_found
req DELETE /admin/models/base/loras/nope "" "${ADM[@]}"
check "unloading an unknown adapter → 404" err_is 404

# --- load at run time -------------------------------------------------------
load "$BODY_RT"
check "load rt → 200" bash -c "[[ $CODE == 200 ]] && python3 -c \"import json,sys; j=json.load(open('$TMP/body')); sys.exit(0 if j['name']=='rt' and j['workers']==1 else 1)\""
check "/v1/models lists rt after base's start-up adapter" test "$(models)" == 'base boot rt'
# ids are table indexes that never move: refused loads used some
adapters() { curl -sf "${USR[@]}" "$URL/lora-adapters" | py "[(a['path'],a['scale']) for a in j]==[('boot',1.5),('rt',0.5)] and j[0]['id']==0 and j[1]['id']>0"; }
check "GET /lora-adapters lists rt with its scale after boot (id 0)" adapters
RT_ID=$(curl -sf "${USR[@]}" "$URL/lora-adapters" | python3 -c "import json,sys; print(json.load(sys.stdin)[1]['id'])")
req POST /v1/completions "{\"model\":\"base\",\"prompt\":\"$P\",\"max_tokens\":$N,\"temperature\":0,\"lora\":[{\"id\":$RT_ID,\"scale\":0.5}]}" "${USR[@]}"
t=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'], end='')" "$TMP/body" 2>/dev/null)
check "llama.cpp's lora field with rt's id on base = pagoda-run --lora rt.gguf:0.5" test "$t" == "$RRT"
t=$(comp rt "$P"); check "model rt = pagoda-run --lora rt.gguf:0.5" test "$t" == "$RRT"
t=$(comp boot "$P"); check "the start-up adapter still = pagoda-run --lora boot.gguf:1.5" test "$t" == "$RBOOT"
load "$BODY_RT"
check "loading rt again → 400 adapter_exists" err_is 400 lora_name adapter_exists

# --- unload while a streamed request runs -----------------------------------
cat >"$TMP/stream.py" <<'PY'
import json, sys, urllib.request
url, model, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
body = json.dumps({"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True}).encode()
rq = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json",
                            "Authorization": "Bearer user-secret"})
text = ""
with urllib.request.urlopen(rq, timeout=300) as r:
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for c in json.loads(line[6:]).get("choices", []):
            text += c.get("text") or ""
sys.stdout.write(text)
PY
assigned() { curl -sf "${ADM[@]}" "$URL/admin/workers" | py "sum(w['assigned'] for w in j['workers'] if w['model']=='base')==1"; }
touch "$TMP/hold"
python3 "$TMP/stream.py" "$URL" rt "$P" "$N" >"$TMP/stream.out" 2>"$TMP/stream.err" &
SPY=$!
check "the streamed request is on the worker (its steps held)" wait_for 60 assigned
req DELETE /admin/models/base/loras/rt "" "${ADM[@]}"
check "DELETE rt while its request runs → 200" bash -c "[[ $CODE == 200 ]]"
comp rt "$P" >/dev/null
check "a new request for rt → 404 model_not_found at once" err_is 404 model model_not_found
check "/v1/models no longer lists rt" test "$(models)" == 'base boot'
rm -f "$TMP/hold"
wait $SPY
check "the running request ends with the text of rt alone" test "$(cat "$TMP/stream.out")" == "$RRT"
t=$(comp base "$P"); check "the base model is unaffected" test "$t" == "$R0"

# --- vLLM's names -----------------------------------------------------------
req POST /v1/load_lora_adapter "{\"lora_name\":\"vl\",\"lora_path\":\"$TMP/vl.gguf\"}" "${ADM[@]}"
check "POST /v1/load_lora_adapter → 200 'Success: ...'" bash -c "[[ $CODE == 200 ]] && grep -q \"^Success: LoRA adapter 'vl' added\" '$TMP/body'"
t=$(comp vl "$P"); check "model vl = pagoda-run --lora vl.gguf" test "$t" == "$RVL"
req POST /v1/load_lora_adapter "{\"lora_name\":\"vl2\",\"lora_path\":\"$TMP/vl.gguf\",\"base_model_name\":\"nope\"}" "${ADM[@]}"
check "vLLM load with an unknown base_model_name → 404" err_is 404 model model_not_found
req POST /v1/unload_lora_adapter '{"lora_name":"vl"}' "${ADM[@]}"
check "POST /v1/unload_lora_adapter → 200 'Success: ...'" bash -c "[[ $CODE == 200 ]] && grep -q \"^Success: LoRA adapter 'vl' removed\" '$TMP/body'"
comp vl "$P" >/dev/null
check "after the vLLM unload: model vl → 404" err_is 404 model model_not_found
req POST /v1/unload_lora_adapter '{"lora_name":"vl"}' "${ADM[@]}"
check "vLLM unload of an unknown adapter → 404" err_is 404 lora_name

# --- the restarted worker has the current set --------------------------------
req DELETE /admin/models/base/loras/boot "" "${ADM[@]}"
check "unload the start-up adapter boot → 200" bash -c "[[ $CODE == 200 ]]"
load "$BODY_RT"
check "load rt again → 200" bash -c "[[ $CODE == 200 ]]"
WPID=$(curl -sf "${ADM[@]}" "$URL/admin/workers" | python3 -c "import json,sys; print([w['pid'] for w in json.load(sys.stdin)['workers'] if w['model']=='base'][0])")
kill -9 "$WPID"
back() { curl -sf "${ADM[@]}" "$URL/admin/workers" | py "[w for w in j['workers'] if w['model']=='base' and w['pid'] not in (0, $WPID) and w['id']]"; }
check "kill -9: the supervisor starts a new worker, which registers" wait_for 120 back
t=$(comp rt "$P"); check "the restarted worker serves rt = pagoda-run --lora rt.gguf:0.5" test "$t" == "$RRT"
load "{\"name\":\"boot\",\"path\":\"$TMP/boot.gguf\",\"scale\":1.5}"
check "the restarted worker came without the unloaded boot (loading it again → 200)" bash -c "[[ $CODE == 200 ]]"
t=$(comp boot "$P"); check "boot again = pagoda-run --lora boot.gguf:1.5" test "$t" == "$RBOOT"

# --- a worker that never answers: 504 after --lora-timeout, undone -----------
# A second gateway, --lora-timeout 2: base's worker is stopped (SIGSTOP), so
# it cannot answer the LORA; a heartbeat of 20 s keeps the gateway from
# declaring it dead (3 silent intervals) before the load's deadline, which
# would answer 503 instead. Model "other" (its own worker) keeps serving.
hp2=$(free_port); zp2=$(free_port)
URL2=http://127.0.0.1:$hp2
spawn "$TMP/gw2.log" "$GW" --listen 127.0.0.1:$hp2 --worker-endpoint tcp://127.0.0.1:$zp2 --keys "$TMP/keys.txt" \
  --model "base=$BASE" --model "other=$BASE" --threads 1 --lora-timeout 2 --heartbeat-ms 20000 \
  --worker-arg=--exact-matmul --worker-arg=--kv-type=f32
ready2() { curl -sf "${ADM[@]}" "$URL2/health" | py "j['models']['base']['replicas']==1 and j['models']['other']['replicas']==1"; }
check "second gateway (--lora-timeout 2) up, two workers" wait_for 90 ready2
WPID2=$(curl -sf "${ADM[@]}" "$URL2/admin/workers" | python3 -c "import json,sys; print([w['pid'] for w in json.load(sys.stdin)['workers'] if w['model']=='base'][0])")
comp2() { # MODEL → text on stdout, status in $CODE
  local u=$URL; URL=$URL2; comp "$1" "$P"; URL=$u
}
if [[ $WPID2 =~ ^[0-9]+$ ]] && kill -STOP "$WPID2"; then
  stopped() { [[ $(awk '{print $3}' "/proc/$WPID2/stat" 2>/dev/null) == T ]]; }
  check "base's worker is stopped (state T)" wait_for 30 stopped
  URL_SAVE=$URL; URL=$URL2
  load "{\"name\":\"rt\",\"path\":\"$TMP/rt.gguf\",\"scale\":0.5}"
  URL=$URL_SAVE
  echo "# the load's answer: $CODE $(head -c 300 "$TMP/body")"
  check "load on a stopped worker → 504 timeout naming --lora-timeout" bash -c \
    "[[ $CODE == 504 ]] && python3 -c \"import json,sys; e=json.load(open('$TMP/body'))['error']; sys.exit(0 if e['code']=='timeout' and 'within 2 s (--lora-timeout)' in e['message'] else 1)\""
  t=$(comp2 other); check "while base's worker is stopped, model other serves (= pagoda-run)" test "$t" == "$R0"
  check "the timed-out adapter is not listed" bash -c \
    "curl -sf -H 'Authorization: Bearer user-secret' '$URL2/v1/models' | python3 -c \"import json,sys; sys.exit(0 if sorted(m['id'] for m in json.load(sys.stdin)['data'])==['base','other'] else 1)\""
  comp2 rt >/dev/null; check "a request for the timed-out adapter → 404 model_not_found" err_is 404 model model_not_found
  kill -CONT "$WPID2"
  # resumed, the worker reads the LORA (loads rt, its late ACK ignored), then
  # the gateway's undo (unloads it): wait for the unload in its log
  undone() { grep -q 'adapter rt unloaded' "$TMP/gw2.log"; }
  check "kill -CONT: the worker undoes the late load (its log: adapter rt unloaded)" wait_for 60 undone
  t=$(comp2 base); check "base serves again, = pagoda-run" test "$t" == "$R0"
  URL_SAVE=$URL; URL=$URL2
  load "{\"name\":\"rt\",\"path\":\"$TMP/rt.gguf\",\"scale\":0.5}"
  URL=$URL_SAVE
  check "loading rt again → 200 (the worker no longer holds it)" bash -c "[[ $CODE == 200 ]]"
  t=$(comp2 rt); check "rt = pagoda-run --lora rt.gguf:0.5" test "$t" == "$RRT"
  t=$(comp2 other); check "other still = pagoda-run" test "$t" == "$R0"
  check "no worker of the second gateway restarted" bash -c "! grep -q 'restarting in' '$TMP/gw2.log'"
else
  fail "the second gateway's base worker pid ($WPID2) could not be stopped"
fi

# --- a file only another user may read ---------------------------------------
if ! command -v setpriv >/dev/null; then
  skip "setpriv is missing: no second user"
elif [[ $(id -u) -ne 0 ]]; then
  skip "not root: cannot run a gateway as another user (setpriv --reuid=nobody)"
else
  cp "$TMP/vl.gguf" "$TMP/private.gguf"; chmod 600 "$TMP/private.gguf"
  chmod 755 "$TMP"
  np=$(free_port); nzp=$(free_port)
  mkdir -p "$TMP/nb"; chown nobody "$TMP/nb"
  XDG_STATE_HOME=$TMP/nb spawn "$TMP/nobody.log" setpriv --reuid=nobody --regid=nogroup --clear-groups "$GW" \
    --listen 127.0.0.1:$np --worker-endpoint tcp://127.0.0.1:$nzp --admin-open
  up() { curl -sf "http://127.0.0.1:$np/health" >/dev/null || [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$np/health") == 503 ]]; }
  if wait_for 30 up; then
    CODE=$(curl -s -o "$TMP/body" -w '%{http_code}' -X POST "http://127.0.0.1:$np/admin/models/base/loras" \
      -H 'Content-Type: application/json' -d "{\"name\":\"p\",\"path\":\"$TMP/private.gguf\"}")
    check "a file only root may read, gateway run as nobody → 400 not readable" bash -c \
      "[[ $CODE == 400 ]] && grep -q 'not readable' '$TMP/body'"
  else
    fail "a gateway run as nobody did not start: $(tail -3 "$TMP/nobody.log")"
  fi
fi
finish
