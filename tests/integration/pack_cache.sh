#!/usr/bin/env bash
# The packed-weight cache (issue #27, worker start-up) through real worker
# processes: first start writes DIR/packed/*.pack, a restart reads it, a
# damaged or truncated file is rejected and rewritten, a read-only folder
# only costs the cache; every text compared with a worker without a cache
# folder. Checks in pack_cache_driver.py (~5 s on a 2-layer Q4_K_M model).
source "$(dirname "$0")/../lib.sh"

GW=$BUILD/pagoda-gateway
WK=$BUILD/pagoda-worker
MK=$BUILD/pagoda-mkmodel
[[ -x $GW && -x $WK && -x $MK ]] || { fail "pagoda-gateway / pagoda-worker / pagoda-mkmodel not built in $BUILD"; finish; }
"$MK" -o "$TMP/q4km.gguf" --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --type Q4_K_M --seed 11 \
  >"$TMP/mk.log" 2>&1 || { fail "pagoda-mkmodel"; cat "$TMP/mk.log"; finish; }
export BUILD TMP MODEL_FILE=$TMP/q4km.gguf
t0=$SECONDS
PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/pack_cache_driver.py"
rc=$?
echo "# pack_cache.sh took $((SECONDS - t0)) s"
if ((rc != 0)); then
  for f in "$TMP"/*.log; do echo "# --- $f"; grep -E "WARN|ERROR|pack|registered|exit" "$f" | tail -n 20 | sed 's/^/# /'; done
fi
exit $rc
