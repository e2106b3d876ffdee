#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first): does multicasting the activations' tile to the CTAs of neighbouring N tiles (cluster
# 1x2, and 1x4 where the space has it) lift the skinny GEMMs at N,K = 6144,4096? cuBLAS runs
# every one of them in a cluster (skinny_gap.sh: M 16-64 nvjet 64xM tiles of 13-16 stages in 4x1
# clusters over 96 CTAs; M 128 96x64, 10 stages, clusters of 2 over 128 CTAs; 384 threads).
# Hypothesis, written before the call: the swap_ab deep kernels gain >= 3% from 1x2 at M 64 and
# 128 (each CTA's activation tile then comes half from its peer: L2 traffic of A halves), and
# the 64 x 48 deep kernel at M 64 likewise; refuted if the 1x2 rows sit within the 1x1 rows'
# rounds or below them. Kernels: skinny_picks.py's set "cluster" (ROUNDS rounds of bocast
# remeasure, each kernel paired with cuBLAS in one process).
#   BOCAST_GIT_SHA=<sha> bash experiments/device/skinny_cluster.sh     # about 3 minutes
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
root=runs/skinny_cluster
mkdir -p "$root"
SHAPES=${SHAPES:-"128,6144,4096 64,6144,4096 32,6144,4096 16,6144,4096"}
# shellcheck disable=SC2086
python3 experiments/device/skinny_picks.py "$root" cluster $SHAPES
for shape in $SHAPES; do
  name=${shape//,/x}
  t0=$(date +%s)
  timeout "${ITEM_S:-90}" python3 -m bocast.tools.remeasure "$root/picks_$name.json" --top 50 \
    --rounds "${ROUNDS:-5}" --out "$root/remeasure_$name.json" > "$root/remeasure_$name.log" 2>&1
  echo "remeasure $name: exit $? in $(( $(date +%s) - t0 )) s"
done
tar -czf "$OUT/skinny_cluster.tar.gz" "$root"
python3 - "$root" <<'PY'
import sys
sys.path.insert(0, "experiments/device")
from store_rows import remeasure_tables  # noqa: E402
remeasure_tables(sys.argv[1])
PY
