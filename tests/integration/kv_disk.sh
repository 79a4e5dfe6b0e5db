#!/usr/bin/env bash
# The KV disk tier under faults (issue #27): kill -9 and restart served from
# disk, clean stop, corrupt and truncated block files, two workers on one
# folder, q8_0 KV in a folder of its own, a read-only and a full folder —
# every text compared with a worker
# without a disk tier. Checks in kv_disk_driver.py (~5-12 s on stories260K).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
SMALL=$(small_model) # stories260K, or its stand-in when ../shared is absent

export BUILD TMP MODEL_FILE=$SMALL
t0=$SECONDS
python3 "$(dirname "$0")/kv_disk_driver.py"
rc=$?
echo "# kv_disk.sh took $((SECONDS - t0)) s"
san=0
for f in "$TMP"/*.log; do
  if sanitizer_report "$f" >"$TMP/san"; then
    san=1; echo "# --- $f"; sed 's/^/# /' "$TMP/san"
  fi
done
if ((san)); then
  echo "not ok - no sanitizer report in the gateway's and workers' logs"; rc=1
else
  echo "ok - no sanitizer report in the gateway's and workers' logs"
fi
if ((rc != 0)); then
  for f in "$TMP"/*.log; do echo "# --- $f"; grep -E "WARN|ERROR|disk|registered|exit" "$f" | tail -n 20 | sed 's/^/# /'; done
fi
exit $rc
