#!/usr/bin/env bash
# Tenants and the prefix cache, tested as an attacker would (docs/SECURITY.md
# "Tenants and the prefix cache"): a gateway with an API keys file and one real
# worker; key A sends prompts holding a secret, key B probes them with the right
# and a wrong guess on /v1/chat/completions, /v1/messages and /v1/responses.
# Checks in tenant_cache_driver.py:
#   - B's cached-token usage fields are the same (0) for the right and the wrong
#     guess, while A's own repeat of the prompt is a hit (the probe would see one);
#   - B's right guess was a full prefill: the worker's computed-prompt-token counter
#     (pagoda_prompt_tokens_computed_total, read with the admin key once a heartbeat
#     newer than the request arrived) grew by every token of it — no clock involved;
#   - /metrics refuses B's key (403) and no key (401); /health hides the counters
#     from B;
#   - two keys of one sharing group (group=NAME) get each other's hits; the same
#     keys in different groups (after a reload) do not;
#   - cache_salt: one key with two salts gets no hit, with the same salt it does;
#     a salt does not reach the unsalted partition nor another key's.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
M=$(small_model) # stories260K, or its stand-in when ../shared is absent

# real keys, made as an operator would; the secrets stay in this script
for k in alice:normal bob:normal ops:normal:admin carol:normal:group=team dave:low:group=team; do
  "$GW" --hash-key "$k" --secret "tenant-secret-${k%%:*}" | grep -v '^#' >>"$TMP/keys.txt"
done
check "--hash-key writes group= and admin flags into parseable lines" \
  bash -c "grep -qE '^carol normal [0-9a-f]{64} group=team$' '$TMP/keys.txt' && grep -qE '^ops normal [0-9a-f]{64} admin$' '$TMP/keys.txt'"

HP=$(free_port); ZP=$(free_port)
URL=http://127.0.0.1:$HP
spawn "$TMP/gw.log" "$GW" --listen 127.0.0.1:$HP --worker-endpoint tcp://127.0.0.1:$ZP --keys "$TMP/keys.txt" \
  --heartbeat-ms 200 --worker-arg=--heartbeat-ms=200 --threads 1 --max-seqs 2 --kv-blocks 160 --model "m=$M" --log-level debug
ready() { curl -sf -H "Authorization: Bearer tenant-secret-ops" "$URL/health" | grep -q '"state":"ready"'; }
check "gateway up with its worker" wait_for 30 ready
python3 "$(dirname "$0")/tenant_cache_driver.py" "$URL" "$TMP/keys.txt" || N_FAIL=$((N_FAIL + 1))
if [[ $N_FAIL -gt 0 ]]; then tail -n 40 "$TMP/gw.log" | sed 's/^/# /'; fi
finish
