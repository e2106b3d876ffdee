#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first), written 2026-11-29 (twentieth session): why the 64 x 96 kernel the tunes chose at
# 128x6144x4096 (v2 epilogue, walk along N, persistent) re-times 0.971 of cuBLAS with 8 stages
# and 0.858 with 10 (results/skinny_v2_v3_h200), when cuBLAS's kernel there runs 10. The three
# skinny exhaustive tables agree (8 peaks, 10-16 lower; at M 32 4 above 5 and 6). Read here
# (SASS, no GPU): the consumer's k block costs ~86-88 instructions at both depths; the
# producer is unrolled at 8, a loop with / 10 and % 10 at 10. Nsight Compute on the two twins
# (profile.sh, no cuBLAS) says where the time goes. Expectation, written before the call: the
# same DRAM bytes, lower DRAM throughput at 10, and the difference in the producer's or the
# consumers' stall reasons (not in L2 hit rate).
#   BOCAST_GIT_SHA=<sha> bash experiments/device/stages_gap.sh     # about 2 minutes
set -uo pipefail
[ -n "${PYTHONPATH:-}" ] || source .devbundle/unpack.sh
root=runs/stages_gap
mkdir -p "$root" "$OUT/stages_gap"
python3 experiments/device/skinny_picks.py "$root" cluster_base 128,6144,4096  # its G rows
picks=$root/picks_128x6144x4096.json
# the picks' indices of "G" (8 stages) and "G, 10 stages"
read -r i8 i10 < <(python3 - "$picks" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["kernels"]
print(*(next(i for i, r in enumerate(rows) if r["store"].startswith(p))
        for p in ("G: ", "G, 10 stages")))
PY
)
for pair in "g8 $i8" "g10 $i10"; do
  set -- $pair
  OUT=$OUT/stages_gap NAME=$1 PICKS=$picks INDEX=$2 CUBLAS=0 bash experiments/device/profile.sh
done
