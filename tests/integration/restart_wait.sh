#!/usr/bin/env bash
# Requests wait while a local worker restarts (issue #15): a supervised worker
# whose load is slower than --replica-grace (TEST ONLY env
# PAGODA_TEST_LOAD_SLEEP_MS) is killed with -9 under load and every request
# completes after its restart; a worker that can never start (garbage GGUF)
# ends FAILED with 503 model_failed; a model with no local worker still gets
# the grace's 503. Checks in restart_wait_driver.py.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent

export BUILD TMP MODEL_FILE=$SMALL HP=$(free_port) ZP=$(free_port)
t0=$SECONDS
python3 "$(dirname "$0")/restart_wait_driver.py"
rc=$?
echo "# restart_wait.sh took $((SECONDS - t0)) s"
if sanitizer_report "$TMP/gateway.log" >"$TMP/san" || sanitizer_report "$TMP/solo.log" >>"$TMP/san"; then
  fail "no sanitizer report in the gateway's and workers' logs"; sed 's/^/# /' "$TMP/san"; rc=1
else
  ok "no sanitizer report in the gateway's and workers' logs"
fi
if ((rc != 0)); then
  for f in "$TMP"/*.log; do echo "# --- $f"; grep -E "WARN|ERROR|removed|resum|restart|registered|exit" "$f" | tail -n 40 | sed 's/^/# /'; done
fi
exit $rc
