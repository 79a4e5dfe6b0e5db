#!/usr/bin/env bash
# Stored responses that never lie (issue #37, part 4): a full disk, another
# process holding the SQLite write lock, a byte quota, one key filling its
# quota next to another key's response, /health while a store waits.
# Checks in store_faults_driver.py; the full-disk part is skipped with a
# message when `mount -t tmpfs` is refused.
source "$(dirname "$0")/../lib.sh"
GW=$BUILD/pagoda-gateway
[[ -x $GW ]] || { fail "pagoda-gateway not built in $BUILD"; finish; }
SMALL=$(small_model)
for k in a:normal b:normal; do
  "$GW" --hash-key "$k" --secret "secret-${k%%:*}" | grep -v '^#' >>"$TMP/keys.txt"
done
export BUILD TMP MODEL_FILE=$SMALL KEYS=$TMP/keys.txt
python3 "$(dirname "$0")/store_faults_driver.py"
rc=$?
if ((rc != 0)); then
  for f in "$TMP"/*.log; do echo "# --- $f"; grep -E "WARN|ERROR|store" "$f" | tail -n 20 | sed 's/^/# /'; done
fi
exit $rc
