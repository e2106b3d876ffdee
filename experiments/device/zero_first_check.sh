#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; the carry is too large without
# `bash experiments/device/lean_tree.sh out`, which moves experiments/results away: then restore
# the one file this script reads, `git checkout -- experiments/results/skinny_tconv_h200x4/`):
# split K without the zeroing launch (`split_reduce` zero_first,
# bocast/space/operators/_hopper_zero_first.py: slice 0 of a tile zeroes the tile's output before
# its main loop and arrives on a per-tile flag in the module's memory; every slice adds its sums
# as the atomic mode does, a later slice after an acquire of the flag).
# Hypothesis (skinny_probe.py, H200): the atomic mode's zeroing, a second kernel in the graph,
# costs 1.4-2.4 us of cuBLAS's 15-18 us at N,K = 6144,4096, most of the gap of the best split-K
# kernels there (0.85-0.97 of cuBLAS); store_first (slice 0 stored, the others waited for its
# whole epilogue) gave that back in the wait. If the hypothesis holds, each zero_first twin is
# at least 5% faster than its atomic twin at M 64 and 128 (zf / atomic >= 1.05 in the same
# re-timing), every check below ok, the flags 0 after every launch. It is refuted if the twins
# are within 2% of atomic or slower there (then the zeroing launch is not what the graph timing
# charges, or slice 0's zeroing, drained by MEMBAR.GPU before its main loop, costs what the
# launch saved). Any wrong_result, NaN, fault, hang or non-zero flag is an ordering bug: the
# mode must not merge, whatever its speed.
# 1. Launches after the first (zero_first_relaunch.py): the runner checks only a kernel's first
#    launch, on flags fresh from the module's load. The twins below and SAMPLE_RELAUNCH=3
#    sampled zero_first configurations of each CHECKS shape: ROUNDS_RELAUNCH=10 launches into a
#    NaN-poisoned C, each checked against float64 and the flags read back, then BURST=200
#    launches back to back and one more checked.
# 2. Correctness as a tune sees it: random zero_first configurations (--fix
#    split_reduce=zero_first, seeded order, batches of SAMPLE=16 for MEASURE_BATCH_S=10 s) of
#    each GEMM in CHECKS (ragged M, N, K; swap_ab as sampled; persistent on and off; every
#    epilogue), built, run into a NaN-poisoned C (nothing zeroed by the runner), checked.
# 3. Twins, N,K = 6144,4096 fp16:fp32: for each M in MS the best atomic kernel of the last H200
#    tunes (experiments/results/skinny_tconv_h200x4/summaries.json) and the same knobs with
#    split_reduce zero_first, re-timed with cuBLAS in one process (`bocast remeasure`, ROUNDS
#    rounds, each kernel paired with cuBLAS): the zeroing's whole effect, nothing else changed.
# 4. The default command with --space v3 at the four shapes (JOBS, parallel_tunes.sh: one queue
#    a GPU; on an nvidia-h200-x4 all four at once, on one H200 queue 0's, M 64), each tune run
#    only if it can end within TOTAL_S=530 s of the start.
# Tables last. Everything under $OUT (zero_first_check.tar.gz; parallel_tunes.tar.gz).
#   bash experiments/device/zero_first_check.sh     # about 7-8 minutes (x4; x1: the same)
#   JOBS= SAMPLE=0 bash experiments/device/zero_first_check.sh   # launches and twins only
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
CHECKS=${CHECKS:-"100,1000,4040 24,1001,1008 128,6144,4096 16,6144,4096"}
MS=${MS:-"16 32 64 128"} SAMPLE=${SAMPLE:-16} ROUNDS=${ROUNDS:-5}
JOBS=${JOBS-experiments/device/jobs/skinny_zero_first.txt}
BESTS=experiments/results/skinny_tconv_h200x4/summaries.json
if [ ! -f "$BESTS" ]; then
  echo "$BESTS missing (lean_tree.sh out moved it: git checkout -- $BESTS)" >&2; exit 2
fi
root=runs/zero_first_check
mkdir -p "$root"
t_start=$(date +%s)

t0=$(date +%s)
timeout "${RELAUNCH_S:-150}" python3 experiments/device/zero_first_relaunch.py \
  "$root/relaunch.json" "$MS" "$CHECKS" > "$root/relaunch.txt" 2> "$root/relaunch.log"
echo "relaunch check: exit $? in $(( $(date +%s) - t0 )) s"

