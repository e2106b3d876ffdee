#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3's split K reduced inside a cluster through
# distributed shared memory (`split_reduce` cluster, bocast/space/operators/_hopper_cluster_split.py:
# a tile's split_k k slices are the CTAs of one cluster, summed through mapa +
# ld.shared::cluster, stored once; no zeroed output, no atomics, any output type).
# 1. Correctness: every feasible cluster-mode configuration (--fix split_reduce=cluster), in
#    seeded random order, batches of SAMPLE=16 until MEASURE_BATCH_S=12 s, of each GEMM in
#    CHECKS (shape/dtype[/fuse]: ragged M, N against every tile, swap_ab on and off as sampled,
#    split K 2-8, fp32 and 16-bit outputs, N % 4 != 0, a fused bias+gelu applied to the sum),
#    each built, run and checked against the float64 reference (status ok = within the output
#    type's tolerance).
# 2. Speed, at Llama-3-8B's q/k/v projection N,K = 6144,4096 (fp16:fp32, cuBLAS torch.mm
#    with out_dtype float32): for each M in MS, the best atomic kernel of the last H200 run
#    (experiments/results/skinny_tconv_h200x4/summaries.json) and cluster-mode variants of its
#    tile (the same tile and split; split 8; another bn; the scalar epilogue, persistent off,
#    cluster 1x1 as the mode needs), each beside its atomic twin (the same knobs but
#    split_reduce atomic), re-timed with cuBLAS in one process (`bocast remeasure` of a picks
#    file: ROUNDS rounds, every kernel paired with cuBLAS in one task).
# Tables last: statuses by swap, split_k, dtype; per M, each kernel's median TFLOPS and
# fraction of cuBLAS (the atomic kernels' time includes the output's zeroing, as a user's
# launch needs it).
#   bash experiments/device/splitk_cluster_check.sh     # defaults: about 6 minutes on a 16-core H200
#   (each measure at most MEASURE_S=40 s, each re-timing ITEM_S=70 s: under 540 s in all)
#   SAMPLE=0 MS="16 128" bash experiments/device/splitk_cluster_check.sh   # speed only
# Everything lands under $OUT (splitk_cluster_check.tar.gz: logs, records, picks, re-timings).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
CHECKS=${CHECKS:-"24,1000,1008/fp16:fp32 24,1001,1008/fp16:fp16 16,6144,4096/fp16:fp16 128,6144,4096/fp16:fp32 64,1000,1024/bf16:bf16/bias+gelu"}
MS=${MS:-"16 32 64 128"} SAMPLE=${SAMPLE:-16} ROUNDS=${ROUNDS:-5}
root=runs/splitk_cluster_check
mkdir -p "$root"
t_start=$(date +%s)

