#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first): space v3's narrow N tiles (bn 48 and 96 for GEMMs and GEMV of M <= 128, unswapped:
# bocast/space/operators/_hopper_narrow.py).
# Hypothesis, written before the call: at M = 128, N,K = 6144,4096 (the one cell of issue 38's
# skinny matrix below 0.95: tunes 0.88-0.92) every tile of our space gives 96 CTAs for 132 SMs
# (0.73 of a wave); cuBLAS runs nvjet 96x64_64x10_1x2 there (fresh_skinny_h200): 96-column
# tiles, 128 CTAs. A 64 x 96 tile in a 2x1 cluster (the two M tiles share B's tile, multicast)
# with a 10-stage ring should re-time at >= 1.0 of cuBLAS, above the swap_ab 128 x 64 deep
# kernel's 0.974 (deep_ring_h200) and its own 6-stage control; at M = 64, a 64 x 48 tile (128
# CTAs) likewise above the swap_ab 64 x 64 deep kernel (0.940). Refuted if the narrow kernels
# sit within the swap analog's rounds or below it.
# 1. Correctness: random narrow configurations (--fix bn=48 --fix bn=96, every other knob free;
#    seeded, SAMPLE per shape, MEASURE_BATCH_S a batch) of each GEMM in CHECKS (100,1000,4040:
#    ragged M, N and K; 128,6144,4096), each checked against float64.
# 2. Re-timings with cuBLAS (`bocast remeasure`, ROUNDS rounds, each kernel paired with cuBLAS
#    in one process) at M 128 and 64, N,K = 6144,4096: skinny_picks.py's set "narrow".
# 3. The default command (`bocast tune gemm --shape M,N,K`, 64 trials, warm start auto with an
#    empty records library; space auto takes v3 at M >= 64) of JOBS (jobs/narrow.txt), in the
#    time left of BUDGET_S.
#   bash experiments/device/narrow_check.sh                # under 560 s on a 16-core H200
#   TUNES=0 bash experiments/device/narrow_check.sh        # 1 and 2 only (about 3 minutes)
# Everything lands under $OUT (narrow_check.tar.gz: logs, records, picks, re-timings;
# parallel_tunes.tar.gz and tunes.txt: the tunes).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
CHECKS=${CHECKS:-"100,1000,4040 128,6144,4096"}
MS=${MS:-"128 64"} SAMPLE=${SAMPLE:-16} ROUNDS=${ROUNDS:-5} TUNES=${TUNES:-1}
BUDGET_S=${BUDGET_S:-560} JOBS=${JOBS:-experiments/device/jobs/narrow.txt}
root=runs/narrow_check
mkdir -p "$root"
t_start=$(date +%s)

for shape in $CHECKS; do
  [ "$SAMPLE" -gt 0 ] || break
  name=measure_${shape//,/x}
  t0=$(date +%s)
  timeout "${MEASURE_S:-30}" python3 -m bocast.cli measure gemm --shape "$shape" --space v3 \
    --sample "$SAMPLE" --fix bn=48 --fix bn=96 --seed 0 --max-seconds "${MEASURE_BATCH_S:-10}" \
    --store "$root/$name.db" --json > "$root/$name.log" 2>&1
  echo "measure gemm $shape v3, bn 48 or 96: exit $? in $(( $(date +%s) - t0 )) s"
done

shapes=""
for m in $MS; do shapes="$shapes $m,6144,4096"; done
# shellcheck disable=SC2086
python3 experiments/device/skinny_picks.py "$root" narrow $shapes

for m in $MS; do
  name=${m}x6144x4096
  t0=$(date +%s)
  timeout "${ITEM_S:-50}" python3 -m bocast.tools.remeasure "$root/picks_$name.json" --top 50 \
    --rounds "$ROUNDS" --out "$root/remeasure_$name.json" > "$root/remeasure_$name.log" 2>&1
  echo "remeasure $name: exit $? in $(( $(date +%s) - t0 )) s"
done
tar -czf "$OUT/narrow_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"

if [ "$TUNES" != 0 ]; then
  JOBS=$JOBS SEARCH_S=${SEARCH_S:-40} RUN_S=${RUN_S:-58} \
    BUDGET_S=$(( BUDGET_S - ($(date +%s) - t_start) )) \
    bash experiments/device/parallel_tunes.sh > "$OUT/tunes.txt" 2>&1
fi

python3 - "$root" <<'PY'
import glob, json, sys
from collections import Counter
root = sys.argv[1]
sys.path.insert(0, "experiments/device")
from store_rows import remeasure_tables, store, worst_ok  # noqa: E402

print("| check (bn 48 or 96) | rows | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, _, rows = store(db)
    print(f"| gemm {','.join(map(str, w.get('shape', [])))} | {len(rows)} | "
          f"{dict(Counter(st for _, st, _ in rows))} | {worst_ok(rows)} |")
    for c, st, _ in rows:
        if st != "ok":
            print(f"not ok: {st} {json.dumps(c, sort_keys=True)}")
print()
remeasure_tables(root)
PY
[ -f "$OUT/tunes.txt" ] && tail -n 9 "$OUT/tunes.txt"
