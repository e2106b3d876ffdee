#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3's bf16 (issue 39, first step).
# 1. Correctness of each epilogue on a ragged shape: SAMPLE random v3 configurations of GEMM
#    1000,1024,1000 in bf16:bf16 and fp16:fp16 (16-bit outputs: the new epilogues), each
#    built, run and checked against the float64 reference (tolerance by the output's type).
# 2. The default command, cold (an empty records library, --warm-start none), seed 0:
#    `bocast tune OP --shape S --dtype D --trials TRIALS`, for each OP/SHAPE/DTYPE in RUNS;
#    the vendor reference (torch.mm / torch.bmm on the same bf16 inputs: out_dtype=float32
#    for an fp32 output) is timed by each run. One table last: the best tuned kernel's TFLOPS,
#    cuBLAS's, their ratio, trials and statuses.
#   bash experiments/device/bf16_check.sh     # defaults: about 4 minutes on a 16-core H200
#   (each measure at most MEASURE_S=60 s, each tune RUN_S=110 s: under the 600 s of one call)
#   RUNS="gemm/8192,8192,8192/bf16:bf16" TRIALS=64 bash experiments/device/bf16_check.sh
# Everything lands under $OUT (bf16_check.tar.gz: logs, records, summaries).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
RUNS=${RUNS:-"gemm/4096,4096,4096/bf16:fp32 gemm/4096,4096,4096/bf16:bf16 gemm/4096,4096,14336/bf16:bf16 bmm/32,2048,2048,128/bf16:bf16"}
TRIALS=${TRIALS:-64} SAMPLE=${SAMPLE:-12}
root=runs/bf16_check
mkdir -p "$root"

if [ "$SAMPLE" -gt 0 ]; then
  for dtype in bf16:bf16 fp16:fp16; do
    name=measure_1000x1024x1000_${dtype//:/_}
    timeout "${MEASURE_S:-60}" python3 -m bocast.cli measure gemm --shape 1000,1024,1000 \
      --dtype "$dtype" --space v3 --sample "$SAMPLE" --seed 0 --store "$root/$name.db" --json \
      > "$root/$name.log" 2>&1
    echo "measure gemm 1000,1024,1000 $dtype v3 ($SAMPLE configurations): exit $?"
    tail -2 "$root/$name.log"
  done
fi

for run in $RUNS; do
  IFS=/ read -r op shape dtype <<< "$run"
  out=$root/${op}_${shape//,/x}_${dtype//:/_}
  mkdir -p "$out"
  t0=$(date +%s)
  BOCAST_RECORDS=$(mktemp -d) timeout "${RUN_S:-110}" python3 -m bocast.cli tune "$op" \
    --shape "$shape" --dtype "$dtype" --trials "$TRIALS" --seed 0 --warm-start none \
    --output "$out" --json > "$out/tune.log" 2>&1
  echo "$op $shape $dtype: exit $? in $(( $(date +%s) - t0 )) s"
done

python3 - "$root" <<'PY'
import glob, json, os, sqlite3, sys
from collections import Counter
root = sys.argv[1]


sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402


print("| store | dtype | status by epilogue | worst ok rel_error |")
print("| --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, _, rows = store(db)
    by = Counter((c["epilogue"], st) for c, st, _ in rows)
    worst = max((e for _, st, e in rows if st == "ok" and e is not None), default=None)
    print(f"| {os.path.basename(db)} | {w.get('dtype')} | "
          f"{', '.join(f'{e} {st} {n}' for (e, st), n in sorted(by.items()))} | {worst} |")
print()
print("| op | shape | dtype | space | trials | best TFLOPS | cuBLAS TFLOPS | best / cuBLAS | "
      "reference | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for out in sorted(glob.glob(f"{root}/*/")):
    if not os.path.exists(f"{out}summary.json"):
        print(f"| {out} | no summary: see tune.log |")
        print("".join(open(f"{out}tune.log").readlines()[-5:]) if os.path.exists(
            f"{out}tune.log") else "")
        continue
    s = json.load(open(f"{out}summary.json"))
    w, ref, rows = store(f"{out}records.db")
    worst = max((e for _, st, e in rows if st == "ok" and e is not None), default=None)
    print(f"| {w.get('op')} | {','.join(map(str, w.get('shape', [])))} | {w.get('dtype')} | "
          f"{w.get('space')} | {s.get('trials')} | {s.get('best_tflops') or 0:.1f} | "
          f"{s.get('reference_tflops') or 0:.1f} | {s.get('best_vs_reference') or 0:.3f} | "
          f"{ref.get('what', '')} | {s.get('status')} | {worst} |")
PY
tar -czf "$OUT/bf16_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