if [ "$SAMPLE" -gt 0 ]; then
  for check in $CHECKS; do
    IFS=/ read -r shape dtype fuse <<< "$check"
    fuse=${fuse:-none}
    name=measure_${shape//,/x}_${dtype//:/_}_${fuse//+/_}
    t0=$(date +%s)
    timeout "${MEASURE_S:-40}" python3 -m bocast.cli measure gemm --shape "$shape" \
      --dtype "$dtype" --fuse "$fuse" --space v3 --all --fix split_reduce=cluster \
      --batch "$SAMPLE" --max-seconds "${MEASURE_BATCH_S:-12}" --seed 0 \
      --store "$root/$name.db" --json > "$root/$name.log" 2>&1
    echo "measure gemm $shape $dtype fuse $fuse v3, split_reduce cluster: exit $? in" \
      "$(( $(date +%s) - t0 )) s"
    tail -2 "$root/$name.log"
  done
fi

# the picks files: the atomic best of each M and cluster variants of its tile with atomic twins
python3 - "$root" $MS <<'PY'
import json, sys
from bocast.space.operators.operator import from_workload
root, ms = sys.argv[1], [int(m) for m in sys.argv[2:]]
best = json.load(open("experiments/results/skinny_tconv_h200x4/summaries.json"))
for m in ms:
    s = best[f"skinny_{m}x6144x4096"]
    w = {"op": "gemm", "shape": [m, 6144, 4096], "dtype": "fp16:fp32", "layout": "NT",
         "space": "v3"}
    op = from_workload(w)
    base = {**s["best_config"], "persistent": "off", "cluster": "1x1", "epilogue": "scalar",
            "split_reduce": "cluster"}
    split = base["split_k"]
    variants = {  # name -> knobs changed from the atomic best's tile (cluster mode)
        f"same tile, split {split}": {},
        f"same tile, split {split}, 1 consumer": {"consumers": 1, "arrangement": "cooperative"},
        f"same tile, split {2 * split}": {"split_k": 2 * split},
        "bn 128": {"bn": 128},
        f"bn 128, split {2 * split}": {"bn": 128, "split_k": 2 * split},
    }
    if base.get("swap_ab") == "on" and base["bm"] > m:  # C's tile as tall as M, no more
        variants[f"bm {m}, split {split}"] = {"bm": m}
    kernels = [("atomic best (skinny_tconv_h200x4)", s["best_config"])]
    for name, change in variants.items():
        c = op.space.complete({**base, **change})
        why = op.space.validate(c)
        if why:  # a variant the space refuses for this M: said, not timed
            print(f"M = {m}: {name} skipped: {', '.join(why)}")
            continue
        kernels += [(f"cluster: {name}", c), (f"atomic twin: {name}",
                                              {**c, "split_reduce": "atomic"})]
    rows = []
    for name, c in kernels:
        c = op.space.complete(c)
        assert op.space.validate(c) == [], (name, op.space.validate(c))
        # recorded_tflops: remeasure's file format wants one; these were not measured here
        # (1.0 keeps the order); the figures are the re-timing's own
        rows.append({"key": op.space.key(c), "config": dict(c), "recorded_tflops": 1.0,
                     "store": name, "workload": op.workload})
    json.dump({"workload": op.workload, "kernels": rows},
              open(f"{root}/picks_{m}x6144x4096.json", "w"), indent=0)
    print(f"M = {m}: {len(rows)} kernels -> picks_{m}x6144x4096.json")
PY

for m in $MS; do
  name=${m}x6144x4096
  if (( $(date +%s) - t_start + ${ITEM_S:-70} > ${BUDGET_S:-530} )); then
    echo "remeasure $name skipped (BUDGET_S=${BUDGET_S:-530} would not hold its ${ITEM_S:-70} s)"
    continue
  fi
  t0=$(date +%s)
  timeout "${ITEM_S:-70}" python3 -m bocast.tools.remeasure "$root/picks_$name.json" --top 50 \
    --rounds "$ROUNDS" --out "$root/remeasure_$name.json" > "$root/remeasure_$name.log" 2>&1
  echo "remeasure $name: exit $? in $(( $(date +%s) - t0 )) s"
done

python3 - "$root" <<'PY'
import glob, json, os, sys
from collections import Counter, defaultdict
root = sys.argv[1]
sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402

print("| check (split_reduce cluster) | swap_ab | split_k | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, _, rows = store(db)
    groups = defaultdict(list)
    for c, st, err in rows:
        groups[(c.get("swap_ab", "off"), c.get("split_k", 1))].append((c, st, err))
    for (swap, sk), items in sorted(groups.items()):
        print(f"| gemm {','.join(map(str, w.get('shape', [])))} {w.get('dtype')}"
              f"{' ' + w['fuse'] if w.get('fuse') else ''} | {swap} | "
              f"{sk} | {dict(Counter(st for _, st, _ in items))} | {worst_ok(items)} |")
print()
for path in sorted(glob.glob(f"{root}/remeasure_*.json")):
    r = json.load(open(path))
    ref = r["cublas_tflops"]
    print(f"{','.join(map(str, r['workload']['shape']))} fp16:fp32: cuBLAS "
          f"{ref['median']:.1f} TFLOPS [{ref['min']:.1f}-{ref['max']:.1f}]")
    print("| kernel | tile, split | swap | median TFLOPS [min-max] | / cuBLAS | status |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k in r["kernels"]:
        c, m = k["config"], k.get("remeasured")
        got = f"{m['median']:.1f} [{m['min']:.1f}-{m['max']:.1f}]" if m else "-"
        frac = f"{k['fraction_of_cublas']:.3f}" if m else "-"
        status = k["build_status"] + ("; " + k["errors"][0][:80] if k.get("errors") else "")
        print(f"| {k['store']} | {c['bm']}x{c['bn']}, {c.get('split_k', 1)} | "
              f"{c.get('swap_ab', 'off')} | {got} | {frac} | {status} |")
    print()
for log in sorted(glob.glob(f"{root}/remeasure_*.log")):
    if not os.path.exists(log.replace(".log", ".json")):
        print(f"{os.path.basename(log)}: no result; its last lines:")
        print("".join(open(log).readlines()[-6:]))
PY
tar -czf "$OUT/splitk_cluster_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
