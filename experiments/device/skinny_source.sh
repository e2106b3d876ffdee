#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle, after `bash experiments/device/lean_tree.sh
# out`): a uniform v3 dataset of a skinny GEMM measured with the deep ring, exported into the
# package's shipped datasets (bocast/data/NAME), then the tunes of JOBS, whose warm start (auto)
# may take it as a source.
# Why (experiments/results/deep_ring_h200): at M = 128, N,K = 6144,4096 a no-split kernel with a
# deep ring (swap_ab, 128 x 64, 8 stages) reached 0.974 of cuBLAS re-timed, but the default tune
# reached 0.806: its warm start came from datasets measured before the deep ring (stages 2-6),
# and 1 of its 64 trials had a ring deeper than 6. A source measured with the deep ring at a
# skinny shape should carry that region to the skinny tunes, as the other v3 tables do for theirs.
# The source's shape is in no tune of JOBS: SHAPE (default 128,5120,5120: Llama-2-13B's q/k/v/o
# projection at a decode batch of 128), SAMPLE uniform configurations (seed 0), measured for at
# most MEASURE_S seconds (a uniform sample stopped part-way is still one).
#   JOBS=experiments/device/jobs/skinny_source.txt bash experiments/device/skinny_source.sh
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
SHAPE=${SHAPE:-128,5120,5120} SAMPLE=${SAMPLE:-256} BUDGET_S=${BUDGET_S:-540}
JOBS=${JOBS-experiments/device/jobs/skinny_source.txt}
name=gemm_${SHAPE//,/_}_v3
root=runs/skinny_source
mkdir -p "$root"
t_start=$(date +%s)
timeout $(( ${MEASURE_S:-240} + 30 )) python3 -m bocast.cli measure gemm --shape "$SHAPE" \
  --space v3 --sample "$SAMPLE" --seed 0 --max-seconds "${MEASURE_S:-240}" \
  --store "$root/$name.db" --export "bocast/data/$name" --json > "$root/$name.log" 2>&1
echo "measure gemm $SHAPE v3 ($SAMPLE sampled): exit $? in $(( $(date +%s) - t_start )) s"
mkdir -p "$OUT/data" && cp bocast/data/"$name".* "$OUT/data/"
tar -czf "$OUT/skinny_source.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
if [ -n "$JOBS" ]; then
  BUDGET_S=$(( BUDGET_S - ($(date +%s) - t_start) )) JOBS=$JOBS SEARCH_S=${SEARCH_S:-45} \
    RUN_S=${RUN_S:-70} bash experiments/device/parallel_tunes.sh > "$OUT/tunes.txt" 2>&1
fi
python3 - "$root/$name.db" <<'PY'
import sys
from collections import Counter
sys.path.insert(0, "experiments/device")
from store_rows import store  # noqa: E402
w, ref, rows = store(sys.argv[1], tflops=True)
ok = sorted((r for r in rows if r[1] == "ok"), key=lambda r: -r[3])
print(f"{w.get('shape')}: {len(rows)} rows {dict(Counter(r[1] for r in rows))}; reference "
      f"{ref.get('tflops', 0):.1f} TFLOPS; stages >= 8 in {sum(r[0]['stages'] >= 8 for r in rows)}")
print("| TFLOPS | / reference | bm x bn | stages | split_k | swap_ab | cluster | epilogue |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for c, _, _, tf in ok[:8]:
    print(f"| {tf:.1f} | {tf / ref['tflops']:.3f} | {c['bm']}x{c['bn']} | {c['stages']} | "
          f"{c['split_k']} | {c['swap_ab']} | {c['cluster']} | {c['epilogue']} |")
PY
[ -f "$OUT/tunes.txt" ] && tail -n 9 "$OUT/tunes.txt"
