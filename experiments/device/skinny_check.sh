#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3 for skinny GEMMs (issue 38 item 3: split K, the
# target's SM count).
# 1. Correctness of split K on a ragged skinny shape: random v3 configurations of GEMM
#    100,1000,4040 (M, N and K ragged against every tile) with split_k 2, 4 or 8, batches of
#    SAMPLE=16 for MEASURE_BATCH_S=15 s, each built, run (the output zeroed by the launch, the
#    slices' partial sums added by TMA's reduce-add or red.global.add) and checked against the
#    float64 reference.
# 2. Cold tunes, v3 against v2: `bocast tune gemm --shape S --space SPACE --trials TRIALS
#    --warm-start none --seed 0` with an empty records library, for each S in SHAPES (LLM
#    decode projections, Llama-3-8B's MLP: 4096 -> 14336 and 14336 -> 4096, at M = 128 and
#    M = 16) and SPACE in v3, v2. Each run ends by re-timing its best kernels with cuBLAS in
#    turn (torch.mm, fp32 output, the same inputs).
# Tables last: split K's statuses by split_k and epilogue; per shape and space, best / cuBLAS,
# and the best v3 kernel's split_k, tile and epilogue.
#   bash experiments/device/skinny_check.sh     # defaults: under 540 s on a 16-core H200
#   (the measure at most MEASURE_S=40 s; each tune a TUNE_S=34 s wall budget for its trials and
#   at most RUN_S=58 s in all: 8 runs. A run the budget cuts before 64 trials says so in the
#   table's trials column; for 64 each, two calls of half the shapes with TUNE_S=60 RUN_S=90:)
#   SHAPES="128,14336,4096 128,4096,14336" SAMPLE=0 TUNE_S=60 RUN_S=90 bash experiments/device/skinny_check.sh
# Everything lands under $OUT (skinny_check.tar.gz: logs, records, summaries).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch; p = torch.cuda.get_device_properties(0); print(p.name, 'SMs', p.multi_processor_count)"
echo "cores $(nproc); $(nvcc --version | tail -1)"
SHAPES=${SHAPES:-"128,14336,4096 128,4096,14336 16,14336,4096 16,4096,14336"}
SPACES=${SPACES:-"v3 v2"}
TRIALS=${TRIALS:-64} SAMPLE=${SAMPLE:-16}
root=runs/skinny_check
mkdir -p "$root"

if [ "$SAMPLE" -gt 0 ]; then
  t0=$(date +%s)
  # every feasible configuration with split_k 2, 4 or 8, in seeded random order, batches of
  # SAMPLE until MEASURE_BATCH_S: a uniform sample of split K's sub-space
  timeout "${MEASURE_S:-40}" python3 -m bocast.cli measure gemm --shape 100,1000,4040 \
    --space v3 --all --fix split_k=2 --fix split_k=4 --fix split_k=8 --batch "$SAMPLE" \
    --max-seconds "${MEASURE_BATCH_S:-15}" --seed 0 --store "$root/measure_split.db" --json \
    > "$root/measure_split.log" 2>&1
  echo "measure gemm 100,1000,4040 v3, split_k > 1: exit $? in $(( $(date +%s) - t0 )) s"
  tail -2 "$root/measure_split.log"
fi

for shape in $SHAPES; do
  for space in $SPACES; do
    out=$root/gemm_${shape//,/x}_$space
    mkdir -p "$out"
    t0=$(date +%s)
    BOCAST_RECORDS=$(mktemp -d) timeout "${RUN_S:-58}" python3 -m bocast.cli tune gemm \
      --shape "$shape" --space "$space" --trials "$TRIALS" --seconds "${TUNE_S:-34}" --seed 0 \
      --warm-start none --retime-top 3 --output "$out" --json > "$out/tune.log" 2>&1
    echo "gemm $shape $space: exit $? in $(( $(date +%s) - t0 )) s"
  done
done

python3 - "$root" <<'PY'
import glob, json, os, sqlite3, sys
from collections import Counter, defaultdict
root = sys.argv[1]


sys.path.insert(0, "experiments/device")
from store_rows import store as _store, worst_ok  # noqa: E402


def store(db):
    return _store(db, tflops=True)


if os.path.exists(f"{root}/measure_split.db"):
    w, _, rows = store(f"{root}/measure_split.db")
    print(f"split K on {w.get('shape')} (v3, {len(rows)} configurations):")
    print("| split_k | epilogue | statuses | worst ok rel_error |")
    print("| --- | --- | --- | --- |")
    groups = defaultdict(list)
    for c, st, err, _ in rows:
        groups[(c.get("split_k", 1), c["epilogue"])].append((st, err))
    for (sk, ep), items in sorted(groups.items()):
        worst = max((e for st, e in items if st == "ok" and e is not None), default=None)
        print(f"| {sk} | {ep} | {dict(Counter(st for st, _ in items))} | {worst} |")
    print()
print("| shape | space | trials | best TFLOPS (re-timed) | cuBLAS TFLOPS | best / cuBLAS | "
      "best kernel | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for out in sorted(glob.glob(f"{root}/gemm_*/")):
    if not os.path.exists(f"{out}summary.json"):
        print(f"| {out} | no summary: see tune.log |")
        if os.path.exists(f"{out}tune.log"):
            print("".join(open(f"{out}tune.log").readlines()[-4:]))
        continue
    s = json.load(open(f"{out}summary.json"))
    w, ref, rows = store(f"{out}records.db")
    ok = [(tf, c) for c, st, _, tf in rows if st == "ok" and tf]
    # the re-timed best (the figure's), else the best in-run row
    best = s.get("best_config") or (max(ok, key=lambda x: x[0])[1] if ok else {})
    kernel = (f"split_k {best.get('split_k', 1)}, {best.get('bm')}x{best.get('bn')}, "
              f"{best.get('epilogue')}" if w.get("space") == "v3" and best else "")
    worst = max((e for _, st, e, _ in rows if st == "ok" and e is not None), default=None)
    print(f"| {','.join(map(str, w.get('shape', [])))} | {w.get('space')} | {s.get('trials')} | "
          f"{s.get('best_tflops') or 0:.1f} | {s.get('reference_tflops') or 0:.1f} | "
          f"{s.get('best_vs_reference') or 0:.3f} | {kernel} | {s.get('status')} | {worst} |")
PY
tar -czf "$OUT/skinny_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
