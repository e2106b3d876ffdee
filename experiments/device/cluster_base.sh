#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first), written 2026-11-29 (twentieth session): does a 2x1 cluster (two token tiles sharing
# one weight tile, multicast: cuBLAS's M = 128 kernel, nvjet 96x64_64x10_1x2 over a (2, 64) grid)
# lift the 64 x 96 kernel the tunes chose at 128x6144x4096 (v2 epilogue, walk along N,
# persistent, 8 stages: 0.943-0.966 in retime_gap_h200)? narrow_h200 measured 2x1 at +0.07-0.13
# over 1x1 on a base that read 0.662 (scalar, walk along M, not persistent, 10 stages), whose
# gap to the tunes' 0.966 no knob was blamed for yet: the set's one-knob rows say which.
# Expectation, written before the call: G 2x1 >= G + 0.03 (>= 0.99); of the one-knob rows the
# scalar epilogue and the walk along M cost the most (>= 0.05 each). At 8192x4096x4096 (the deep
# ring tune's 128 x 256 pick, 0.989): clusters within +-0.01 (2x1 tied 1x1 at 4096^3 before).
# Kernels: skinny_picks.py's set "cluster_base", ROUNDS rounds of bocast remeasure (each kernel
# paired with cuBLAS in one process).
#   BOCAST_GIT_SHA=<sha> bash experiments/device/cluster_base.sh     # about 4 minutes
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
root=runs/cluster_base
mkdir -p "$root"
SHAPES=${SHAPES:-128,6144,4096 8192,4096,4096}
# shellcheck disable=SC2086
python3 experiments/device/skinny_picks.py "$root" cluster_base $SHAPES
for shape in $SHAPES; do
  name=${shape//,/x}
  t0=$(date +%s)
  timeout "${ITEM_S:-150}" python3 -m bocast.tools.remeasure "$root/picks_$name.json" --top 50 \
    --rounds "${ROUNDS:-5}" --out "$root/remeasure_$name.json" > "$root/remeasure_$name.log" 2>&1
  echo "remeasure $name: exit $? in $(( $(date +%s) - t0 )) s"
done
tar -czf "$OUT/cluster_base.tar.gz" "$root"
python3 - "$root" <<'PY'
import sys
sys.path.insert(0, "experiments/device")
from store_rows import remeasure_tables  # noqa: E402
remeasure_tables(sys.argv[1])
PY
