#!/usr/bin/env bash
# Files only their owner reads (issue #37, part 3): the disk tier, the pack
# cache and the state dir against a second local user (nobody, via setpriv)
# and against anyone who can write into the folder. Checks in
# private_files_driver.py; skipped with a message without setpriv or root.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/../lib_proc.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
[[ -x $GW && -x $WK ]] || { fail "pagoda-gateway / pagoda-worker not built in $BUILD"; finish; }
command -v setpriv >/dev/null || { skip "setpriv is missing: no second user to attack with"; finish; }
[[ $(id -u) -eq 0 ]] || { skip "not root: cannot become a second user (setpriv --reuid=nobody)"; finish; }
id nobody >/dev/null 2>&1 || { skip "no user 'nobody'"; finish; }
SMALL=$(small_model)
chmod 755 "$TMP" # the attacker may walk up to the folders; what is inside must stop them
export BUILD TMP MODEL_FILE=$SMALL
python3 "$(dirname "$0")/private_files_driver.py"
rc=$?
if ((rc != 0)); then
  for f in "$TMP"/*.log; do echo "# --- $f"; grep -E "WARN|ERROR|disk|refus|exit" "$f" | tail -n 20 | sed 's/^/# /'; done
fi
exit $rc
