#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first), written 2026-11-29 (twentieth session): is the ring's depth or its being a power of
# two what costs? The 64 x 96 kernel the tunes chose at 128x6144x4096 re-timed 0.971 at 8 stages
# and 0.858 at 10 (cluster_base.sh); Nsight Compute: 18.30 against 20.16 us, the same bytes
# (stages_gap.sh); its SASS has the same ~86-88 instructions a k block at both depths. One
# kernel at every depth it fits (skinny_picks.py set "ring_depth"; 64 x 48 reaches 16 stages),
# ROUNDS rounds of bocast remeasure (each paired with cuBLAS in one process).
# Expectation, written before the call: powers of two lead (16 >= 8 > 10, 12 on 64 x 48; 4 >
# 5, 6 on 64 x 96), i.e. the cost follows S being a power of two, not the depth.
#   BOCAST_GIT_SHA=<sha> bash experiments/device/ring_depth.sh     # about 2 minutes
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
root=runs/ring_depth
mkdir -p "$root"
SHAPES=${SHAPES:-128,6144,4096 64,6144,4096}
# shellcheck disable=SC2086
python3 experiments/device/skinny_picks.py "$root" ring_depth $SHAPES
for shape in $SHAPES; do
  name=${shape//,/x}
  t0=$(date +%s)
  timeout "${ITEM_S:-150}" python3 -m bocast.tools.remeasure "$root/picks_$name.json" --top 50 \
    --rounds "${ROUNDS:-5}" --out "$root/remeasure_$name.json" > "$root/remeasure_$name.log" 2>&1
  echo "remeasure $name: exit $? in $(( $(date +%s) - t0 )) s"
done
tar -czf "$OUT/ring_depth.tar.gz" "$root"
python3 - "$root" <<'PY'
import sys
sys.path.insert(0, "experiments/device")
from store_rows import remeasure_tables  # noqa: E402
remeasure_tables(sys.argv[1])
PY
