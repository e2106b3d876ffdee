#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first): issue 38's skinny cells at N,K = 6144,4096 (M 32, 64, 128 below 0.95 on the final
# space of results/narrow_h200), one call:
# 1. What cuBLAS launches (cublas_launch.py: grid, block, cluster, registers, shared memory from
#    PyTorch's profiler) at M 16-128 there and at the other projections: how many CTAs, and
#    along which dimension its 96-wide tile lies (not established last session).
# 2. The M = 128 picks of narrow_check.sh re-timed again (its steps 2 only) and two of them under
#    Nsight Compute beside cuBLAS (profile.sh; counters on Firecracker machines only): the swap_ab
#    128 x 64 8-stage kernel (0.956) and the 64 x 96 2x1 10-stage one (0.733).
#    Expectation, written before the call: cuBLAS runs 128 CTAs (64 x 2) of a 2-CTA cluster
#    and reads DRAM at a higher rate than ours; ours wait on the producer's barriers.
# 3. The controlled M = 64 run (jobs/narrow_control.txt: the same seeds with the narrow tiles
#    fixed out) in the time left of BUDGET_S. Expectation in that file's header.
#   BOCAST_GIT_SHA=<sha> bash experiments/device/skinny_gap.sh    # under 570 s on a 16-core H200
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
BUDGET_S=${BUDGET_S:-570}
t_start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 60 python3 experiments/device/cublas_launch.py 16,6144,4096 32,6144,4096 64,6144,4096 \
  128,6144,4096 128,4096,14336 128,28672,4096 8192,4096,4096 > "$OUT/cublas_launch.json" \
  2> "$OUT/cublas_launch.err"
echo "cublas_launch: exit $? in $(( $(date +%s) - t_start )) s"
SAMPLE=0 TUNES=0 MS=128 bash experiments/device/narrow_check.sh > "$OUT/narrow_check.txt" 2>&1
tail -n 14 "$OUT/narrow_check.txt"
picks=runs/narrow_check/picks_128x6144x4096.json
if [ -f "$picks" ]; then
  PICKS=$picks INDEX=0 NAME=swap128x64 timeout 120 bash experiments/device/profile.sh
  PICKS=$picks INDEX=1 NAME=n64x96_2x1 CUBLAS=0 timeout 90 bash experiments/device/profile.sh
fi
left=$(( BUDGET_S - ($(date +%s) - t_start) ))
echo "tunes: $left s left"
JOBS=experiments/device/jobs/narrow_control.txt SEARCH_S=38 RUN_S=52 BUDGET_S=$left \
  bash experiments/device/parallel_tunes.sh > "$OUT/tunes.txt" 2>&1
python3 - "$OUT/cublas_launch.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:  # noqa: BLE001 - the table says it, the tunes still print
    rows = []
    print(f"cublas_launch: {e}")
for r in rows:
    if "elementwise" in r["kernel"] or "fill" in r["kernel"]:
        continue
    print(r["shape"], r["kernel"][:70], "grid", r.get("grid"), "block", r.get("block"),
          "cluster", r.get("cluster"), "regs", r.get("registers per thread"),
          "smem", r.get("shared memory"), f"{r['median_us']:.1f} us")
PY
tail -n 9 "$OUT/tunes.txt"
