#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first): hand-picked GEMM kernels re-timed beside cuBLAS. skinny_picks.py's set SET writes a
# picks file per shape of SHAPES (M,N,K; the set's picks for that M), then ROUNDS rounds of
# `bocast remeasure` each (every kernel paired with cuBLAS in one process) and a table a shape.
# Each set's question, its default shapes and its expectation (written before its first call)
# sit beside its picks in skinny_picks.py's SETS; the results folders name the calls.
#   SET=ring_depth BOCAST_GIT_SHA=<sha> bash experiments/device/picks_remeasure.sh   # 1-4 min
set -uo pipefail
[ -n "${PYTHONPATH:-}" ] || source .devbundle/unpack.sh  # once, when a script calls it
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
SET=${SET:?a set of experiments/device/skinny_picks.py: SET=NAME}
SHAPES=${SHAPES:-$(python3 experiments/device/skinny_picks.py --shapes "$SET")} || exit 2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
root=runs/$SET
mkdir -p "$root"
# shellcheck disable=SC2086
python3 experiments/device/skinny_picks.py "$root" "$SET" $SHAPES || exit 2
for shape in $SHAPES; do
  name=${shape//,/x}
  t0=$(date +%s)
  timeout "${ITEM_S:-150}" python3 -m bocast.tools.remeasure "$root/picks_$name.json" --top 50 \
    --rounds "${ROUNDS:-5}" --out "$root/remeasure_$name.json" > "$root/remeasure_$name.log" 2>&1
  echo "remeasure $name: exit $? in $(( $(date +%s) - t0 )) s"
done
tar -czf "$OUT/$SET.tar.gz" "$root"
python3 - "$root" <<'PY'
import sys
sys.path.insert(0, "experiments/device")
from store_rows import remeasure_tables  # noqa: E402
remeasure_tables(sys.argv[1])
PY
