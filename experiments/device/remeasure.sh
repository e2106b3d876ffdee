#!/usr/bin/env bash
# On the H100 machine (carry .devbundle, and the stores or --picks files named): re-measure the
# best kernels of each item beside cuBLAS in one process (bocast/tools/remeasure.py), one JSON per
# item under $OUT, then a table per item. ITEMS lists NAME=PATH[,PATH...] (stores or picks):
#   ITEMS="gemm_4096=.devcarry/picks/gemm_4096_4096_4096.json" bash experiments/device/remeasure.sh
set -uo pipefail
[ -n "${PYTHONPATH:-}" ] || source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
for item in $ITEMS; do
  name=${item%%=*}; paths=${item#*=}
  timeout "${ITEM_S:-300}" python3 -m bocast.tools.remeasure ${paths//,/ } --top "${TOP:-10}" \
      --rounds "${ROUNDS:-5}" --out "$OUT/remeasure_$name.json" > "/tmp/remeasure_$name.log" 2>&1
  echo "== $name: exit $?"; tail -14 "/tmp/remeasure_$name.log"
done