for shape in $CHECKS; do
  [ "$SAMPLE" -gt 0 ] || break
  name=measure_${shape//,/x}
  t0=$(date +%s)
  timeout "${MEASURE_S:-25}" python3 -m bocast.cli measure gemm --shape "$shape" --space v3 \
    --sample "$SAMPLE" --fix split_reduce=zero_first --seed 0 \
    --max-seconds "${MEASURE_BATCH_S:-10}" --store "$root/$name.db" --json > "$root/$name.log" 2>&1
  echo "measure gemm $shape zero_first: exit $? in $(( $(date +%s) - t0 )) s"
done

python3 - "$root" "$BESTS" $MS <<'PY'
import json, sys
from bocast.space.operators.operator import from_workload
root, bests, ms = sys.argv[1], sys.argv[2], [int(m) for m in sys.argv[3:]]
best = json.load(open(bests))
for m in ms:
    s = best[f"skinny_{m}x6144x4096"]
    op = from_workload({"op": "gemm", "shape": [m, 6144, 4096], "dtype": "fp16:fp32",
                        "layout": "NT", "space": "v3"})
    rows = []
    for name, reduce in (("atomic best (skinny_tconv_h200x4)", "atomic"),
                         ("its zero_first twin", "zero_first")):
        c = op.space.complete({**s["best_config"], "split_reduce": reduce})
        assert op.space.validate(c) == [], (name, op.space.validate(c))
        # recorded_tflops: the picks format wants one; the figures are the re-timing's own
        rows.append({"key": op.space.key(c), "config": dict(c), "recorded_tflops": 1.0,
                     "store": name, "workload": op.workload})
    json.dump({"workload": op.workload, "kernels": rows},
              open(f"{root}/picks_{m}x6144x4096.json", "w"), indent=0)
PY
for m in $MS; do
  t0=$(date +%s)
  timeout "${ITEM_S:-45}" python3 -m bocast.tools.remeasure "$root/picks_${m}x6144x4096.json" \
    --top 10 --rounds "$ROUNDS" --out "$root/remeasure_${m}x6144x4096.json" \
    > "$root/remeasure_${m}x6144x4096.log" 2>&1
  echo "remeasure ${m}x6144x4096: exit $? in $(( $(date +%s) - t0 )) s"
done
tar -czf "$OUT/zero_first_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"

if [ -n "$JOBS" ]; then
  left=$(( ${TOTAL_S:-530} - ($(date +%s) - t_start) ))
  echo "tunes: $left s left of TOTAL_S (RUN_S=${RUN_S:=150} a tune, SEARCH_S=${SEARCH_S:=110})"
  JOBS=$JOBS BUDGET_S=$left RUN_S=$RUN_S SEARCH_S=$SEARCH_S \
    bash experiments/device/parallel_tunes.sh > "$OUT/tunes.txt" 2>&1
fi

cat "$root/relaunch.txt"; tail -3 "$root/relaunch.log"
python3 - "$root" <<'PY'
import glob, json, os, sys
from collections import Counter, defaultdict
root = sys.argv[1]
sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402

print()
print("| check (zero_first) | swap_ab | persistent | epilogue | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, _, rows = store(db)
    groups = defaultdict(list)
    for c, st, err in rows:
        groups[(c.get("swap_ab"), c.get("persistent"), c.get("epilogue"))].append((c, st, err))
    for key, items in sorted(groups.items()):
        print(f"| gemm {','.join(map(str, w.get('shape', [])))} | {' | '.join(key)} | "
              f"{dict(Counter(st for _, st, _ in items))} | {worst_ok(items)} |")
print()
print("| M (N,K = 6144,4096) | cuBLAS TFLOPS | atomic / cuBLAS | zero_first / cuBLAS | "
      "zero_first / atomic |")
print("| --- | --- | --- | --- | --- |")
for path in sorted(glob.glob(f"{root}/remeasure_*.json"),
                   key=lambda p: int(os.path.basename(p).split("_")[1].split("x")[0])):
    r = json.load(open(path))
    frac = {("atomic" if k["store"].startswith("atomic") else "zero_first"):
            k.get("fraction_of_cublas") for k in r["kernels"]}
    a, z = frac.get("atomic"), frac.get("zero_first")
    print(f"| {r['workload']['shape'][0]} | {r['cublas_tflops']['median']:.1f} | "
          f"{a if a is None else f'{a:.3f}'} | {z if z is None else f'{z:.3f}'} | "
          f"{f'{z / a:.3f}' if a and z else '-'} |")
    for k in r["kernels"]:
        if not k.get("remeasured"):
            print(f"  {k['store']}: not timed ({k.get('build_status')}, {k.get('errors')})")
for log in sorted(glob.glob(f"{root}/remeasure_*.log")):
    if not os.path.exists(log.replace(".log", ".json")):
        print(f"{os.path.basename(log)}: no result: {''.join(open(log).readlines()[-3:])}")
PY
[ -f "$OUT/tunes.txt" ] && tail -8 "$OUT/tunes.txt"
