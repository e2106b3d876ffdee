#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first): split K without the zeroing launch (`split_reduce` store_first,
# bocast/space/operators/_hopper_store_first.py: slice 0 stores, the other slices add once a
# per-tile flag in the module's memory says it has). The hypothesis (skinny_probe.py, H200): the
# atomic mode's zeroing, a second kernel, costs 1.4-2.4 us of cuBLAS's 15-18 us at N,K =
# 6144,4096, the whole gap of the best split-K kernels there (0.84-0.93 of cuBLAS).
# 1. Correctness: random store_first configurations (--fix split_reduce=store_first, seeded
#    order, batches of SAMPLE=16 for MEASURE_BATCH_S=10 s) of each GEMM in CHECKS (ragged M, N,
#    K; swap_ab as sampled; persistent on and off; every epilogue), each built, run and
#    checked against the float64 reference.
# 2. Twins, N,K = 6144,4096 fp16:fp32: for each M in MS the best atomic kernel of the last H200
#    tunes (experiments/results/skinny_tconv_h200x4/summaries.json) and the same knobs with
#    split_reduce store_first, re-timed with cuBLAS in one process (`bocast remeasure`, ROUNDS
#    rounds, each kernel paired with cuBLAS): the zeroing's whole effect, nothing else changed.
# 3. The default command with --space v3 at the four shapes (JOBS, parallel_tunes.sh).
# Tables last. Everything under $OUT (store_first_check.tar.gz; parallel_tunes.tar.gz).
#   bash experiments/device/store_first_check.sh     # about 8 minutes on a 16-core H200
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
CHECKS=${CHECKS:-"100,1000,4040 24,1001,1008 128,6144,4096 16,6144,4096"}
MS=${MS:-"16 32 64 128"} SAMPLE=${SAMPLE:-16} ROUNDS=${ROUNDS:-5}
root=runs/store_first_check
mkdir -p "$root"
for shape in $CHECKS; do
  [ "$SAMPLE" -gt 0 ] || break
  name=measure_${shape//,/x}
  t0=$(date +%s)
  timeout "${MEASURE_S:-30}" python3 -m bocast.cli measure gemm --shape "$shape" --space v3 \
    --all --fix split_reduce=store_first --batch "$SAMPLE" --seed 0 \
    --max-seconds "${MEASURE_BATCH_S:-10}" --store "$root/$name.db" --json > "$root/$name.log" 2>&1
  echo "measure gemm $shape store_first: exit $? in $(( $(date +%s) - t0 )) s"
done

python3 - "$root" $MS <<'PY'
import json, sys
from bocast.space.operators.operator import from_workload
root, ms = sys.argv[1], [int(m) for m in sys.argv[2:]]
best = json.load(open("experiments/results/skinny_tconv_h200x4/summaries.json"))
for m in ms:
    s = best[f"skinny_{m}x6144x4096"]
    op = from_workload({"op": "gemm", "shape": [m, 6144, 4096], "dtype": "fp16:fp32",
                        "layout": "NT", "space": "v3"})
    rows = []
    for name, reduce in (("atomic best (skinny_tconv_h200x4)", "atomic"),
                         ("its store_first twin", "store_first")):
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
tar -czf "$OUT/store_first_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"

[ -n "${JOBS:-}" ] && bash experiments/device/parallel_tunes.sh > "$OUT/tunes.txt" 2>&1

python3 - "$root" <<'PY'
import glob, json, os, sys
from collections import Counter, defaultdict
root = sys.argv[1]
sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402

print("| check (store_first) | swap_ab | persistent | epilogue | statuses | worst ok rel_error |")
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
for path in sorted(glob.glob(f"{root}/remeasure_*.json")):
    r = json.load(open(path))
    ref = r["cublas_tflops"]
    print(f"{','.join(map(str, r['workload']['shape']))}: cuBLAS {ref['median']:.1f} TFLOPS")
    for k in r["kernels"]:
        m = k.get("remeasured")
        print(f"  {k['store']}: " + (f"{m['median']:.1f} TFLOPS, {k['fraction_of_cublas']:.3f}"
                                     if m else f"- ({k['build_status']}, {k.get('errors')})"))
for log in sorted(glob.glob(f"{root}/remeasure_*.log")):
    if not os.path.exists(log.replace(".log", ".json")):
        print(f"{os.path.basename(log)}: no result: {''.join(open(log).readlines()[-3:])}")
PY
[ -f "$OUT/tunes.txt" ] && tail -8 "$OUT/tunes.txt"
