#!/usr/bin/env bash
# Chaos test: kill -9 / SIGSTOP workers and restart the gateway while
# requests are in flight (see tests/integration/chaos_driver.py for the
# scenarios and what each one asserts). Real processes: pagoda-gateway with
# two supervised stories260K replicas, plus one worker started by hand.
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent

export BUILD TMP MODEL_FILE=$SMALL HP=$(free_port) ZP=$(free_port)
t0=$SECONDS
python3 "$(dirname "$0")/chaos_driver.py"
rc=$?
echo "# chaos.sh took $((SECONDS - t0)) s"
if ((rc != 0)); then
  for f in "$TMP"/*.log; do echo "# --- $f"; grep -E "WARN|ERROR|removed|resum|back in|restart|DRAIN|drain" "$f" | tail -n 40 | sed 's/^/# /'; done
fi
exit $rc
