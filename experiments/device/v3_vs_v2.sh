#!/usr/bin/env bash
# On the GPU machine (carry .devbundle): space v3 against v2, first on GEMM shapes v3 could not
# take before it had ragged extents (M below a tile, K not a multiple of the k block, extents
# not multiples of the tiles), then on conv2d (OP=conv2d). Per shape, space and seed:
# `bocast tune OP --shape S --space V`,
# cold (WARM=none, the default here) or warm-started (WARM=auto: the shipped records), BO, TRIALS
# trials, batch 16, each in an empty records library; the vendor reference timed by each run.
# With TOP=N, each shape's N best kernels of each space are then re-timed in one process beside
# the reference (bocast remeasure, 5 rounds). Summary tables last.
#   SHAPES="32,4096,4096 32,2048,1000 1000,1000,1000" SEEDS="0" TRIALS=64 \
#     BUDGET_S=540 bash experiments/device/v3_vs_v2.sh
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
export SHAPES=${SHAPES:-"32,4096,4096 32,2048,1000 1000,1000,1000"} SEEDS=${SEEDS:-0}
export TRIALS=${TRIALS:-64} OP=${OP:-gemm} SPACES=${SPACES:-"v3 v2"} WARM=${WARM:-none}
run_all() {
  for seed in $SEEDS; do for shape in $SHAPES; do for space in $SPACES; do
    out=runs/v3_vs_v2/${OP}_${shape//,/x}/${space}_s${seed}
    mkdir -p "$out"
    t0=$(date +%s)
    BOCAST_RECORDS=$(mktemp -d) python3 -m bocast.cli tune "$OP" --shape "$shape" --space "$space" \
      --seed "$seed" --trials "$TRIALS" --warm-start "$WARM" --output "$out" --json \
      > "$out/tune.log" 2>&1
    echo "$OP $shape $space seed $seed: exit $? in $(( $(date +%s) - t0 )) s"
  done; done; done
}
export -f run_all
timeout "${BUDGET_S:-540}" bash -c run_all
python3 - <<'PY'
import glob, json, os
print("| shape | space | seed | trials | best TFLOPS | reference TFLOPS | best / reference | statuses |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for log in sorted(glob.glob("runs/v3_vs_v2/*/*/tune.log")):
    lines = [l for l in open(log) if l.startswith("{")]
    if not lines:
        print(f"| {log} | no summary | | | | | | |"); continue
    s = json.loads(lines[-1]); parts = log.split("/")
    print(f"| {parts[2]} | {parts[3].split('_')[0]} | {parts[3].split('_s')[1]} | "
          f"{s.get('trials')} | {s.get('best_tflops') or 0:.1f} | "
          f"{s.get('reference_tflops') or 0:.1f} | {s.get('best_vs_reference') or 0:.3f} | "
          f"{s.get('status')} |")
PY
if [ "${TOP:-0}" -gt 0 ]; then
  for shape in $SHAPES; do
    n=${OP}_${shape//,/x}
    timeout "${REMEASURE_S:-200}" python3 -m bocast.tools.remeasure runs/v3_vs_v2/$n/*/records.db \
      --top "$TOP" --rounds 5 --out "$OUT/remeasure_$n.json" > "runs/v3_vs_v2/$n/remeasure.log" 2>&1
    echo "remeasure $n: exit $?"; tail -$(( 2 * TOP + 3 )) "runs/v3_vs_v2/$n/remeasure.log"
  done
fi
tar -czf "$OUT/v3_vs_v2.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' runs/v3_vs_v2
